"""The one package that talks to Spark's JVM through py4j (docs/architecture.md: one narrow door).

Everything here uses only Spark's public JVM API; nothing is placed in Spark's own packages. sparkdl's own JVM
code (``jvm_bridge/``, shipped as :func:`jar_path`) is reached through :func:`bridge`, which returns its one
façade class ``org.sparkdl.bridge.Bridge``. ``python -m sparkdl.jvm`` prints the jar's path. The bridge's two stateful handles live in submodules:
:class:`~sparkdl.jvm.training_loop.TrainingLoop` (the JVM reduce) and :class:`~sparkdl.jvm.hadoop.HadoopFiles`.

A session started without the jar gets it at run time, as ``--jars`` would have given it (:func:`_attach`): the
driver's URL class loader (the one ``spark-submit`` creates for ``--jars``, which py4j resolves class names with)
takes the jar's URL, and ``SparkContext.addJar`` ships it to the executors, which add it to their task class
loaders before running a task. Where the driver's class loader takes no jars at run time, :func:`optional_bridge`
returns ``None`` and logs one warning naming the line that adds the jar; callers then take their Python path.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import weakref

__all__ = ["BridgeMissingError", "BRIDGE_CLASS", "bridge", "optional_bridge", "jar_path", "float_rows",
           "count_on_jvm", "empty_view", "persistent_rdd_count", "set_jvm_log_level", "jvm_log_level",
           "stop_console_progress_bar", "submitted_conf", "start_profiler", "stop_profiler"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # sparkdl/

#: The façade class of the JVM bridge.
BRIDGE_CLASS = "org.sparkdl.bridge.Bridge"

#: Spark's URL class loader with a public ``addURL``: what spark-submit makes the driver's context class loader.
_MUTABLE_LOADER = "org.apache.spark.util.MutableURLClassLoader"

log = logging.getLogger("sparkdl")

_bridges = weakref.WeakKeyDictionary()
_warned = weakref.WeakSet()  # SparkContexts told that they run without the bridge


class BridgeMissingError(RuntimeError):
    """The running Spark session cannot load sparkdl's JVM bridge (the jar is not on its class path, is not
    built, or is from another sparkdl version)."""


def jar_path() -> str:
    """Absolute path of ``sparkdl-bridge.jar`` inside the installed package (built by ``pip install``)."""
    return os.path.join(_PACKAGE, "jars", "sparkdl-bridge.jar")


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


@functools.lru_cache(maxsize=1)
def _checkout_build_module():
    """``jvm_bridge/build.py`` of the source checkout this package runs from, loaded as a module; ``None`` for an
    installed package (no sources next to it)."""
    import importlib.util
    build = os.path.join(os.path.dirname(_PACKAGE), "jvm_bridge", "build.py")
    if not os.path.isfile(build):
        return None
    spec = importlib.util.spec_from_file_location("sparkdl_jvm_bridge_build", build)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stale_checkout_jar() -> str | None:
    """In a source checkout (``jvm_bridge/build.py`` next to the package): why :func:`jar_path` was not built from
    the checkout's Java sources (they were edited or updated since the last build), else ``None``. An installed
    package has no sources to compare with."""
    import zipfile
    module = _checkout_build_module()
    if module is None or not os.path.isfile(jar_path()):
        return None
    try:
        with zipfile.ZipFile(jar_path()) as z:
            props = dict(line.split("=", 1) for line in z.read(module.PROPERTIES).decode().splitlines() if "=" in line)
    except (OSError, KeyError, zipfile.BadZipFile) as e:
        return f"{jar_path()} cannot be read ({e})"
    if props.get("sources") != module.sources_digest():
        return (f"{jar_path()} was built from other Java sources than this checkout's jvm_bridge/ (edited or "
                "updated since the last build)")
    return None


def _lookup(sc):
    """The bridge's façade class as the driver resolves it now, or ``None``."""
    from py4j.java_gateway import JavaClass
    cls = sc._jvm
    for part in BRIDGE_CLASS.split("."):
        cls = getattr(cls, part)
    return cls if isinstance(cls, JavaClass) else None


