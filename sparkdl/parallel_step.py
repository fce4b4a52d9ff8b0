"""Threads inside one training step: the batch's rows split across threads, one model replica shared.

With ``n > 1`` numba threads (a Spark task with ``spark.task.cpus = n``, or :func:`sparkdl.set_num_threads`),
the kernels alone parallelise only their own loops, BLAS stays at one thread (its pool spins against other
processes), and every parallel kernel is a barrier: ~20 per LeNet-5 step, each waiting a whole time slice for a
thread the OS has descheduled on a loaded machine. Here the rows of the batch are split into ``n`` parts
instead, each part runs forward and backward on its own Python thread with single-threaded kernels (numba
kernels release the GIL; so does numpy's BLAS), and the parts' parameter gradients are summed in part order:
one synchronisation per step.

Only models whose rows are independent are split (:func:`rows_independent`): no batch statistics (BatchNorm),
no random draws (Dropout with ``p > 0``). The engine's gradient tasks use it (:func:`task_gradient_sum`) when a
task has several threads (``threads_per_task`` / ``spark.task.cpus`` > 1). The result is deterministic for a
given thread count and differs from the one-thread result by float rounding only (a sum of part sums, as the
engine's partitions are): with more than one thread per task, distributed training equals the single-process
trainer to float tolerance rather than bitwise (with one thread, the default, bitwise as always).
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from sparkdl import nn
from sparkdl.config import get_num_threads, serializes_parallel_kernels
from sparkdl.nn.activation import _Elementwise
from sparkdl.nn.loss import SampleWeightedLoss
from sparkdl.trainer import gradient_sum

__all__ = ["rows_independent", "split_gradient_sum", "task_gradient_sum", "MIN_ROWS_PER_THREAD"]

#: Below this many rows per thread a part is too small for the split to pay (kernel calls dominate).
MIN_ROWS_PER_THREAD = 16

_ROWWISE = (nn.Sequential, nn.Residual, nn.Concat, nn.Linear, nn.Conv2d, nn.Conv1d, _Elementwise, nn.PReLU,
            nn.MaxPool2d, nn.MaxPool1d, nn.AvgPool2d, nn.AvgPool1d, nn.AdaptiveAvgPool2d, nn.Identity,
            nn.LayerNorm, nn.GroupNorm, nn.Embedding)

_ROWWISE_LOSSES = (nn.CrossEntropyLoss, nn.NLLLoss, nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.BCEWithLogitsLoss,
                   nn.BCELoss)

_pools: dict = {}  # thread count -> ThreadPoolExecutor, kept across steps
_pools_lock = threading.Lock()


def _forget_pools_in_child():  # a forked child inherits the pools (and lock) but none of their threads
    global _pools_lock
    _pools.clear()
    _pools_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools_in_child)


def rows_independent(model, loss=None) -> bool:
    """Whether every module of ``model`` (and ``loss``, if given) computes each row of a training batch on its
    own and without random draws, so that splitting the rows changes nothing but float rounding. A whitelist:
    layer types not listed here (BatchNorm, attention with dropout, imported ONNX graphs, ...) and losses other
    than sparkdl's per-row losses (a user loss may couple rows, e.g. in-batch negatives) are never split."""
    if loss is not None:
        inner = loss.loss if isinstance(loss, SampleWeightedLoss) else loss
        if type(inner) not in _ROWWISE_LOSSES:  # exactly these: a subclass may redefine forward
            return False
    for _, m in model.named_modules():
        if isinstance(m, nn.Dropout):
            if m.p > 0:
                return False
        elif isinstance(m, nn.Flatten):
            if m.start_dim <= 0:  # 0, or negative (counted from the end, may reach the batch axis)
                return False
        elif not isinstance(m, _ROWWISE):
            return False
    return True


def _executor(n: int) -> ThreadPoolExecutor:
    with _pools_lock:
        if n not in _pools:
            _pools[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="sparkdl-step")
        return _pools[n]


def _part(model, loss_sum, xb, yb, grad):
    numba.set_num_threads(1)  # per calling thread: this part's kernels run on this thread only
    y, cache = model.forward(xb, training=True, rng=None)
    value, lcache = loss_sum.forward(y, yb)
    model.backward_parameters(cache, loss_sum.backward(lcache, 1.0), grad)
    return float(value)


def split_gradient_sum(model, loss_sum, xb, yb, grad_out, threads: int) -> float:
    """Sum of the ``reduction='sum'`` loss over the batch, with the gradient of that sum written into
    ``grad_out``, computed by ``threads`` threads on consecutive row parts of nearly equal size.

    The caller checks :func:`rows_independent` and that every part has at least :data:`MIN_ROWS_PER_THREAD`
    rows. Gradients are added in part order in the model's dtype, so the result is reproducible. An error in a
    part is raised again from the whole batch, so that it names the batch's rows."""
    bounds = np.linspace(0, len(xb), threads + 1).astype(np.int64)
    grads = [grad_out] + [np.empty_like(grad_out) for _ in range(threads - 1)]
    futures = [_executor(threads).submit(_part, model, loss_sum, xb[lo:hi], yb[lo:hi], g)
               for lo, hi, g in zip(bounds[:-1], bounds[1:], grads)]
    try:
        values = [f.result() for f in futures]
    except Exception:
        # A part's error names rows of its slice: rerun the whole batch on this thread, which raises the same
        # error with the batch's row positions (what the task's error context maps to input rows).
        for f in futures:
            f.exception()  # wait for the other parts: they write into grads
        gradient_sum(model, loss_sum, xb, yb, None, grad_out)
        raise
    for g in grads[1:]:
        grad_out += g
    return float(sum(values))


def task_gradient_sum(model, loss_sum, xb, yb, rng, grad_out):
    """:func:`sparkdl.trainer.gradient_sum` for an engine task: with several numba threads on the calling thread,
    at least :data:`MIN_ROWS_PER_THREAD` rows per thread and a model whose rows are independent, the rows are
    split across the threads (:func:`split_gradient_sum`); otherwise exactly ``gradient_sum``. Not with numba's
    ``workqueue`` layer, which runs parallel kernels one call at a time
    (:func:`sparkdl.config.serializes_parallel_kernels`).
    Returns ``(loss_sum, normalizer)``."""
    threads = get_num_threads()
    if (threads > 1 and len(xb) >= threads * MIN_ROWS_PER_THREAD and not serializes_parallel_kernels()
            and rows_independent(model, loss_sum)):
        return split_gradient_sum(model, loss_sum, xb, yb, grad_out, threads), float(loss_sum.normalizer(yb))
    return gradient_sum(model, loss_sum, xb, yb, rng, grad_out)
