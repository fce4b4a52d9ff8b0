"""The functions Spark tasks run on executors for one training iteration.

Stage 1 (:func:`gradient_task`, one task per cached data partition) computes the partition's summed
gradient on its share of the global batch and emits it cut into K blocks keyed by block id. Spark's
shuffle routes block k to reduce partition k. The cached optimizer-state RDD has the same partitioner, so
Spark's union of the two is co-partitioned (no shuffle of the state): task k of stage 2
(:func:`reduce_update_task`) sees block k's gradient parts and shard k's state in one Python pass, sums,
updates, caches the new state and sends the new weight shard to the driver.

Everything a task needs travels in a small :class:`IterationContext` (numbers and broadcast handles), so
task closures stay tiny. A retried task recomputes exactly what the failed attempt computed: all
randomness derives from ``(seed, epoch, iteration, partition)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from pyspark.accumulators import AccumulatorParam

from sparkdl.engine import local_cache
from sparkdl.engine.allreduce import mean_gradient, split_blocks, sum_block, update_shard
from sparkdl.engine.plan import local_schedule
from sparkdl.engine.task_errors import TrainingDivergedError, task_context
from sparkdl.engine.worker import dropout_rng, local_gradient, task_scope
from sparkdl.kernels.half import to_half
from sparkdl.step.tree_sum import TreeSum

__all__ = ["FitContext", "IterationContext", "gradient_task", "partition_gradient", "reduce_parts",
           "reduce_update_task", "reduce_only_task", "square_norm_task", "tensor_norms_task", "FaultInjected", "ShardResults"]


class ShardResults(AccumulatorParam):
    """Accumulator of ``{block id: result}`` dicts (merging by key: idempotent for retried tasks)."""

    def zero(self, value):
        return {}

    def addInPlace(self, a, b):
        a.update(b)
        return a


class FaultInjected(RuntimeError):
    """Raised by a test's fault-injection hook inside a task."""


@dataclass
class FitContext:
    """Broadcast once per fit: the model structure, the sum-reduced loss and the optimizer."""

    model: object
    loss: object
    optimizer: object
    bounds: np.ndarray  # AllReduce block boundaries (K + 1,)
    offsets: np.ndarray  # global id of each partition's first sample (P + 1,)
    batch_size: int
    seed: int
    shuffle: bool
    integer_labels: bool
    compress: str | None
    threads: int | None
    fault_hook: Callable | None = None
    data_key: str | None = None  # names the executor-local copies of the training partitions


@dataclass
class IterationContext:
    """Shipped with each iteration's tasks (small)."""

    fit: object  # Broadcast[FitContext]
    weights: object  # Broadcast[(flat_parameters, flat_buffers)]
    epoch: int
    iteration: int  # iteration within the epoch
    global_iteration: int
    lr: float
    grad_sq_norm: float | None = None  # global squared gradient norm, for clip_norm
    tensor_norms: dict | None = None  # per-tensor (||w||, ||u||), for optimizers with needs_tensor_norms


_SCHEDULES: dict = {}
_MAX_PLANS = 4096


def _maybe_fail(fit: FitContext, stage: str, partition: int, ctx: IterationContext):
    if fit.fault_hook is None:
        return
    from pyspark import TaskContext
    tc = TaskContext.get()
    attempt = tc.attemptNumber() if tc is not None else 0
    fit.fault_hook(stage=stage, partition=partition, epoch=ctx.epoch, iteration=ctx.global_iteration,
                   attempt=attempt)


def _local_rows(fit: FitContext, epoch: int, iteration: int, p: int) -> np.ndarray:
    """Rows of partition ``p`` in global batch ``iteration`` (the epoch plan is cached per worker)."""
    offset, stop = int(fit.offsets[p]), int(fit.offsets[p + 1])
    key = (fit.seed, epoch, p, offset, stop, fit.batch_size, fit.shuffle)
    plan = _SCHEDULES.get(key)
    if plan is None:
        # Keep every partition's plan of this epoch (a group task computes many partitions per iteration)
        # and of the previous one; plans of other epochs or fits go, so memory stays ~2 epochs of row ids.
        if len(_SCHEDULES) >= _MAX_PLANS:
            _SCHEDULES.clear()
        for old in [k for k in _SCHEDULES if not epoch - 1 <= k[1] <= epoch]:
            del _SCHEDULES[old]
        plan = _SCHEDULES[key] = local_schedule(fit.seed, epoch, int(fit.offsets[-1]), offset, stop - offset,
                                                fit.batch_size, fit.shuffle)
    rows, starts = plan
    return rows[starts[iteration]:starts[iteration + 1]]


def _partition_data(fit: FitContext, p: int, items: list):
    """Partition ``p``'s ``(x, y)``: from the task input (a full pass, which also refreshes the executor-local
    copy) or, over an empty view, from the executor-local copy; ``None`` if there is none."""
    if items:
        if fit.data_key is not None:
            local_cache.store(fit.data_key, p, *items[0])
        return items[0]
    return local_cache.load(fit.data_key, p) if fit.data_key is not None else None


