"""Executor-side computation of one partition's share of an iteration — plain numpy, no Spark imports.

The gradient itself is :func:`sparkdl.step.gradient_sum`, the function the single-process trainer
uses, which is why the two agree (bitwise with one thread per task; a task with several threads splits its
rows across them, :mod:`sparkdl.step.threads`, and agrees to float rounding).
"""
from __future__ import annotations

import gc
import os
import queue
import threading
from contextlib import contextmanager

import numpy as np

from sparkdl.allocator import retained_memory
from sparkdl.config import kernel_threads, thread_pool_size
from sparkdl.step import task_gradient_sum

__all__ = ["local_gradient", "dropout_rng", "task_threads", "task_scope", "freeze_worker_heap", "read_ahead"]


def dropout_rng(seed: int, epoch: int, iteration: int, partition: int) -> np.random.Generator:
    """The generator for randomness inside the forward pass (Dropout) of one partition and iteration.

    Derived only from explicit numbers, so a retried task draws exactly what the failed attempt drew.
    """
    return np.random.default_rng([seed, epoch, iteration, partition, 0xD80])


def local_gradient(model, loss_sum, x: np.ndarray, y: np.ndarray, rng: np.random.Generator):
    """Summed loss and gradient of ``model`` (weights already set) on one local batch.

    Returns
    -------
    grad_sum : ndarray, float32, shape (P,)
    loss_sum : float
    normalizer : float
        The denominator ``reduction='mean'`` would divide by (``loss.normalizer(y)``).
    """
    grad = model.zeros_like_parameters()
    loss_value, norm = task_gradient_sum(model, loss_sum, x, y, rng, grad)
    return grad, loss_value, norm


def task_threads(threads: int | None = None) -> int:
    """Threads for the running Spark task: ``threads``, else ``spark.task.cpus`` (1 outside a task), capped by
    numba's pool (:func:`sparkdl.config.thread_pool_size`)."""
    if not threads:
        from pyspark import TaskContext
        tc = TaskContext.get()
        threads = int(tc.cpus()) if tc is not None else 1
    return max(1, min(int(threads), thread_pool_size()))


@contextmanager
def task_scope(threads: int | None = None):
    """sparkdl's settings for the body of one Spark task, undone when it ends.

    Inside: numba kernels use :func:`task_threads` threads and BLAS one (:func:`sparkdl.config.kernel_threads`),
    and glibc's ``malloc`` keeps freed blocks for reuse (:func:`sparkdl.allocator.retained_memory`). On exit the
    thread counts are restored to what they were and the allocator to glibc's defaults,
    so a Python UDF of another library that Spark later runs in the same (reused) worker sees the process as
    Spark left it. Costs ~20 µs per task. The one lasting effect is :func:`freeze_worker_heap`'s ``gc.freeze``
    (it changes no result; see there).

    Yields
    ------
    int
        The task's numba thread count.
    """
    n = task_threads(threads)
    with kernel_threads(n), retained_memory():
        yield n


_FROZEN = False


def freeze_worker_heap() -> None:
    """Once per Python worker process: a full collection, then :func:`gc.freeze` of everything alive (imports,
    compiled kernels, the broadcast network), so later collections skip those objects. It outlasts the task
    (undoing it would bring the cost below back to every task); it changes no result for any code in the worker,
    only which objects the cycle collector examines.

    pyspark's daemon runs ``gc.collect()`` after every task. Over a worker's ~180,000 objects that costs
    ~80-90 ms per task (measured on the benchmark machine), as much as scoring ~2,500 rows with the MLP; after the
    freeze it costs microseconds. Call it after the task's first use of the broadcast value. Objects alive at that
    moment are never examined by the cycle collector again (reference counting still frees them): a one-time
    snapshot, bounded, and what later tasks create is collected as usual.
    """
    global _FROZEN
    if not _FROZEN:
        gc.collect()
        gc.freeze()
        _FROZEN = True


_STOP = object()


def read_ahead(items):
    """Iterate ``items`` with the next item read by a background thread while the caller works on this one.

    For a Python worker's input batches: pulling an Arrow batch out of Spark's socket is mostly waiting for the
    JVM to write it (a ``read`` system call, which releases the GIL). Measured in ``transform``'s worker (MLP,
    ``local[1]``, 1,024 rows of 784 floats per batch, ~24 µs per row in all), that wait was ~3 µs per row;
    read ahead, it is ~0.3 µs.

    At most one item is read ahead: the thread asks for item k + 1 only once the caller has taken item k, so at
    most two items are alive (the caller's and the one being read), where a plain iteration keeps one. Closing
    this generator (the caller stopped early or failed) lets the thread end after the read it is in; nothing
    waits for it, so ``items`` must not be used again until that read has returned. Where pyspark 4.3's own reader
    thread already feeds the worker (``spark.python.udf.pipelined.enabled``, seen as ``SPARK_PIPELINED_UDF=1``),
    ``items`` is iterated in the caller's thread instead.

    Parameters
    ----------
    items : iterable
        Consumed by the background thread only (one thread at a time, as any iterator requires).

    Yields
    ------
    object
        The items of ``items``, in order.

    Raises
    ------
    BaseException
        Whatever ``items`` raised, re-raised (with its traceback) when the caller asks for that item.
    """
    it = iter(items)
    if os.environ.get("SPARK_PIPELINED_UDF") == "1":
        yield from it
        return
    asks, results = queue.SimpleQueue(), queue.SimpleQueue()

    def pull():
        while asks.get() is not _STOP:
            try:
                results.put((True, next(it)))
            except StopIteration:
                results.put((False, None))
                return
            except BaseException as e:  # noqa: B036  (handed to the caller, which re-raises it)
                results.put((False, e))
                return

    threading.Thread(target=pull, name="sparkdl-read-ahead", daemon=True).start()
    asks.put(True)
    try:
        while True:
            more, item = results.get()
            if not more:
                if item is not None:
                    raise item
                return
            asks.put(True)
            yield item
    finally:
        asks.put(_STOP)
