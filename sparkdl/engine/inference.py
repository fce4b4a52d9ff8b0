"""Distributed batched inference and evaluation: the model is broadcast once per call; each task runs
the forward pass in eval mode over its partition in batches."""
from __future__ import annotations

from functools import partial

import numpy as np
from pyspark import cloudpickle

from sparkdl.engine.broadcast import CloudBroadcast
from sparkdl.engine.connect_data import ConnectBlocks, partition_blocks
from sparkdl.engine.data import DataBlocks
from sparkdl.engine.worker import freeze_worker_heap, task_scope

__all__ = ["predict", "evaluate", "forward_in_batches"]


def forward_in_batches(model, x: np.ndarray, batch_size: int) -> np.ndarray:
    """Eval-mode forward over ``x`` in chunks of ``batch_size`` rows (output rows in input order)."""
    if len(x) == 0:
        return np.zeros((0,), model.dtype)
    return np.concatenate([model(x[i:i + batch_size]) for i in range(0, len(x), batch_size)])


def _predict_samples(bc_model, batch_size, rows):
    feats = [np.asarray(r, dtype=np.float32) for r in rows]
    if not feats:
        return
    with task_scope():
        model = bc_model.value
        freeze_worker_heap()
        out = forward_in_batches(model, np.stack(feats), batch_size)
    yield from out


def _predict_block(bc_model, batch_size, blocks):
    for x, _ in blocks:
        with task_scope():
            out = forward_in_batches(bc_model.value, x, batch_size)
            freeze_worker_heap()
        yield out


def _check_batch_size(batch_size):
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")


def predict(model, data, *, batch_size: int = 1024):
    """Model outputs for every sample, computed on the executors.

    Parameters
    ----------
    model : sparkdl.nn.Module
    data : pyspark.RDD of feature arrays, or DataBlocks
        An RDD whose elements are per-sample feature arrays of shape ``feature_shape``; or cached
        :class:`DataBlocks` (labels ignored).
    batch_size : int
        Rows per forward pass inside a task.

    Returns
    -------
    pyspark.RDD
        For an RDD input: one output array per sample, same partitioning and order. For DataBlocks: one
        ``(n_p, *output_shape)`` array per partition.
    """
    _check_batch_size(batch_size)
    rdd = data.rdd if isinstance(data, DataBlocks) else data
    bc = CloudBroadcast(rdd.context, model)
    fn = _predict_block if isinstance(data, DataBlocks) else _predict_samples
    return rdd.mapPartitions(partial(fn, bc, batch_size), preservesPartitioning=True)


def _evaluate_partition(bc, batch_size, integer_labels, blocks):
    model, metrics = bc.value
    freeze_worker_heap()
    states = [m.zero() for m in metrics]
    for x, y in blocks:
        if len(x) == 0:
            continue
        if integer_labels and y.dtype.kind != "i":
            y = y.astype(np.int64)
        with task_scope():
            for i in range(0, len(x), batch_size):
                out = model(x[i:i + batch_size])
                states = [m.update(s, out, y[i:i + batch_size]) for m, s in zip(metrics, states)]
    yield states


class _Shipped:
    """A value inside the query's function, read like a broadcast (``.value``): Spark Connect has no broadcast."""

    def __init__(self, value):
        self.value = value


def _evaluate_connect_task(shipped, batch_size, integer_labels, batches):
    """Every source partition's metric states (pickled) from Arrow batches of a ConnectBlocks frame."""
    import pyarrow as pa  # not with the module: pyarrow starts a thread, and pyspark's daemon forks after preload
    blocks = partition_blocks(batches)
    for p in sorted(blocks):
        for states in _evaluate_partition(shipped, batch_size, integer_labels, [blocks[p]]):
            yield pa.RecordBatch.from_pydict({"part": [p], "states": [cloudpickle.dumps(states)]},
                                             schema=pa.schema([("part", pa.int32()), ("states", pa.binary())]))


def _partial_states(model, data, metrics, batch_size, integer_labels) -> list:
    """Every partition's metric states, in partition order (an RDD job, or a query on Spark Connect)."""
    if isinstance(data, ConnectBlocks):
        fn = partial(_evaluate_connect_task, _Shipped((model, metrics)), batch_size, integer_labels)
        rows = data.frame.mapInArrow(fn, "part int, states binary").toArrow().to_pylist()
        return [cloudpickle.loads(r["states"]) for r in sorted(rows, key=lambda r: r["part"])]
    bc = CloudBroadcast(data.rdd.context, (model, metrics))
    try:
        return data.rdd.mapPartitions(partial(_evaluate_partition, bc, batch_size, integer_labels)).collect()
    finally:
        bc.destroy()


def evaluate(model, data: DataBlocks | ConnectBlocks, metrics, *, batch_size: int = 1024,
             integer_labels: bool = True) -> dict:
    """Evaluate ``metrics`` (mergeable accumulators from :mod:`sparkdl.metrics`) on cached blocks.

    Each partition accumulates a partial state; the driver merges them, so the result equals computing
    the metric on all the data at once.

    Returns
    -------
    dict
        ``metric.name -> value``.
    """
    _check_batch_size(batch_size)
    metrics = list(metrics)
    if not metrics:
        raise ValueError("evaluate: metrics must contain at least one metric")
    parts = _partial_states(model, data, metrics, batch_size, integer_labels)
    merged = [m.zero() for m in metrics]
    for states in parts:
        merged = [m.merge(a, b) for m, a, b in zip(metrics, merged, states)]
    return {m.name: m.result(s) for m, s in zip(metrics, merged)}
