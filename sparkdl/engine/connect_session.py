"""Spark Connect sessions: how sparkdl recognises one and ships Python objects to its executors once.

A Spark Connect session (``SparkSession.builder.remote("sc://...")``, Spark 4's client mode) has no SparkContext,
no RDDs, no broadcast variables and no py4j: only the DataFrame API reaches the cluster. sparkdl's Connect
transport (:mod:`sparkdl.engine.connect_reduce`) therefore ships what a classic session broadcasts either as a
session artifact (``spark.addArtifacts(..., file=True)``: uploaded once, read once per Python worker) or, where
the server refuses artifacts, inside the query's Python function (then once per query).
"""
from __future__ import annotations

import logging
import os
import sys
import tempfile
import uuid

from pyspark import SparkFiles, cloudpickle

from sparkdl.engine.broadcast import loaded

__all__ = ["is_connect", "default_parallelism", "SessionValue"]

log = logging.getLogger("sparkdl.engine")


def is_connect(spark) -> bool:
    """Whether ``spark`` is a Spark Connect session (``pyspark.sql.connect.session.SparkSession``).

    The Connect client module is imported only by Connect sessions, so a classic process never imports it here.
    """
    module = sys.modules.get("pyspark.sql.connect.session")
    return module is not None and isinstance(spark, module.SparkSession)


def default_parallelism(spark) -> int:
    """The session's default parallelism without a SparkContext: the partitions of ``spark.range`` (one small
    job; Spark gives a range ``spark.sql.leafNodeDefaultParallelism`` or the cluster's default parallelism)."""
    from pyspark.sql import functions as F
    return int(spark.range(0, 1 << 16).select(F.spark_partition_id().alias("p")).distinct().count())


class SessionValue:
    """A Python object shipped to a Connect session's executors once, read once per Python worker.

    Pickled with cloudpickle (so classes defined in ``__main__`` travel) and uploaded as a session artifact;
    tasks read the file from the session's working directory. The object itself stays out of every query's
    plan: a :class:`SessionValue` pickles to its file name only. When the server refuses the artifact, the
    bytes travel inside the value instead (in each query that references it).

    Parameters
    ----------
    spark : pyspark.sql.connect.session.SparkSession
    obj : object
        Anything cloudpickle can pickle.
    """

    def __init__(self, spark, obj):
        payload = cloudpickle.dumps(obj)
        self.name = f"sparkdl-{uuid.uuid4().hex}.pkl"
        self._payload = None
        directory = tempfile.mkdtemp(prefix="sparkdl-artifact-")
        path = os.path.join(directory, self.name)
        try:
            with open(path, "wb") as f:
                f.write(payload)
            spark.addArtifacts(path, file=True)
        except Exception as e:  # noqa: BLE001  (a server without artifact support: ship with each query)
            log.info("sparkdl: the Spark Connect server refused an artifact (%s: %s); the %d bytes travel inside "
                     "every query that uses them instead", type(e).__name__, e, len(payload))
            self._payload = payload
        finally:
            if os.path.exists(path):
                os.remove(path)
            os.rmdir(directory)

    @property
    def shipped_in_queries(self) -> bool:
        """True when the bytes travel inside every query (the server refused the artifact)."""
        return self._payload is not None

    @property
    def value(self):
        """The object (loaded once per Python process)."""
        return loaded(self.name, self._read)

    def _read(self) -> bytes:
        if self._payload is not None:
            return self._payload
        with open(os.path.join(SparkFiles.getRootDirectory(), self.name), "rb") as f:
            return f.read()

    def destroy(self) -> None:
        """Nothing to release (the counterpart of :meth:`CloudBroadcast.destroy`): Spark Connect has no call that
        removes an artifact, so the file stays in the session's directory until the session ends."""
