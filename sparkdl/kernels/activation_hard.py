"""Piecewise-linear activation kernels (Hardtanh/ReLU6, Hardsigmoid, Hardswish), forward and backward side
by side.

They take flat (raveled, contiguous) arrays and run in parallel over elements. Gradients follow PyTorch's
CPU kernels at the kinks: Hardtanh and Hardsigmoid pass the gradient only strictly inside their linear range,
Hardswish uses ``x / 3 + 1/2`` on ``[-3, 3]`` (both ends included) and 1 above.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.config import njit_parallel

__all__ = ["hardtanh_forward", "hardtanh_backward", "hardsigmoid_forward", "hardsigmoid_backward",
           "hardswish_forward", "hardswish_backward"]


# ------------------------------------------------------------------------------------------ Hardtanh
@njit_parallel
def hardtanh_forward(x, min_val, max_val):
    """``min(max(x, min_val), max_val)`` (NaN stays NaN)."""
    out = np.empty_like(x)
    low, high = x.dtype.type(min_val), x.dtype.type(max_val)  # x's dtype: the loop vectorises (same results)
    for i in prange(x.size):
        v = x[i]
        out[i] = low if v < low else (high if v > high else v)
    return out


@njit_parallel
def hardtanh_backward(x, grad_y, min_val, max_val):
    """From the *input*: the gradient where ``min_val < x < max_val``, else 0."""
    out = np.empty_like(grad_y)
    for i in prange(x.size):
        v = x[i]
        out[i] = grad_y[i] if min_val < v < max_val else 0
    return out


# --------------------------------------------------------------------------------------- Hardsigmoid
@njit_parallel
def hardsigmoid_forward(x):
    """``relu6(x + 3) / 6``: 0 below -3, 1 above 3, ``(x + 3) / 6`` between."""
    out = np.empty_like(x)
    zero, one, three, six = x.dtype.type(0), x.dtype.type(1), x.dtype.type(3), x.dtype.type(6)
    for i in prange(x.size):
        v = x[i]
        out[i] = zero if v <= -three else (one if v >= three else (v + three) / six)
    return out


@njit_parallel
def hardsigmoid_backward(x, grad_y):
    """From the *input*: ``grad / 6`` where ``-3 < x < 3``, else 0."""
    out = np.empty_like(grad_y)
    for i in prange(x.size):
        v = x[i]
        out[i] = grad_y[i] / 6 if -3 < v < 3 else 0
    return out


# ----------------------------------------------------------------------------------------- Hardswish
@njit_parallel
def hardswish_forward(x):
    """``x * relu6(x + 3) / 6``: 0 below -3, ``x`` above 3."""
    out = np.empty_like(x)
    zero, three, six = x.dtype.type(0), x.dtype.type(3), x.dtype.type(6)
    for i in prange(x.size):
        v = x[i]
        out[i] = zero if v <= -three else (v if v >= three else v * (v + three) / six)
    return out


@njit_parallel
def hardswish_backward(x, grad_y):
    """From the *input*: 0 below -3, ``x / 3 + 1/2`` on [-3, 3], 1 above (PyTorch's branches)."""
    out = np.empty_like(grad_y)
    for i in prange(x.size):
        v = x[i]
        out[i] = 0 if v < -3 else (grad_y[i] * (v / 3 + 0.5) if v <= 3 else grad_y[i])
    return out
