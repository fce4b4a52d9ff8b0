"""Matrix products of the layers on the calling thread's numba threads: BLAS stays at one thread, the product is cut.

BLAS runs on one thread in sparkdl (:func:`sparkdl.config.set_num_threads`: OpenBLAS's own pool spin-waits and
collapses when the machine's other cores are busy), so a layer whose time is its GEMMs (convolutions, Linear) did
not get faster with more threads. :func:`matmul` cuts a large product into one part per numba thread of the
calling thread and runs the parts at once, each a one-thread BLAS call (numpy releases the GIL): along the batch
axis of a batched product when it has at least as many matrices as threads (Winograd's 16 points, grouped
convolutions), else along the rows of ``a`` and ``out``. Every output element is computed by the same BLAS call on
the same operands as without the cut (a row block of ``a`` times ``b``), so the result does not depend on the
thread count (tested bitwise). Inside a row part of a split training step the calling thread has one numba thread
and the product is not cut again.
"""
from __future__ import annotations

import numpy as np

from sparkdl.config import get_num_threads
from sparkdl.threadpool import executor

__all__ = ["matmul", "MIN_SPLIT_FLOPS"]

#: Products below this many floating-point operations (``2 * M * N * K`` per matrix) run whole: a part handed to
#: another thread costs ~20-50 us to wake and join, about 2 MFLOP of one core's BLAS.
MIN_SPLIT_FLOPS = 1 << 23


def _parts(n: int, threads: int):
    bounds = np.linspace(0, n, threads + 1).round().astype(int)
    return [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``numpy.matmul(a, b, out=out)`` on the calling thread's numba threads (:func:`sparkdl.get_num_threads`).

    Parameters
    ----------
    a : ndarray, (M, K) or (B, M, K)
    b : ndarray, (K, N) or (B, K, N)
        Same float dtype as ``a``; a 2-D operand is shared by every matrix of a 3-D one.
    out : ndarray, optional
        (M, N) or (B, M, N), may be a strided view; allocated when None.

    Returns
    -------
    ndarray
        ``out``, the product.
    """
    if out is None:
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        out = np.empty(shape, np.result_type(a, b))
    threads = get_num_threads()
    if threads < 2 or 2 * out.size * a.shape[-1] < MIN_SPLIT_FLOPS:
        return np.matmul(a, b, out=out)
    if out.ndim == 3 and out.shape[0] >= threads:
        parts = [(np.s_[lo:hi] if a.ndim == 3 else np.s_[...], np.s_[lo:hi] if b.ndim == 3 else np.s_[...],
                  np.s_[lo:hi]) for lo, hi in _parts(out.shape[0], threads)]
    else:
        rows = a.shape[-2]
        if rows < threads:
            return np.matmul(a, b, out=out)
        parts = [((..., np.s_[lo:hi], np.s_[:]), np.s_[...], (..., np.s_[lo:hi], np.s_[:]))
                 for lo, hi in _parts(rows, threads)]
    futures = [executor(threads - 1).submit(np.matmul, a[sa], b[sb], out=out[so]) for sa, sb, so in parts[1:]]
    sa, sb, so = parts[0]
    try:
        np.matmul(a[sa], b[sb], out=out[so])
    finally:
        for f in futures:
            f.result()
    return out
