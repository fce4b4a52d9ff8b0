r"""Dropout mask kernel: counter-based uniforms, so that a mask element depends on its position only.

Element ``c`` of the stream seeded with ``seed`` is the ``c``-th output of SplitMix64 (Steele, Lea & Flood,
2014; Vigna's constants), :math:`z = \mathrm{mix}(\mathrm{seed} + (c + 1) \cdot \mathtt{0x9E3779B97F4A7C15})`
in 64-bit unsigned arithmetic, and the uniform is its top 24 bits, :math:`u = (z \gg 40) / 2^{24}` in [0, 1)
(exact in float32 and float64). No state is carried from one element to the next, so any slice of a mask can be
computed on its own and equals the same slice of the whole mask. The backward pass of dropout is a product with
the saved mask (done by the layers with numpy).

References
----------
Steele, Lea & Flood, 2014, "Fast splittable pseudorandom number generators" (OOPSLA); Salmon et al., 2011,
"Parallel random numbers: as easy as 1, 2, 3" (counter-based generators).
"""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.config import njit, njit_parallel

__all__ = ["uniform24", "dropout_mask"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S40 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(40)
_INV_2_24 = 1.0 / (1 << 24)


@njit
def uniform24(seed, counter):
    """The uniform of element ``counter`` (uint64) of the stream ``seed`` (uint64), a float64 in [0, 1) with
    24 significant bits."""
    z = seed + (counter + np.uint64(1)) * _GOLDEN
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    z = z ^ (z >> _S31)
    return float(z >> _S40) * _INV_2_24


@njit_parallel
def dropout_mask(seed, row_offset, p, scale, out):
    """``out[a, n, b] = scale`` if ``uniform24(seed, c) >= p`` else 0, with the counter
    ``c = (row_offset + n) * (A * B) + a * B + b`` for ``out`` of shape (A, N, B): N is the batch axis, n + row_offset
    the global row (sample) of the element and ``a * B + b`` its flat position within that row.

    ``seed`` uint64, ``row_offset`` int64 >= 0, ``p`` float64 in [0, 1), ``scale`` of ``out``'s dtype."""
    na, nn_, nb = out.shape
    row = np.uint64(na * nb)
    for n in prange(nn_):
        base = np.uint64(row_offset + n) * row
        for a in range(na):
            start = base + np.uint64(a * nb)
            for b in range(nb):
                out[a, n, b] = scale if uniform24(seed, start + np.uint64(b)) >= p else 0
