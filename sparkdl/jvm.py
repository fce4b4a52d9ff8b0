"""The one module that talks to Spark's JVM through py4j (DESIGN.md: one narrow door).

Everything here uses only Spark's public JVM API; nothing is placed in Spark's own packages.
"""
from __future__ import annotations

__all__ = ["count_on_jvm", "persistent_rdd_count", "set_jvm_log_level"]


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
