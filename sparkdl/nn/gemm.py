"""Matrix products of the layers on the calling thread's numba threads: BLAS stays at one thread, the product is cut.

BLAS runs on one thread in sparkdl (:func:`sparkdl.config.set_num_threads`: OpenBLAS's own pool spin-waits and
collapses when the machine's other cores are busy), so a layer whose time is its GEMMs (convolutions, Linear) did
not get faster with more threads. :func:`matmul` cuts a large product into one part per numba thread of the
calling thread and runs the parts at once, each a one-thread BLAS call (numpy releases the GIL): along the batch
axis of a batched product when it has at least as many matrices as threads (Winograd's 16 points, grouped
convolutions), else along the rows of ``a`` and ``out``, at multiples of :data:`ROW_ALIGN` rows; a product with
too few rows for that runs whole. Every output element is computed from the same row of ``a`` and column of ``b``
over the same inner dimension as without the cut, and each row lies at the same place within BLAS's row blocks,
so the result does not depend on the thread count (tested bitwise). Inside a row part of a split training step
the calling thread has one numba thread and the product is not cut again.

Why rows only, and aligned: OpenBLAS computes a block of rows with one register kernel and the last, partial block
with a narrower one that can round differently. Measured with OpenBLAS 0.3.31's Haswell kernels (AMD EPYC), a cut
at a multiple of 8 or 16 rows changed the bits of the rows around it, at 12, 24 or 48 it did not (SkylakeX kernels
take 4-16 rows: 48 is a multiple of every width seen); a cut through the columns of ``b`` changed them at every
alignment tried (16 to 1,024 columns), so columns are never cut.
"""
from __future__ import annotations

import numpy as np

from sparkdl.config import get_num_threads
from sparkdl.threadpool import executor

__all__ = ["matmul", "MIN_SPLIT_FLOPS", "ROW_ALIGN"]

#: Products below this many floating-point operations (``2 * M * N * K`` in all) run whole. A part handed to
#: another thread costs ~50-100 us to wake, join and re-take the GIL; one core's BLAS does ~90 GFLOP/s here, so
#: this keeps that cost near a tenth of the product. At 8 MFLOP, ResNet-20's training step (3,600 GEMMs of 16-64
#: rows) ran at 0.6x its one-thread speed on two threads (bench/zoo.py, idle).
MIN_SPLIT_FLOPS = 1 << 25

#: Row cuts fall on multiples of this many rows (see the module's notes); a product needs at least this many rows
#: per thread to be cut by rows.
ROW_ALIGN = 48


def _parts(n: int, threads: int, align: int = 1):
    """``threads`` ranges covering ``range(n)``, near-equal, every inner bound a multiple of ``align``."""
    bounds = (np.linspace(0, n / align, threads + 1).round() * align).astype(int)
    bounds[-1] = n
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
    elif a.shape[-2] >= threads * ROW_ALIGN:
        parts = [((..., np.s_[lo:hi], np.s_[:]), np.s_[...], (..., np.s_[lo:hi], np.s_[:]))
                 for lo, hi in _parts(a.shape[-2], threads, ROW_ALIGN)]
    else:  # too few rows to cut on BLAS's row blocks
        return np.matmul(a, b, out=out)
    futures = [executor(threads - 1).submit(np.matmul, a[sa], b[sb], out=out[so]) for sa, sb, so in parts[1:]]
    sa, sb, so = parts[0]
    try:
        np.matmul(a[sa], b[sb], out=out[so])
    finally:
        for f in futures:
            f.result()
    return out
