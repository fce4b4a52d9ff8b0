"""float32 <-> IEEE binary16 conversions of gradient blocks (``compress='fp16'``), bit for bit numpy's.

numpy's ``astype(np.float16)`` converts one element at a time through a branchy scalar routine: 45-70 ms for 10M
values on the benchmark machine, more than the halved bytes save on a local link (bench/engine.py). These
kernels compute the same bits in loops LLVM vectorises (~10x faster):

* :func:`to_half`: round to nearest, ties to even; magnitudes from 65520 up become infinity; values below half's
  smallest normal (2**-14) become subnormals or signed zeros by the same rounding; NaN keeps its sign and the top
  ten bits of its payload (a payload that would vanish becomes 1, so it stays a NaN) -- numpy's
  ``npy_floatbits_to_halfbits``;
* :func:`from_half`: exact, by a table of the 65,536 float32 values that numpy gives the binary16 patterns.

Checked against numpy on all 2**32 float32 bit patterns when written; tests/test_half.py checks the classes
(normals, ties, overflow, subnormals, zeros, infinities, NaNs) on every run.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.config import njit_parallel

__all__ = ["to_half", "from_half"]

#: The float32 value of every binary16 bit pattern, by numpy's widening (exact).
_WIDE = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


@njit_parallel
def _to_half_bits(x, out):
    u = x.view(np.uint32)
    for i in prange(u.size):
        f = u[i]
        sign = np.uint16((f >> np.uint32(16)) & np.uint32(0x8000))
        a = f & np.uint32(0x7FFFFFFF)
        if a >= np.uint32(0x7F800000):  # infinity, or NaN with its payload's top bits (at least 1)
            p = np.uint16(0x7C00) | np.uint16((a & np.uint32(0x7FFFFF)) >> np.uint32(13))
            h = np.uint16(0x7C01) if a > np.uint32(0x7F800000) and p == np.uint16(0x7C00) else p
        elif a >= np.uint32(0x477FF000):  # 65520 and up: rounds to infinity
            h = np.uint16(0x7C00)
        elif a >= np.uint32(0x38800000):  # a normal half: rebias, then round the 13 dropped bits to even
            m = a - np.uint32(0x38000000)
            h = np.uint16((m + np.uint32(0xFFF) + ((m >> np.uint32(13)) & np.uint32(1))) >> np.uint32(13))
        else:  # below 2**-14: a multiple of 2**-24, rounded to even (x * 2**24 is exact)
            h = np.uint16(np.rint(np.abs(x[i]) * np.float32(16777216.0)))
        out[i] = sign | h


@njit_parallel
def _from_half_bits(h, table, out):
    for i in prange(h.size):
        out[i] = table[h[i]]


def to_half(x: np.ndarray) -> np.ndarray:
    """``x.astype('<f2')`` of a 1-D contiguous float32 array, bit for bit, in vectorised loops.

    Parameters
    ----------
    x : ndarray of float32, (n,), C-contiguous

    Returns
    -------
    ndarray of float16 ``'<f2'``, (n,)

    Raises
    ------
    TypeError
        ``x`` is not 1-D float32.
    """
    if x.dtype != np.float32 or x.ndim != 1:  # float64 through float32 would round twice
        raise TypeError(f"to_half: x must be a 1-D float32 array, got {x.ndim}-D {x.dtype}")
    out = np.empty(x.shape[0], np.uint16)
    _to_half_bits(np.ascontiguousarray(x), out)
    return out.view("<f2")


def from_half(h: np.ndarray) -> np.ndarray:
    """``h.astype(np.float32)`` of a 1-D float16 array (exact), by table.

    Parameters
    ----------
    h : ndarray of float16, (n,)

    Returns
    -------
    ndarray of float32, (n,)
    """
    out = np.empty(h.shape[0], np.float32)
    _from_half_bits(np.ascontiguousarray(h).view(np.uint16), _WIDE, out)
    return out
