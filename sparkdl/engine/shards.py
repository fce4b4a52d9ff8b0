"""The sharded optimizer state of a fit, kept on the executors: one cached RDD partition per AllReduce block.

Shard ``k``'s optimizer state (momentum, Adam moments) lives in partition ``k`` of a cached RDD partitioned like
the gradient blocks (the Python reduce), or in the JVM reduce's cached shards (:mod:`sparkdl.engine.jvm_reduce`,
which then also holds the current weights). It is shipped from the driver only at the start of a fit, on resume
and on recovery, and gathered to the driver only for snapshots and checkpoints. Each iteration's updated state
RDD replaces the previous one, whose cached blocks and weight broadcast are released, so cached blocks,
broadcasts and lineage stay bounded.
"""
from __future__ import annotations

from pyspark import StorageLevel

from sparkdl.engine import tasks
from sparkdl.engine.iteration import block_id

__all__ = ["ShardStates"]


class ShardStates:
    """Mixin of :class:`~sparkdl.engine.DistributedTrainer`: the optimizer state of every block on the executors.

    Uses the trainer's ``model``, ``_sc`` (the SparkContext of the fit), ``_jvm`` (the JVM reduce, or None) and
    ``_connect`` (the Spark Connect transport, :mod:`sparkdl.engine.connect_reduce`, or None);
    holds ``_state_rdd``, ``_state_broadcast`` (the weight broadcast the cached state RDD's closure references)
    and ``_model_stale`` (the JVM reduce holds newer weights than ``model``).
    """

    def _set_state_rdd(self, states):
        """Ship shard states to the executors (at the start, on resume and on recovery only); the JVM
        reduce also takes the model's current weights here. On Spark Connect the states stay on the client."""
        if self._connect is not None:
            self._connect.set_states(states)
            return
        if self._jvm is not None:
            self._jvm.set_states(states)
            self._jvm.set_weights(self.model.flat_parameters, self.model.flat_buffers)
            self._model_stale = False
            return
        records = [(k, (tasks.STATE, s)) for k, s in enumerate(states)]
        rdd = self._sc.parallelize(records, len(states)).partitionBy(len(states), block_id)
        self._replace_state_rdd(rdd.persist(StorageLevel.MEMORY_AND_DISK))

    def _replace_state_rdd(self, updated, broadcast=None):
        """Make ``updated`` (cached, partitioned like the gradient blocks, one ``(k, (STATE, state))`` record
        per partition) the optimizer state for the next iteration; release the previous one and its weight
        broadcast, so cached blocks, broadcasts and lineage stay bounded. ``None`` (the end of a fit) also
        closes the JVM reduce (and the Connect transport)."""
        if updated is None and self._connect is not None:
            self._connect.close()
            self._connect = None
        if updated is None and self._jvm is not None:
            self._jvm.close()
            self._jvm = None
        if self._state_rdd is not None:
            self._state_rdd.unpersist()
        if self._state_broadcast is not None:
            self._state_broadcast.destroy()
        self._state_rdd, self._state_broadcast = updated, broadcast

    def _collect_states(self) -> list:
        """Every shard's state, in block order, gathered to the driver (for snapshots and checkpoints)."""
        if self._connect is not None:
            return self._connect.copy_states()
        if self._jvm is not None:
            return self._jvm.states()
        pairs = sorted(self._state_rdd.collect(), key=lambda kv: kv[0])
        return [state for _, (_, state) in pairs]

    def _sync_model(self):
        """Copy the weights the JVM reduce holds into ``self.model`` (only when something reads them)."""
        if self._jvm is not None and self._model_stale:
            params, buffers = self._jvm.weights(self.model.num_parameters())
            self.model.flat_parameters[...] = params
            self.model.flat_buffers[...] = buffers
            self._model_stale = False