def partition_gradient(fit: FitContext, ctx, p: int, data_source: Callable, weights):
    """Partition ``p``'s share of the iteration ``ctx`` (epoch, iteration, global_iteration), computed inside the
    task's :func:`sparkdl.engine.worker.task_scope` (the caller's, once per task): ``None`` when it
    has no rows in this global batch, :data:`MISS` when ``data_source()`` has no data for it, else
    ``(grad_sum, loss_sum, normalizer, extra)`` with ``extra = (buffer_sum_weighted or None, n)``.
    ``weights``: ``(parameters, buffers)``; parameters ``None`` when the caller has set them in ``fit.model`` for
    the whole task (a forward/backward pass leaves parameters as they are, as the reference assumes too).
    Both AllReduce paths (Python and JVM reduce) compute gradients with this one function."""
    _maybe_fail(fit, "gradient", p, ctx)
    if fit.offsets[p + 1] == fit.offsets[p]:
        return None
    idx = np.sort(_local_rows(fit, ctx.epoch, ctx.iteration, p))
    n = len(idx)
    if n == 0:
        return None
    data = data_source()
    if data is None:
        return MISS
    x, y = data
    model = fit.model
    w, buffers = weights
    if w is not None:  # None: the caller set this task's parameters already (the forward pass keeps them)
        model.flat_parameters[...] = w
    model.flat_buffers[...] = buffers
    with task_context("gradient", p, ctx.epoch, ctx.global_iteration, rows=idx):
        xb, yb = x[idx], y[idx]
        if fit.integer_labels and yb.dtype.kind != "i":
            yb = yb.astype(np.int64)
        grad, loss_sum, norm = local_gradient(model, fit.loss, xb, yb,
                                              dropout_rng(fit.seed, ctx.epoch, ctx.global_iteration, p))
        # min and max: NaN propagates through both, so this is "every element finite" in two fast passes (a
        # float64 sum was 2 ms per partition for 0.9M parameters, which 1000 partitions pay 1000 times)
        finite = grad.size == 0 or (np.isfinite(grad.min()) and np.isfinite(grad.max()))
        if not (np.isfinite(loss_sum) and finite):
            raise TrainingDivergedError(
                f"training diverged: the loss ({loss_sum}) or the gradient of this partition's share of the batch "
                "became NaN or infinite; the model keeps the last good weights and existing checkpoints are "
                "untouched. Check the data of this partition, lower the learning rate or enable gradient clipping "
                "(clip_norm)")
    extra = (model.flat_buffers * np.float32(n), n) if model.flat_buffers.size else (None, n)
    return grad, loss_sum, norm, extra


def gradient_task(ctx: IterationContext, p: int, blocks):
    """Stage 1 for partition ``p``: yields ``(k, (GRAD, (p, grad_block_k, loss_sum, normalizer, extra)))``
    for every block k; ``extra`` (on block 0 only) is ``(buffer_sum_weighted, n)`` for BatchNorm statistics.
    Without the partition's data (an empty view on an executor with no local copy) it yields
    ``(k, (MISS, p))`` for every block instead, and the driver reruns the iteration on the full data."""
    items = list(blocks)  # drain the iterator: keeps the Python worker reusable
    fit: FitContext = ctx.fit.value
    with task_scope(fit.threads):
        out = partition_gradient(fit, ctx, p, lambda: _partition_data(fit, p, items), ctx.weights.value)
    if out is None:
        return
    if out is MISS:
        for k in range(len(fit.bounds) - 1):
            yield k, (MISS, p)
        return
    grad, loss_sum, norm, extra = out
    if fit.compress == "fp16":
        grad = to_half(grad)
    for k, block in enumerate(split_blocks(grad, fit.bounds)):
        yield k, (GRAD, (p, block, loss_sum if k == 0 else 0.0, norm, extra if k == 0 else None))


GRAD, STATE, REDUCED, MISS = "g", "s", "r", "m"


def _reduce(k: int, size: int, records):
    """Sum the gradient parts of block k; pass the shard's state (and an already reduced block) through.

    Parts are summed in the fixed tree order over partition ids (:mod:`sparkdl.step.tree_sum`), not in shuffle
    arrival order, so the sum — and the whole run — is bit-reproducible whatever order the shuffle delivers
    them in, and equal to the reference's and the JVM reduce's. The reduced
    value is ``None`` when a partition reported a :data:`MISS` (the iteration must be rerun)."""
    parts, state, reduced, missed = [], None, None, False
    for _, (kind, value) in records:
        if kind == GRAD:
            parts.append(value)
        elif kind == STATE:
            state = value
        elif kind == REDUCED:
            reduced = value
        elif kind == MISS:
            missed = True
    if missed:
        return None, state
    if reduced is not None:  # second pass of a clip_norm iteration: the block was summed in the first
        return reduced, state
    return reduce_parts(parts, size), state


