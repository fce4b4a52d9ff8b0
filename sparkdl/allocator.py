"""glibc ``malloc`` settings for sparkdl's bulk work: keep freed blocks for the next batch.

A forward pass allocates its activations afresh for every batch (MobileNetV2 at 224x224, batch 8: ~200 MiB of
arrays per call, up to 38 MiB each). By default glibc serves such blocks with ``mmap`` and unmaps them on
``free``, or trims the heap, so every batch page-faults in new zeroed memory: measured on the benchmark machine
(1 thread, eval forward), 18,800 page faults and 47 ms of system time per MobileNetV2 call (197 ms in all;
143 ms with the setting), 34,100 and 84 ms per SqueezeNet call (209 ms; 132 ms), LeNet-5 scoring 12,100 rows/s
in batches of 1,024 against 15,300 with it.

:func:`retained_memory` applies the setting for the duration of a block and restores glibc's documented
defaults after it. sparkdl uses it around each Spark task (:func:`sparkdl.engine.worker.task_scope`) and around
:func:`sparkdl.trainer.fit`, :func:`~sparkdl.trainer.predict` and :func:`~sparkdl.trainer.evaluate`; a single
``model(x)`` call does not (wrap a loop of them yourself). Importing sparkdl sets nothing. Elsewhere than glibc
(musl, macOS) every function here is a no-op.
"""
from __future__ import annotations

import ctypes
import functools
import threading
from contextlib import contextmanager

__all__ = ["retained_memory", "retain_freed_memory", "restore_allocator_defaults"]

#: glibc ``mallopt`` parameters (``malloc.h``), the values :func:`retain_freed_memory` sets and glibc's defaults
#: (``mallopt(3)``: 128 KiB each), which :func:`restore_allocator_defaults` sets back.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD = 32 << 20  # glibc's maximum on 64-bit systems
_TRIM_THRESHOLD = (1 << 31) - 1  # the largest value mallopt takes (an int): 2 GiB
_GLIBC_DEFAULT_THRESHOLD = 128 << 10


@functools.lru_cache(maxsize=1)
def _mallopt():
    """glibc's ``mallopt`` (looked up once per process), or None."""
    try:
        fn = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return fn


def retain_freed_memory() -> bool:
    """Make glibc's ``malloc`` reuse freed blocks of up to 32 MiB instead of giving them back to the system, and
    keep up to 2 GiB of freed heap (the process's peak, at most) for reuse.

    Both thresholds are set: the trim threshold alone turns off glibc's dynamic mmap threshold, after which every
    block over 128 KiB is mapped afresh (MobileNetV2's forward went from 197 to 537 ms). The trim threshold is the
    largest glibc takes: at 512 MiB, a BERT-mini batch whose activations grew the heap by 560 MiB gave it all back
    after each call in some processes (70,000 page faults and 0.70 instead of 0.47 s per call, depending on where
    the activations landed in the heap).

    Returns
    -------
    bool
        Whether both settings were applied (False where the C library is not glibc).
    """
    mallopt = _mallopt()
    return mallopt is not None and bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


def restore_allocator_defaults() -> bool:
    """Set glibc's mmap and trim thresholds back to their documented defaults (128 KiB each), undoing
    :func:`retain_freed_memory`. glibc offers no way to read the thresholds or to turn its dynamic mmap threshold
    back on, so a process that ran sparkdl's bulk work keeps fixed 128 KiB thresholds: freed memory is returned to
    the system as in a fresh process, and large blocks are mapped from the first time instead of after glibc's
    adjustment. Returns whether both were set (False where the C library is not glibc)."""
    mallopt = _mallopt()
    return mallopt is not None and bool(mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT_THRESHOLD))


_lock = threading.Lock()
_depth = 0


@contextmanager
def retained_memory():
    """Within the block (any thread's; blocks may nest and overlap), glibc keeps freed memory for reuse
    (:func:`retain_freed_memory`); when the last open block ends, its defaults are restored
    (:func:`restore_allocator_defaults`). Yields whether the setting is in force (False where the C library is
    not glibc). Costs ~2 µs per block."""
    global _depth
    with _lock:
        _depth += 1
        active = retain_freed_memory() if _depth == 1 else _mallopt() is not None
    try:
        yield active
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and active:
                restore_allocator_defaults()