def _attach(sc) -> str | None:
    """Add :func:`jar_path` to the running driver JVM: to the calling thread's context class loader (py4j resolves
    class names with it; spark-submit makes it one ``MutableURLClassLoader`` that every py4j thread and Spark's own
    threads inherit, and gives it the ``--jars``). Returns ``None``, or why it cannot. Spark SQL's ``ADD JAR`` is
    not used: it adds the jar to a child loader and makes that the context loader of the calling thread only."""
    if not os.path.isfile(jar_path()):
        return f"the jar {jar_path()} does not exist"
    jvm = sc._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    mutable = jvm.org.apache.spark.util.MutableURLClassLoader._java_lang_class  # a public Java class of Spark's
    if loader is None or not mutable.isInstance(loader):
        name = "none" if loader is None else loader.getClass().getName()
        return f"the driver's class loader ({name}) takes no jars at run time (only a {_MUTABLE_LOADER} does)"
    loader.addURL(jvm.java.io.File(jar_path()).toURI().toURL())
    return None


def _ship_to_executors(sc) -> None:
    """``SparkContext.addJar`` of :func:`jar_path` unless this SparkContext already lists a jar of its name (from
    ``spark.jars``/``--jars``): tasks submitted from now on load it on their executors."""
    jsc = sc._jsc.sc()
    name = os.path.basename(jar_path())
    listed = jsc.listJars()
    if not any(str(listed.apply(i)).rsplit("/", 1)[-1] == name for i in range(listed.size())):
        jsc.addJar(jar_path())


def bridge(sc):
    """The JVM façade class ``org.sparkdl.bridge.Bridge`` (a py4j ``JavaClass``: call its static methods).

    A session started without the jar gets it now, on the driver and (for the tasks submitted from now on) the
    executors, as ``spark.jars`` would have given it.

    Parameters
    ----------
    sc : pyspark.SparkContext

    Raises
    ------
    BridgeMissingError
        If the driver JVM cannot load the class even after adding the jar at run time, or it reports another
        sparkdl version than this one; the message names the line to add to the session (``--jars <path>`` /
        ``spark.jars``). In a source checkout, also if the jar was built from other Java sources than the
        checkout's (rebuild it).
    """
    cls = _bridges.get(sc)
    if cls is not None:
        return cls
    stale = _stale_checkout_jar()
    if stale:
        raise BridgeMissingError(f"{stale}: rebuild it with 'python jvm_bridge/build.py' (or 'pip install -e .') and "
                                 "restart the Spark session (a running JVM keeps the classes it loaded).")
    from sparkdl import __version__
    cls = _lookup(sc)
    if cls is None:
        reason = _attach(sc)
        cls = _lookup(sc) if reason is None else None
        if cls is None:
            raise BridgeMissingError(f"sparkdl's JVM bridge ({BRIDGE_CLASS}) is not on this Spark session's class "
                                     f"path and cannot be added at run time: {reason or 'not found'}. {_how_to_add()}")
    found = cls.version()
    if found != __version__:
        raise BridgeMissingError(f"the Spark session has sparkdl's JVM bridge of version {found}, but this is sparkdl "
                                 f"{__version__}: a stale sparkdl-bridge.jar is on its class path. {_how_to_add()}")
    _ship_to_executors(sc)
    _bridges[sc] = cls
    return cls


def optional_bridge(sc):
    """:func:`bridge`, or ``None`` when this session cannot load it: then the first call per SparkContext logs one
    warning (sparkdl takes its Python paths: same results, slower) naming the line that adds the jar."""
    try:
        return bridge(sc)
    except BridgeMissingError as e:
        if sc not in _warned:
            _warned.add(sc)
            log.warning("sparkdl: training uses the Python reduce and transform the plain Arrow path (same results, "
                        "slower) because %s", e)
        return None


