"""One training iteration as one Spark job, driver side: build the RDDs of DESIGN.md's two stages and run them.

Stage 1 maps each data partition (or its empty, co-located stand-in when executors hold local copies) to
gradient blocks keyed by block id; ``partitionBy`` routes block k to reduce partition k. The cached
optimizer-state RDD has the same partitioner, so the union is co-partitioned and the state does not move.
Stage 2 reduces, updates and caches the new state; the new weight shards come back through an accumulator,
and the job's action is a JVM-side count, so no Python pass re-reads the state.
"""
from __future__ import annotations

import math
from functools import partial

from pyspark import StorageLevel

from sparkdl.engine import tasks
from sparkdl.jvm import count_on_jvm
from sparkdl.optim.trust import combine_tensor_norms

__all__ = ["block_id", "run_iteration"]


def block_id(k):
    """The partition function of gradient blocks and optimizer state: block k goes to partition k."""
    return k


def run_iteration(source, state_rdd, ctx: tasks.IterationContext, results, num_blocks: int, clip_norm,
                  tensor_norms: bool = False):
    """Run one iteration's job.

    Parameters
    ----------
    source : pyspark.RDD
        The cached data blocks, or :func:`sparkdl.jvm.empty_view` of them.
    state_rdd : pyspark.RDD
        Cached ``(k, (STATE, state))`` records, partitioned by :func:`block_id` into ``num_blocks``.
    results : pyspark.Accumulator
        Of :class:`tasks.ShardResults`; reset here, filled by the reduce tasks.
    clip_norm : float or None
        With a global-norm clip, stage 2 runs in two passes around one small job for the norm.
    tensor_norms : bool
        The optimizer needs per-tensor norms (``optimizer.needs_tensor_norms``: LARS, LAMB): stage 2 runs in two
        passes around one small job that collects every block's partial per-tensor norms (after the clip_norm
        job, whose global norm they depend on).

    Returns
    -------
    pyspark.RDD or None
        The new state RDD (cached, lineage truncated), or ``None`` when a partition had no local data
        (the caller reruns on the full data; the old state is untouched).
    """
    grads = source.mapPartitionsWithIndex(partial(tasks.gradient_task, ctx)).partitionBy(num_blocks, block_id)
    joined = grads.union(state_rdd)
    results.value = {}
    stage2 = joined
    if clip_norm is not None or tensor_norms:
        stage2 = joined.mapPartitionsWithIndex(partial(tasks.reduce_only_task, ctx), preservesPartitioning=True)
        stage2.persist(StorageLevel.MEMORY_AND_DISK)
    if clip_norm is not None:
        ctx.grad_sq_norm = math.fsum(stage2.map(partial(tasks.square_norm_task, ctx)).collect())
    if tensor_norms:
        ctx.tensor_norms = combine_tensor_norms(stage2.mapPartitionsWithIndex(partial(tasks.tensor_norms_task, ctx))
                                                .collect())
    updated = stage2.mapPartitionsWithIndex(partial(tasks.reduce_update_task, ctx, results),
                                            preservesPartitioning=True)
    updated.persist(StorageLevel.MEMORY_AND_DISK)
    updated.localCheckpoint()  # truncate lineage once materialized: iteration 10,000 costs what 10 costs
    try:
        count_on_jvm(updated)
    except BaseException:
        updated.unpersist()
        raise
    finally:
        if stage2 is not joined:
            stage2.unpersist()
    if any(isinstance(r, str) for r in results.value.values()):  # tasks.MISS
        updated.unpersist()
        return None
    return updated
