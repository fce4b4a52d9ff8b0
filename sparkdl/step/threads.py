"""Threads inside one training step: the batch's rows split across threads, one model replica shared.

With ``n > 1`` numba threads (a Spark task with ``spark.task.cpus = n``, or :func:`sparkdl.set_num_threads`),
the kernels alone parallelise only their own loops, BLAS stays at one thread (its pool spins against other
processes), and every parallel kernel is a barrier: ~20 per LeNet-5 step, each waiting a whole time slice for a
thread the OS has descheduled on a loaded machine. Here the rows of the batch are split into ``n`` parts
instead, each part runs forward and backward on its own Python thread with single-threaded kernels (numba
kernels release the GIL; so does numpy's BLAS), and the parts' parameter gradients are summed in part order:
one synchronisation per step, plus two per BatchNorm layer.

Only models :func:`sparkdl.step.rows_splittable` accepts are split: no layer that mixes rows; attention and
recurrent layers only with ``batch_first`` (the split cuts axis 0). BatchNorm is split too: in training its
statistics are the whole batch's, so at each BatchNorm layer the parts exchange their counts, means and variances
(forward) and their two per-channel gradient sums (backward) through :class:`sparkdl.nn.row_parts.RowParts` (one
barrier each) and go on with the whole batch's values; its running statistics are updated once, by part 0.
Dropout is split too: every part gets a copy of the step's generator and the offset of its first row, and
sparkdl's dropout masks are a function of the seed drawn per call and of an element's row in the whole batch
(:mod:`sparkdl.nn.dropout_masks`), so the parts draw exactly the whole batch's masks and leave the generator
where the unsplit step leaves it. The engine's gradient tasks use it (:func:`task_gradient_sum`) when a
task has several threads (``threads_per_task`` / ``spark.task.cpus`` > 1). The result is deterministic for a
given thread count and differs from the one-thread result by float rounding only (a sum of part sums, as the
engine's partitions are): with more than one thread per task, distributed training equals the single-process
trainer to float tolerance rather than bitwise (with one thread, the default, bitwise as always).
"""
from __future__ import annotations

import copy

import numpy as np

from sparkdl.config import get_num_threads, set_thread_local_threads
from sparkdl.nn.dropout_masks import row_offset
from sparkdl.nn.row_parts import RowParts, row_part
from sparkdl.step.gradient import gradient_sum
from sparkdl.step.rows import batch_statistics_layers, rows_splittable
from sparkdl.step.work import forward_flops_per_row
from sparkdl.threadpool import executor

__all__ = ["split_gradient_sum", "task_gradient_sum", "MIN_ROWS_PER_THREAD", "MIN_FLOPS_PER_SYNC"]

#: Below this many rows per thread a part is too small for the split to pay (kernel calls dominate).
MIN_ROWS_PER_THREAD = 16

#: A model with BatchNorm layers is split only if each part's forward pass does at least this many FLOPs per
#: BatchNorm layer (each costs two synchronisations of the parts). Measured on 2 cores (bench/RESULTS.md, 28th
#: session): ResNet-20 at 32 rows per part (124M per layer) and MobileNetV2 at 64x64, 16 rows (16M) gained from the
#: split; MobileNetV3-small at 64x64, 16 rows (6M) lost.
MIN_FLOPS_PER_SYNC = 10_000_000


