"""The process's helper threads for work split inside one call (a training step's row parts, a GEMM's row blocks).

One :class:`~concurrent.futures.ThreadPoolExecutor` per size, created on first use and kept; a forked child (Spark's
Python daemon forks its workers) forgets the parent's pools, whose threads it does not have. The caller runs one
part itself and ``n - 1`` parts on the pool of size ``n - 1``: one thread to wake per extra part.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["executor"]

_pools: dict = {}  # pool size -> ThreadPoolExecutor
_lock = threading.Lock()


def _forget_pools_in_child():
    global _lock
    _pools.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools_in_child)


def executor(n: int) -> ThreadPoolExecutor:
    """The pool of ``n`` threads (named ``sparkdl-pool-<n>``), created on first use."""
    with _lock:
        if n not in _pools:
            _pools[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix=f"sparkdl-pool-{n}")
        return _pools[n]
