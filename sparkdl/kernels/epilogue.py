"""Convolution epilogues for inference: the bias and an element-wise activation applied in place, in one pass
(or inside a kernel's own output loop), instead of a bias pass and an activation layer's pass and array.

An epilogue is ``(kind, low, high)``: :data:`NONE`, :data:`RELU` (``v if v > 0 else 0``), :data:`HARDTANH`
(``low if v < low else (high if v > high else v)``: ReLU6 is ``(0, 6)``) or :data:`HARDSWISH`
(``0 if v <= -3 else (v if v >= 3 else v * (v + 3) / 6)``) -- the expressions of the activation kernels in
:mod:`sparkdl.kernels.activation` and :mod:`sparkdl.kernels.activation_hard`, so a fused output equals the
unfused one bit for bit (NaN and signed zeros included).
"""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.config import njit, njit_parallel

__all__ = ["NO_EPILOGUE", "NONE", "RELU", "HARDTANH", "HARDSWISH", "activate_flat", "add_activation",
           "bias_activation"]

NONE, RELU, HARDTANH, HARDSWISH = 0, 1, 2, 3
#: The epilogue that does nothing.
NO_EPILOGUE = (NONE, 0.0, 0.0)


@njit(inline="always")
def activate_flat(yf, o, n, kind, low, high):
    """Apply the activation ``kind`` to ``yf[o:o + n]`` in place (``yf`` flat; one loop per kind, each
    vectorisable; no view is made, so no reference count is touched in a parallel loop). Constants are in ``yf``'s
    dtype, so the arithmetic is too (as PyTorch's), and ReLU is written as a two-sided select: LLVM left the
    one-sided ``v if v > 0 else 0`` scalar (4x slower, same results)."""
    o = np.uint64(o)
    zero, lo, hi = yf.dtype.type(0), yf.dtype.type(low), yf.dtype.type(high)
    if kind == RELU:
        inf = yf.dtype.type(np.inf)
        for i in range(o, o + np.uint64(n)):
            v = yf[i]
            yf[i] = (v if v < inf else inf) if v > zero else zero
    elif kind == HARDTANH:
        for i in range(o, o + np.uint64(n)):
            v = yf[i]
            yf[i] = lo if v < lo else (hi if v > hi else v)
    elif kind == HARDSWISH:
        three, six = yf.dtype.type(3), yf.dtype.type(6)
        for i in range(o, o + np.uint64(n)):
            v = yf[i]
            yf[i] = zero if v <= -three else (v if v >= three else v * (v + three) / six)


@njit_parallel
def bias_activation(y, bias, kind, low, high):
    """``y[n, c, :] = act(y[n, c, :] + bias[c])`` in place; ``y`` (N, C, L) contiguous, ``bias`` (C,) or empty
    (no bias), ``low``/``high`` Python floats (as the Hardtanh layer passes them to its kernel)."""
    N, C, L = y.shape
    yf = y.reshape(-1)
    has_bias = bias.shape[0] > 0
    for t in prange(N * C):
        o = np.uint64(t * L)
        if has_bias:
            b = bias[t % C]
            for i in range(o, o + np.uint64(L)):
                yf[i] += b
        activate_flat(yf, o, L, kind, low, high)


@njit_parallel
def add_activation(y, r, kind, low, high):
    """``y[n, c, :] = act(y[n, c, :] + r[n, c, :])`` in place (a residual join and the activation after it, one
    pass); ``y`` and ``r`` (N, C, L) contiguous, one shape and dtype."""
    N, C, L = y.shape
    yf, rf = y.reshape(-1), r.reshape(-1)
    for t in prange(N * C):
        o = np.uint64(t * L)
        for i in range(o, o + np.uint64(L)):
            yf[i] += rf[i]
        activate_flat(yf, o, L, kind, low, high)