def _same_state(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def _part(model, loss_sum, xb, yb, rng, lo, grad, parts, index):
    set_thread_local_threads(1)  # this part's kernels run on this thread only
    with row_part(parts, index):  # BatchNorm layers exchange statistics with the other parts; an error frees them
        with row_offset(lo):  # the part's rows are rows lo, lo + 1, ... of the batch for the dropout masks
            y, cache = model.forward(xb, training=True, rng=rng)
        value, lcache = loss_sum.forward(y, yb)
        model.backward_parameters(cache, loss_sum.backward(lcache, 1.0), grad)
    return float(value)


def split_gradient_sum(model, loss_sum, xb, yb, grad_out, threads: int, rng=None) -> float:
    """Sum of the ``reduction='sum'`` loss over the batch, with the gradient of that sum written into
    ``grad_out``, computed by ``threads`` threads on consecutive row parts of nearly equal size.

    The caller checks :func:`rows_splittable` and that every part has at least :data:`MIN_ROWS_PER_THREAD`
    rows. Gradients are added in part order in the model's dtype, so the result is reproducible. Each part runs
    with its own copy of ``rng`` (a ``numpy.random.Generator``, or None) and the row offset of its first row, so
    it draws the dropout masks of its rows in the whole batch's masks; afterwards ``rng`` is in the state the
    parts ended in (they all make the same draws), the state an unsplit step leaves it in. An error in a part
    is raised again from the whole batch, so that it names the batch's rows.

    Parameters
    ----------
    model, loss_sum : Module, Loss
        The network and its ``reduction='sum'`` loss.
    xb, yb : ndarray
        The batch, (N, ...) each.
    grad_out : ndarray, float32, shape (P,)
        Overwritten with the gradient of the summed loss.
    threads : int
        Number of parts (threads), >= 2.
    rng : numpy.random.Generator, optional
        The step's generator for dropout; advanced as an unsplit step would advance it.

    Raises
    ------
    ValueError
        If the batch has fewer than ``2 * threads`` rows.
    RuntimeError
        If the parts made different numbers of draws from ``rng`` (a module whose draws depend on its rows).
    """
    if len(xb) < 2 * threads:  # a part of one row would give a BatchNorm1d part one value per channel
        raise ValueError(f"split_gradient_sum: {len(xb)} rows cannot make {threads} parts of at least 2 rows each; "
                         f"use gradient_sum (task_gradient_sum splits only from {MIN_ROWS_PER_THREAD} rows per part)")
    bounds = np.linspace(0, len(xb), threads + 1).astype(np.int64)
    grads = [grad_out] + [np.empty_like(grad_out) for _ in range(threads - 1)]
    rngs = [None if rng is None else copy.deepcopy(rng) for _ in range(threads)]  # same state each
    # Parts 1.. on the pool, part 0 on this thread, which is running already: one thread to wake instead of all
    # (the 2-thread step measured faster and steadier so, bench/RESULTS.md).
    parts = RowParts(threads)
    futures = [executor(threads - 1).submit(_part, model, loss_sum, xb[lo:hi], yb[lo:hi], r, int(lo), g, parts, i)
               for i, (lo, hi, r, g) in enumerate(zip(bounds[1:-1], bounds[2:], rngs[1:], grads[1:]), 1)]
    own = get_num_threads()
    try:
        try:
            first = _part(model, loss_sum, xb[:bounds[1]], yb[:bounds[1]], rngs[0], 0, grads[0], parts, 0)
        finally:
            set_thread_local_threads(own)  # _part sets this thread's numba threads to 1
        values = [first] + [f.result() for f in futures]
    except Exception:
        # A part's error names rows of its slice: rerun the whole batch on this thread (``rng`` is untouched so
        # far), which raises the same error with the batch's row positions (what the task's error context maps
        # to input rows).
        for f in futures:
            f.exception()  # wait for the other parts: they write into grads
        gradient_sum(model, loss_sum, xb, yb, rng, grad_out)
        raise
    if rng is not None:
        end = rngs[0].bit_generator.state
        if not all(_same_state(end, r.bit_generator.state) for r in rngs[1:]):
            raise RuntimeError("split_gradient_sum: the row parts drew different amounts from the random generator, "
                               "so the split batch cannot equal the whole one; a module's draws depend on its rows "
                               "(only models that rows_splittable accepts may be split)")
        rng.bit_generator.state = end
    for g in grads[1:]:
        grad_out += g
    return float(sum(values))


def _splits(model, loss_sum, xb, threads: int) -> bool:
    """Whether :func:`task_gradient_sum` splits this batch (see there)."""
    if threads < 2 or len(xb) < threads * MIN_ROWS_PER_THREAD or not rows_splittable(model, loss_sum):
        return False
    syncs = batch_statistics_layers(model)
    return not syncs or (len(xb) // threads) * forward_flops_per_row(model, xb.shape[1:]) >= MIN_FLOPS_PER_SYNC * syncs


def task_gradient_sum(model, loss_sum, xb, yb, rng, grad_out):
    """:func:`sparkdl.step.gradient_sum` for an engine task: with several numba threads on the calling thread,
    at least :data:`MIN_ROWS_PER_THREAD` rows per thread and a model :func:`rows_splittable` accepts, the rows
    are split across the threads (:func:`split_gradient_sum`); for a model with BatchNorm layers only when each
    part's forward work is at least :data:`MIN_FLOPS_PER_SYNC` per BatchNorm layer
    (:func:`sparkdl.step.work.forward_flops_per_row`), so that the two synchronisations per layer pay;
    otherwise exactly ``gradient_sum``, each kernel parallel on its own. The choice depends only on the model's
    layer shapes, the batch's shape and the thread count, and on nothing about the host: with numba's
    ``workqueue`` layer (no TBB) the parts still split, their parallel kernels taking turns
    (:func:`sparkdl.config.serializes_parallel_kernels`), so the bits are those of a host with TBB. Returns
    ``(loss_sum, normalizer)``."""
    threads = get_num_threads()
    if _splits(model, loss_sum, xb, threads):
        return (split_gradient_sum(model, loss_sum, xb, yb, grad_out, threads, rng),
                float(loss_sum.normalizer(yb)))
    return gradient_sum(model, loss_sum, xb, yb, rng, grad_out)
