"""The Spark Connect transport of the engine: one ``mapInArrow`` query per iteration, the reduce on the client.

A classic session runs an iteration as a two-stage RDD job (:mod:`sparkdl.engine.iteration`). A Connect session
has no RDDs, broadcasts or accumulators, so here an iteration is one DataFrame query over the cached
:class:`~sparkdl.engine.connect_data.ConnectBlocks`: its Python function computes each source partition's gradient
record with :func:`sparkdl.engine.tasks.partition_gradient` (the task body of both classic reduces), and the client
collects the records, sums every AllReduce block with :func:`sparkdl.engine.tasks.reduce_parts` (the fixed tree
over partition ids, the one summation order of every reduce) and applies the optimizer shard by shard with
:func:`sparkdl.engine.allreduce.update_shard`, with the blocks, clipping norms and per-tensor norms of the classic
Python reduce. The trajectory is therefore bitwise that of ``DistributedTrainer(jvm_reduce=False)`` for the same
data, partitioning and seed.

What ships: the model structure, loss and optimizer once per fit as a session artifact
(:class:`~sparkdl.engine.connect_session.SessionValue`); the current weights in each query's function (4 bytes per
parameter and buffer element, as the classic weight broadcast). The optimizer state stays on the client, so a lost
executor loses only cached data, which Spark recomputes from the frame's lineage.
"""
from __future__ import annotations

import math
from functools import partial

import numpy as np
from pyspark import cloudpickle

from sparkdl.engine.allreduce import mean_gradient, update_shard
from sparkdl.engine.connect_data import ConnectBlocks, partition_blocks
from sparkdl.engine.connect_session import SessionValue
from sparkdl.engine.tasks import FitContext, IterationContext, partition_gradient, reduce_parts
from sparkdl.engine.worker import task_scope
from sparkdl.kernels.half import to_half
from sparkdl.optim.trust import combine_tensor_norms

__all__ = ["ConnectAllReduce", "connect_gradient_task", "RECORD_SCHEMA"]

#: One gradient record per source partition with rows in the iteration's global batch.
RECORD_SCHEMA = "part int, grad binary, half boolean, loss double, norm double, buf binary, n long"



def _arrow_schema():
    # pyarrow is imported here, not with the module: it starts a thread, and pyspark's daemon forks its workers
    # after importing the engine (sparkdl.daemon.preload)
    import pyarrow as pa
    return pa.schema([("part", pa.int32()), ("grad", pa.binary()), ("half", pa.bool_()), ("loss", pa.float64()),
                      ("norm", pa.float64()), ("buf", pa.binary()), ("n", pa.int64())])


def connect_gradient_task(fit_value, weights, epoch: int, iteration: int, global_iteration: int, batches):
    """The query's function: one gradient record per source partition in this task's input (see
    :data:`RECORD_SCHEMA`; ``grad`` float32 bytes, or float16 with ``compress='fp16'``)."""
    blocks = partition_blocks(batches)  # reads the whole input: keeps the Python worker reusable
    if not blocks:
        return
    import pyarrow as pa  # see _arrow_schema
    schema = _arrow_schema()
    fit: FitContext = fit_value.value
    ctx = IterationContext(None, None, epoch, iteration, global_iteration, 0.0)
    with task_scope(fit.threads):
        for p in sorted(blocks):
            out = partition_gradient(fit, ctx, p, partial(blocks.get, p), weights)
            if out is None:
                continue
            grad, loss_sum, norm, (buf, n) = out
            half = fit.compress == "fp16"
            grad = to_half(grad) if half else grad
            yield pa.RecordBatch.from_pylist([{
                "part": p, "grad": grad.tobytes(), "half": half, "loss": float(loss_sum), "norm": float(norm),
                "buf": None if buf is None else np.asarray(buf, np.float32).tobytes(), "n": int(n)}],
                schema=schema)


