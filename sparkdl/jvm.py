"""The one module that talks to Spark's JVM through py4j (DESIGN.md: one narrow door).

Everything here uses only Spark's public JVM API; nothing is placed in Spark's own packages. sparkdl's own JVM
code (``jvm_bridge/``, shipped as :func:`jar_path`) is reached through :func:`bridge`, which returns its one
façade class ``org.sparkdl.bridge.Bridge``. ``python -m sparkdl.jvm`` prints the jar's path.
"""
from __future__ import annotations

import os
import weakref

__all__ = ["BridgeMissingError", "BRIDGE_CLASS", "bridge", "jar_path", "float_rows", "count_on_jvm", "empty_view",
           "persistent_rdd_count", "set_jvm_log_level"]

#: The façade class of the JVM bridge.
BRIDGE_CLASS = "org.sparkdl.bridge.Bridge"

_bridges = weakref.WeakKeyDictionary()


class BridgeMissingError(RuntimeError):
    """The running Spark session cannot load sparkdl's JVM bridge (the jar is not on its class path, is not
    built, or is from another sparkdl version)."""


def jar_path() -> str:
    """Absolute path of ``sparkdl-bridge.jar`` inside the installed package (built by ``pip install``)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "jars", "sparkdl-bridge.jar")


def _how_to_add() -> str:
    path = jar_path()
    if not os.path.isfile(path):
        return (f"The jar {path} does not exist: this sparkdl was installed without building it. Reinstall with "
                "'pip install .' (or 'pip install -e .'; building needs a JDK, javac), or run "
                "'python jvm_bridge/build.py' in a source checkout.")
    return ("Add the jar when the session is created (the JVM must start with it):\n"
            f"  spark-submit / pyspark / YARN:  --jars {path}\n"
            f"  SparkSession.builder:           .config(\"spark.jars\", \"{path}\")\n"
            "(append it, comma-separated, to any spark.jars you already have; 'python -m sparkdl.jvm' prints the "
            "path). Sessions created by sparkdl.engine.get_or_create_session add it themselves.")


def bridge(sc):
    """The JVM façade class ``org.sparkdl.bridge.Bridge`` (a py4j ``JavaClass``: call its static methods).

    Parameters
    ----------
    sc : pyspark.SparkContext

    Raises
    ------
    BridgeMissingError
        If the driver JVM cannot load the class, or it reports another sparkdl version than this one; the
        message names the line to add to the session (``--jars <path>`` / ``spark.jars``).
    """
    cls = _bridges.get(sc)
    if cls is not None:
        return cls
    from py4j.java_gateway import JavaClass

    from sparkdl import __version__
    cls = sc._jvm
    for part in BRIDGE_CLASS.split("."):
        cls = getattr(cls, part)
    if not isinstance(cls, JavaClass):
        raise BridgeMissingError(f"sparkdl's JVM bridge ({BRIDGE_CLASS}) is not on this Spark session's class "
                                 f"path. {_how_to_add()}")
    found = cls.version()
    if found != __version__:
        raise BridgeMissingError(f"the Spark session has sparkdl's JVM bridge of version {found}, but this is sparkdl "
                                 f"{__version__}: a stale sparkdl-bridge.jar is on its class path. {_how_to_add()}")
    _bridges[sc] = cls
    return cls


def float_rows(sc, column, size: int, error: str | None = None):
    """``column`` (a Vector, dense or sparse, or an array of numbers) as a ``binary`` Column holding each row's
    ``size`` values as float32, little endian (the bridge's bulk row reader).

    Parameters
    ----------
    sc : pyspark.SparkContext
    column : pyspark.sql.Column
    size : int
        Values per row.
    error : str, optional
        For invalid rows (null, another number of values, NaN or infinite values): None gives a null row;
        a message fails the task with it, ``{row}`` replaced by the row's value.

    Raises
    ------
    BridgeMissingError
        See :func:`bridge`.
    """
    from pyspark.sql.classic.column import Column
    return Column(bridge(sc).floatRows(column._jc, int(size), error))


def count_on_jvm(rdd) -> int:
    """Run an action over ``rdd`` without a Python pass over its output: the JVM counts the serialized
    batches. Materializes (and caches/checkpoints, if marked) every partition."""
    return int(rdd._jrdd.count())


def persistent_rdd_count(sc) -> int:
    """Number of RDDs currently persisted in this SparkContext (leak checks)."""
    return int(sc._jsc.sc().getPersistentRDDs().size())


def set_jvm_log_level(sc, logger: str, level: str) -> None:
    """Set one log4j logger's level (e.g. quiet a per-iteration Spark warning that sparkdl expects)."""
    jvm = sc._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        logger, jvm.org.apache.logging.log4j.Level.toLevel(level))


def empty_view(rdd):
    """An RDD with one empty partition per partition of ``rdd``, each preferring the executors that hold
    that partition of ``rdd`` in cache now (``SparkContext.getPreferredLocs``; ``makeRDD`` with location
    preferences, sampled to nothing on the JVM). Python tasks over it are scheduled next to the cached
    data without reading it: touching a cached block, even to discard it, costs tens of milliseconds
    per 100 MB."""
    from pyspark import RDD
    sc = rdd.context
    jvm, jsc = sc._jvm, sc._jsc.sc()
    java_rdd = rdd._jrdd.rdd()
    to_scala = jvm.scala.jdk.javaapi.CollectionConverters
    items = jvm.java.util.ArrayList()
    for p in range(rdd.getNumPartitions()):
        locations = jsc.getPreferredLocs(java_rdd, p)
        hosts = jvm.java.util.ArrayList()
        for j in range(locations.size()):
            hosts.add(locations.apply(j).toString())
        items.add(jvm.scala.Tuple2(p, to_scala.asScala(hosts).toSeq()))
    tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Object().getClass())
    located = jsc.makeRDD(to_scala.asScala(items).toSeq(), tag)
    empty = jvm.org.apache.spark.api.java.JavaRDD(located, tag).sample(False, 0.0, 0)
    return RDD(empty, sc, rdd._jrdd_deserializer)


if __name__ == "__main__":
    print(jar_path())
