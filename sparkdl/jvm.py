"""The one module that talks to Spark's JVM through py4j (DESIGN.md: one narrow door).

Everything here uses only Spark's public JVM API; nothing is placed in Spark's own packages.
"""
from __future__ import annotations

__all__ = ["count_on_jvm", "empty_view", "persistent_rdd_count", "set_jvm_log_level", "bridge_available",
           "TrainingLoop"]


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


def bridge_available(sc) -> bool:
    """Whether the sparkdl JVM bridge is on this session's driver class path."""
    from py4j.java_gateway import JavaClass
    return isinstance(sc._jvm.org.sparkdl.bridge.TrainingLoop, JavaClass)


def _bridge_class(sc, name: str):
    cls = getattr(sc._jvm.org.sparkdl.bridge, name)
    from py4j.java_gateway import JavaClass
    if not isinstance(cls, JavaClass):
        raise RuntimeError(f"sparkdl: the JVM bridge class org.sparkdl.bridge.{name} is not on this session's "
                           "class path")
    return cls


def _raw_python_rdd(java_rdd, sc, func):
    """The JVM side of ``func`` mapped over a JavaRDD of ``byte[]``: ``func(split, frames)`` receives raw
    bytes records and yields raw bytes records (no pickling either way)."""
    from pyspark import RDD
    from pyspark.serializers import NoOpSerializer
    mapped = RDD(java_rdd, sc, NoOpSerializer()).mapPartitionsWithIndex(func)
    mapped._bypass_serializer = True
    return mapped._jrdd


class TrainingLoop:
    """Python handle of the bridge's ``org.sparkdl.bridge.TrainingLoop`` (see
    :mod:`sparkdl.engine.jvm_reduce`): every method is one py4j call with bytes in and out."""

    def __init__(self, data_rdd, bounds, sizes, groups: int):
        sc = data_rdd.context
        self._sc = sc
        cls = _bridge_class(sc, "TrainingLoop")
        self._loop = cls(sc._jsc, data_rdd._jrdd, bounds.astype("<i8").tobytes(), sizes.astype("<i8").tobytes(),
                         int(groups))

    def set_gradients(self, func) -> None:
        self._loop.setGradients(_raw_python_rdd(self._loop.fullSource(), self._sc, func),
                                _raw_python_rdd(self._loop.localSource(), self._sc, func))

    def set_weights(self, packed, num_parameters: int) -> None:
        self._loop.setWeights(bytes(packed.tobytes()), int(num_parameters))

    def weights(self) -> bytes:
        return bytes(self._loop.weights())

    def set_states(self, packed: bytes) -> None:
        self._loop.setStates(packed)

    def states(self) -> bytes:
        return bytes(self._loop.states())

    def step(self, epoch: int, iteration: int, global_iteration: int, program: bytes) -> bytes:
        return bytes(self._loop.step(int(epoch), int(iteration), int(global_iteration), program))

    def invalidate_local_copies(self) -> None:
        self._loop.invalidateLocalCopies()

    def lineage_depth(self) -> int:
        """Lines of the cached state RDD's debug string (bounded-lineage tests)."""
        return int(self._loop.statesLineageDepth())

    def close(self) -> None:
        self._loop.close()