def _parts(table) -> list:
    """``(p, grad, loss_sum, normalizer, (buffer_sum, n))`` per record, as the classic gradient task emits them."""
    out = []
    for r in table.to_pylist():
        grad = np.frombuffer(r["grad"], np.float16 if r["half"] else np.float32)
        buf = None if r["buf"] is None else np.frombuffer(r["buf"], np.float32)
        out.append((r["part"], grad, r["loss"], r["norm"], (buf, r["n"])))
    return out


def _copies(states: list) -> list:
    return [{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in s.items()} for s in states]


class ConnectAllReduce:
    """One fit's iterations on a Spark Connect session.

    Parameters
    ----------
    data : ConnectBlocks
        The cached training data.
    fit : FitContext
        Shipped once (``data_key`` must be None: Connect keeps no executor-local copies).
    bounds : ndarray
        AllReduce block boundaries, as the classic Python reduce uses them.

    Attributes
    ----------
    states : list of dict
        Every block's optimizer state, held on the client.
    """

    def __init__(self, data: ConnectBlocks, fit: FitContext, bounds: np.ndarray):
        if fit.data_key is not None:
            raise ValueError("ConnectAllReduce: executor-local data copies do not exist on Spark Connect")
        self._frame = data.frame
        self._fit = SessionValue(data.session, fit)
        # The optimizer as the executors of a classic reduce see it: a copy (update must not touch the trainer's).
        self._optimizer = cloudpickle.loads(cloudpickle.dumps(fit.optimizer))
        self._bounds = bounds
        self.states: list = []

    def set_states(self, states: list) -> None:
        """Make copies of ``states`` (one dict per block) the optimizer state."""
        self.states = _copies(states)

    def copy_states(self) -> list:
        """Copies of every block's state (for snapshots and checkpoints)."""
        return _copies(self.states)

    def gradients(self, weights, epoch: int, iteration: int, global_iteration: int) -> list:
        """The iteration's query: every source partition's gradient record, collected to the client."""
        fn = partial(connect_gradient_task, self._fit, weights, epoch, iteration, global_iteration)
        return _parts(self._frame.mapInArrow(fn, RECORD_SCHEMA).toArrow())

    def step(self, weights: np.ndarray, buffers: np.ndarray, epoch: int, iteration: int, global_iteration: int,
             lr: float) -> dict:
        """One iteration. Returns ``{k: (new_shard, (loss_sum, normalizer_sum, buffer_sum, n))}``, the format of
        the classic reduce's results (:class:`sparkdl.engine.tasks.ShardResults`); updates :attr:`states`."""
        parts = self.gradients((weights.copy(), buffers.copy()), epoch, iteration, global_iteration)
        bounds, opt = self._bounds, self._optimizer
        reduced = []
        for k in range(len(bounds) - 1):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            block_parts = [(p, g[lo:hi], loss if k == 0 else 0.0, norm, extra if k == 0 else None)
                           for p, g, loss, norm, extra in parts]
            reduced.append(reduce_parts(block_parts, hi - lo))
        grad_sq_norm = tensor_norms = None
        if opt.clip_norm is not None:
            grad_sq_norm = math.fsum(opt.partial_sq_norm(mean_gradient(r[0], r[2]), int(bounds[k]))
                                     for k, r in enumerate(reduced))
        if opt.needs_tensor_norms:
            tensor_norms = combine_tensor_norms([
                opt.partial_tensor_norms(np.array(weights[bounds[k]:bounds[k + 1]], np.float32),
                                         mean_gradient(r[0], r[2]), self.states[k], int(bounds[k]), lr,
                                         grad_sq_norm=grad_sq_norm) for k, r in enumerate(reduced)])
        results = {}
        for k, (grad_sum, loss_sum, norm_sum, buf, n) in enumerate(reduced):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            new = update_shard(opt, weights[lo:hi], grad_sum, norm_sum, self.states[k], lo, lr, grad_sq_norm,
                               tensor_norms)
            results[k] = (new, (loss_sum, norm_sum, buf, n))
        return results

    def close(self) -> None:
        self._fit.destroy()