def reduce_parts(parts: list, size: int) -> tuple:
    """Sum one block's gradient parts ``(p, block, loss_sum, normalizer, extra)`` in the fixed tree over
    partition ids (:mod:`sparkdl.step.tree_sum`): ``(grad_sum, loss_sum, normalizer_sum, buffer_sum, n)``. The
    one summation order of every Python reduce (Spark stage 2 and the Connect client alike), the JVM reduce's
    and the single-process reference's, so their sums are bitwise equal."""
    grad_sum, loss_sum, norm_sum = sum_block(((p, blk, loss, norm) for p, blk, loss, norm, _ in parts), size)
    buffers = TreeSum(lambda a, b: (b[0] if a[0] is None or b[0] is None else a[0] + b[0], a[1] + b[1]))
    for p, *_, extra in sorted(parts, key=lambda part: part[0]):
        if extra is not None:
            buffers.push(p, 0, extra)
    buf, n = buffers.result() or (None, 0)
    return grad_sum, loss_sum, norm_sum, buf, n


def _writeable(state: dict) -> dict:
    """The shard state with writeable copies of its read-only arrays (cached/deserialized state is read-only)."""
    return {key: (v.copy() if isinstance(v, np.ndarray) and not v.flags.writeable else v) for key, v in state.items()}


def reduce_update_task(ctx: IterationContext, results, k: int, records):
    """Stage 2 for block ``k``, one Python pass: sum the block's gradient parts, apply the optimizer to
    weight shard k with shard k's state (which arrives in the same, co-partitioned, input) and emit
    ``(k, (STATE, new_state))`` — the only output record, cached on the executor for the next iteration.
    The new weight shard and the loss statistics go to the driver through the ``results`` accumulator
    (``{k: (new_shard, (loss_sum, normalizer_sum, buffer_sum, n))}``); merging by block id makes a
    retried or speculative task harmless."""
    fit: FitContext = ctx.fit.value
    _maybe_fail(fit, "reduce", k, ctx)
    lo, hi = int(fit.bounds[k]), int(fit.bounds[k + 1])
    reduced, state = _reduce(k, hi - lo, records)
    if state is None:
        raise RuntimeError(f"sparkdl: the optimizer state of shard {k} is missing from its reduce task")
    if reduced is None:  # a partition had no local data: leave shard k as it was
        results.add({k: MISS})
        yield k, (STATE, state)
        return
    grad_sum, loss_sum, norm_sum, buf, n = reduced
    state = _writeable(state)
    w, _ = ctx.weights.value
    with task_context("reduce", k, ctx.epoch, ctx.global_iteration):
        new = update_shard(fit.optimizer, w[lo:hi], grad_sum, norm_sum, state, lo, ctx.lr, ctx.grad_sq_norm,
                           ctx.tensor_norms)
    results.add({k: (new, (loss_sum, norm_sum, buf, n))})
    yield k, (STATE, state)


def reduce_only_task(ctx: IterationContext, k: int, records):
    """First pass of a ``clip_norm`` (or per-tensor norms) iteration: the summed block (kept cached) and the
    state, from which the driver's small jobs take the partial norms."""
    fit: FitContext = ctx.fit.value
    _maybe_fail(fit, "reduce", k, ctx)
    lo, hi = int(fit.bounds[k]), int(fit.bounds[k + 1])
    reduced, state = _reduce(k, hi - lo, records)
    yield k, ((MISS, k) if reduced is None else (REDUCED, reduced))
    yield k, (STATE, state)


def square_norm_task(ctx: IterationContext, record):
    """Partial squared L2 norm of a reduced block's mean gradient (0 for state records)."""
    k, (kind, value) = record
    if kind != REDUCED:
        return 0.0
    fit: FitContext = ctx.fit.value
    grad_sum, _loss, norm_sum, _buf, _n = value
    return fit.optimizer.partial_sq_norm(mean_gradient(grad_sum, norm_sum), int(fit.bounds[k]))


def tensor_norms_task(ctx: IterationContext, k: int, records):
    """Partial per-tensor sums of squares of reduced block k (``optimizer.partial_tensor_norms`` on the mean
    gradient, the weight shard and the shard's state, which is not modified); one dict per block."""
    reduced = state = None
    for _, (kind, value) in records:
        if kind == REDUCED:
            reduced = value
        elif kind == STATE:
            state = value
    if reduced is None or state is None:
        return
    fit: FitContext = ctx.fit.value
    lo, hi = int(fit.bounds[k]), int(fit.bounds[k + 1])
    grad_sum, _loss, norm_sum, _buf, _n = reduced
    w, _ = ctx.weights.value
    yield fit.optimizer.partial_tensor_norms(np.array(w[lo:hi], np.float32), mean_gradient(grad_sum, norm_sum),
                                             _writeable(state), lo, ctx.lr, grad_sq_norm=ctx.grad_sq_norm)
