"""Python handle of the bridge's ``org.sparkdl.bridge.TrainingLoop``, the JVM reduce (:mod:`sparkdl.engine.jvm_reduce`)."""
from __future__ import annotations

import os

import numpy as np

from sparkdl import chunking
from sparkdl.jvm import bridge

__all__ = ["TrainingLoop"]


def _raw_python_rdd(java_rdd, sc, func, barrier: bool = False):
    """The JVM side of ``func`` mapped over a JavaRDD of ``byte[]``: ``func(split, frames)`` receives raw
    bytes records and yields raw bytes records (no pickling either way). ``barrier``: in Spark's barrier mode,
    i.e. its tasks are launched all together or not at all."""
    from pyspark import RDD
    from pyspark.serializers import NoOpSerializer
    source = RDD(java_rdd, sc, NoOpSerializer())
    mapped = (source.barrier() if barrier else source).mapPartitionsWithIndex(func)
    mapped._bypass_serializer = True
    return mapped._jrdd


class TrainingLoop:
    """Python handle of the bridge's ``org.sparkdl.bridge.TrainingLoop`` (see
    :mod:`sparkdl.engine.jvm_reduce`): every method is one py4j call with bytes in and out (the weights and
    states, the large ones, come back through a temporary file)."""

    def __init__(self, data_rdd, bounds, sizes, groups: int, driver_reduce: bool):
        sc = data_rdd.context
        self._sc = sc
        self._loop = bridge(sc).trainingLoop(sc._jsc, data_rdd._jrdd, bounds.astype("<i8").tobytes(),
                                             sizes.astype("<i8").tobytes(), int(groups), bool(driver_reduce),
                                             int(chunking.MAX_CHUNK_BYTES))

    def set_gradients(self, func) -> None:
        local = self._loop.localSource()
        self._loop.setGradients(_raw_python_rdd(self._loop.fullSource(), self._sc, func),
                                _raw_python_rdd(local, self._sc, func),
                                _raw_python_rdd(local, self._sc, func, barrier=True))

    def set_weights(self, packed, num_parameters: int) -> None:
        """``packed``: float32 parameters then buffers."""
        raw = memoryview(np.ascontiguousarray(packed, "<f4")).cast("B")
        self._upload(raw)
        self._loop.commitWeights(len(raw) // 4, int(num_parameters))

    def weights(self) -> bytes:
        return self._read("weights")

    def set_states(self, packed: bytes) -> None:
        """``packed``: :func:`sparkdl.engine.jvm_reduce.pack_states`."""
        self._upload(packed)
        self._loop.commitStates()

    def _upload(self, data) -> None:
        """``data`` (bytes-like) into the file the JVM creates for it (owner-only; it reads and deletes the file):
        py4j moves a byte array as base64 text in one command string, and a 64 MiB call held about four times its
        size in the driver JVM's heap."""
        with open(self._loop.uploadFile(), "r+b") as f:  # r+: write into the JVM's file, never create one
            f.write(data)

    def states(self) -> bytes:
        return self._read("states")

    def _read(self, what: str) -> bytes:
        """``what`` through a temporary file the JVM creates (owner-only) and this deletes: py4j's base64 text
        protocol moves ~10 MB/s (40 ms for LeNet-5's weights), a file ~1 ms."""
        path = self._loop.writeTemp(what)
        try:
            with open(path, "rb") as f:
                return f.read()
        finally:
            os.unlink(path)

    def step(self, epoch: int, iteration: int, global_iteration: int, program: bytes) -> bytes:
        return bytes(self._loop.step(int(epoch), int(iteration), int(global_iteration), program))

    def run(self, plan: bytes) -> bytes:
        """Several iterations in one Spark job (``TrainingLoop.run``; layouts there)."""
        return bytes(self._loop.run(plan))

    def invalidate_local_copies(self) -> None:
        self._loop.invalidateLocalCopies()

    def local_records(self) -> int:
        """Gradient records per AllReduce block the local-copy tasks send (0 before the first iteration)."""
        return int(self._loop.localRecords())

    def take_timings(self) -> dict:
        """Driver-side milliseconds summed since the last call: before the job, in the job's ``collect``,
        the sum and update on the driver (driver reduce only), committing the result (new broadcast,
        releases), and the number of iterations (benchmarks)."""
        before, job, reduce, commit, n = self._loop.takeTimings().split()
        return {"before_job_ms": float(before), "job_ms": float(job), "driver_reduce_ms": float(reduce),
                "commit_ms": float(commit), "iterations": int(n)}

    def lineage_depth(self) -> int:
        """Lines of the cached state RDD's debug string (bounded-lineage tests)."""
        return int(self._loop.statesLineageDepth())

    def close(self) -> None:
        self._loop.close()
