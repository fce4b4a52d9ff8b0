"""The one module that talks to Spark's JVM through py4j (DESIGN.md: one narrow door).

Everything here uses only Spark's public JVM API; nothing is placed in Spark's own packages.
"""
from __future__ import annotations

import contextlib

__all__ = ["count_on_jvm", "empty_view", "persistent_rdd_count", "set_jvm_log_level", "jvm_log_level",
           "stop_console_progress_bar", "submitted_conf"]


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