def float_rows(sc, column, size: int, error: str | None, kind: str):
    """``column`` (a Vector, dense or sparse, or an ``array<float>`` / ``array<double>``) as a ``binary`` Column
    holding each row's ``size`` values as float32, little endian (the bridge's bulk row reader: generated code
    reads Spark's internal row format, one memory copy per ``array<float>`` row).

    Parameters
    ----------
    sc : pyspark.SparkContext
    column : pyspark.sql.Column
    size : int
        Values per row.
    error : str, optional
        For invalid rows (null, another number of values, null elements, NaN or infinite values after narrowing
        to float32, sparse indices outside ``[0, size)`` or not increasing): None gives a null row; a message
        fails the task with it, ``{row}`` replaced by the row's value.
    kind : {'vector', 'float', 'double'}
        The column's type: a ``VectorUDT``, ``array<float>`` or ``array<double>`` (other arrays: cast first). A
        column of another type fails the task (arrays of one element excepted: their sizes cannot tell).

    Raises
    ------
    BridgeMissingError
        See :func:`bridge`.
    pyspark.errors.IllegalArgumentException
        For a ``size`` < 1 or another ``kind``, naming it.
    """
    from pyspark.sql.classic.column import Column
    return Column(bridge(sc).floatRows(column._jc, kind, int(size), error))


def widen_halves(sc, halves: bytes) -> bytes:
    """Little-endian float16 bytes widened to float32 bytes by the bridge, as its AllReduce widens
    ``compress='fp16'`` gradient records (for tests against numpy)."""
    return bytes(bridge(sc).widenHalves(bytearray(halves)))


def count_on_jvm(rdd) -> int:
    """Run an action over ``rdd`` without a Python pass over its output: the JVM counts the serialized
    batches. Materializes (and caches/checkpoints, if marked) every partition."""
    return int(rdd._jrdd.count())


def persistent_rdd_count(sc) -> int:
    """Number of RDDs currently persisted in this SparkContext (leak checks)."""
    return int(sc._jsc.sc().getPersistentRDDs().size())


def resident_weight_blocks(sc) -> int:
    """Blocks of training weights kept on the executors (the JVM reduce's ``ResidentWeights``), in every block
    manager of the application (leak checks)."""
    return int(bridge(sc).residentWeightBlocks(sc._jsc))


def set_jvm_log_level(sc, logger: str, level: str) -> None:
    """Set one log4j logger's level (e.g. quiet a per-iteration Spark warning that sparkdl expects)."""
    jvm = sc._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        logger, jvm.org.apache.logging.log4j.Level.toLevel(level))


@contextlib.contextmanager
def jvm_log_level(sc, logger: str, level: str):
    """Set one log4j logger's level for the duration of a ``with`` block (then back to its effective level
    before the block), e.g. around a job whose expected warnings would only alarm the user."""
    previous = sc._jvm.org.apache.logging.log4j.LogManager.getLogger(logger).getLevel().name()
    set_jvm_log_level(sc, logger, level)
    try:
        yield
    finally:
        set_jvm_log_level(sc, logger, previous)


def submitted_conf(key: str) -> str | None:
    """The value ``spark-submit`` was given for ``key`` (``--conf``, properties file), read from the JVM that
    ``spark-submit`` started, before any SparkContext exists; ``None`` if not set."""
    from pyspark import SparkConf, SparkContext
    SparkContext._ensure_initialized()  # connects to spark-submit's JVM (the gateway SparkContext will use)
    return SparkConf().get(key, None)


def stop_console_progress_bar(sc) -> bool:
    """Stop Spark's console progress bar (``[Stage N:>  (0 + 2) / 2]``, on when ``spark.ui.showConsoleProgress``
    is true, the default of PySpark shells and notebooks) for the rest of this SparkContext. Returns whether
    there was one running."""
    bar = sc._jsc.sc().progressBar()
    if not bar.isDefined():
        return False
    bar.get().stop()
    return True


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


def start_profiler(sc) -> None:
    """Record per-job, per-stage task metrics on the driver JVM until :func:`stop_profiler` (benchmarks)."""
    bridge(sc).startProfiler(sc._jsc)


def stop_profiler(sc) -> list:
    """Stop the profiler; returns one dict per finished job: ``{"job", "ms", "stages": [...]}`` where each
    stage (in order) has its task count, wall time and summed task metrics in milliseconds."""
    import json
    return json.loads(bridge(sc).stopProfiler(sc._jsc))


