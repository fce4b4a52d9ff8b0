"""Softmax and log-softmax kernels, forward and backward side by side.

The kernels take a contiguous ``(outer, D, inner)`` view of the input, normalise along the middle axis and run in
parallel over the ``outer * inner`` rows (sums accumulate in float64). Float32 rows along the last axis
(``inner == 1``) take :func:`softmax_float32_rows`, whose ``exp`` vectorises (:func:`softmax` chooses).
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from sparkdl.config import njit, njit_parallel

__all__ = ["softmax", "softmax_float32_rows", "softmax_forward", "softmax_backward", "log_softmax_forward",
           "log_softmax_backward"]


# One row is ``x[o, :, j]``. The row loops below are shared by the softmax and log-softmax kernels (``log``
# selects, per row); they are inlined into the kernels, whose ``prange`` they carry.
@njit(inline="always")
def _row_max(x, o, j, d):
    """The maximum of row ``x[o, :, j]`` (``d >= 1``) as float64; a NaN in the first place stays."""
    m = np.float64(x[o, 0, j])
    for k in range(1, d):
        if x[o, k, j] > m:
            m = np.float64(x[o, k, j])
    return m


@njit(inline="always")
def _softmax_row(x, out, o, j, d):
    m = _row_max(x, o, j, d)
    s = 0.0
    for k in range(d):
        e = math.exp(np.float64(x[o, k, j]) - m)
        out[o, k, j] = e
        s += e
    inv = 1.0 / s
    for k in range(d):
        out[o, k, j] = out[o, k, j] * inv


@njit(inline="always")
def _log_softmax_row(x, out, o, j, d):
    m = _row_max(x, o, j, d)
    s = 0.0
    for k in range(d):
        s += math.exp(x[o, k, j] - m)
    shift = m + math.log(s)
    for k in range(d):
        out[o, k, j] = x[o, k, j] - shift


@njit(inline="always")
def _forward_rows(x, log):
    """(Log-)softmax of every row of ``x`` (outer, D, inner), in parallel over the ``outer * inner`` rows."""
    outer, d, inner = x.shape
    out = np.empty_like(x)
    if d == 0:
        return out
    for r in prange(outer * inner):
        o, j = r // inner, r % inner
        if log:
            _log_softmax_row(x, out, o, j, d)
        else:
            _softmax_row(x, out, o, j, d)
    return out


@njit(inline="always")
def _backward_rows(y, grad_y, log):
    """Gradients of :func:`_forward_rows` from its output ``y``; the row sums accumulate in float64."""
    outer, d, inner = y.shape
    out = np.empty_like(grad_y)
    for r in prange(outer * inner):
        o, j = r // inner, r % inner
        s = 0.0
        if log:
            for k in range(d):
                s += grad_y[o, k, j]
            for k in range(d):
                out[o, k, j] = grad_y[o, k, j] - math.exp(y[o, k, j]) * s
        else:
            for k in range(d):
                s += np.float64(grad_y[o, k, j]) * y[o, k, j]
            for k in range(d):
                out[o, k, j] = y[o, k, j] * (grad_y[o, k, j] - s)
    return out


@njit(inline="always")
def _exp_nonpositive(t):
    """``exp(t)`` for ``t <= 0`` (a NaN stays NaN) without a call or a branch, so loops of it vectorise:
    ``exp(t / 1024)`` by its Taylor polynomial of degree 12 (relative error < 3e-12), squared ten times (relative
    error < 3e-9 for t >= -708, 1/20 of a float32 ulp); below -745 (``-inf`` included) as at -745,
    ~5e-324, which any float32 result rounds to 0."""
    t = t if not t < -745.0 else -745.0
    z = t * (1.0 / 1024.0)
    p = z * (1.0 / 479001600.0) + 1.0 / 39916800.0
    p = p * z + 1.0 / 3628800.0
    p = p * z + 1.0 / 362880.0
    p = p * z + 1.0 / 40320.0
    p = p * z + 1.0 / 5040.0
    p = p * z + 1.0 / 720.0
    p = p * z + 1.0 / 120.0
    p = p * z + 1.0 / 24.0
    p = p * z + 1.0 / 6.0
    p = p * z + 0.5
    p = p * z + 1.0
    p = p * z + 1.0
    for _ in range(10):
        p = p * p
    return p


@njit_parallel
def softmax_float32_rows(x):
    """Softmax of every row of a contiguous float32 ``x`` (rows, D), parallel over rows: the row maximum
    subtracted, :func:`_exp_nonpositive` (vectorised), the row sum in float64 over four partial sums."""
    rows, d = x.shape
    out = np.empty_like(x)
    for r in prange(rows):
        m = np.float64(x[r, 0])
        for k in range(1, d):
            if x[r, k] > m:
                m = np.float64(x[r, k])
        for k in range(d):
            out[r, k] = _exp_nonpositive(np.float64(x[r, k]) - m)
        s0 = s1 = s2 = s3 = 0.0
        k = 0
        while k + 4 <= d:
            s0 += out[r, k]
            s1 += out[r, k + 1]
            s2 += out[r, k + 2]
            s3 += out[r, k + 3]
            k += 4
        while k < d:
            s0 += out[r, k]
            k += 1
        inv = 1.0 / ((s0 + s1) + (s2 + s3))
        for k in range(d):
            out[r, k] = np.float64(out[r, k]) * inv
    return out


def softmax(x):
    """Softmax along axis 1 of a contiguous ``x`` (outer, D, inner): :func:`softmax_float32_rows` for float32
    rows along the last axis (``inner == 1``), else :func:`softmax_forward`."""
    if x.dtype == np.float32 and x.shape[2] == 1 and x.shape[1] > 0 and x.size:
        return softmax_float32_rows(x.reshape(x.shape[0], x.shape[1])).reshape(x.shape)
    return softmax_forward(x)


@njit_parallel
def softmax_forward(x):
    """Softmax of ``x`` (outer, D, inner) along axis 1; the row maximum is subtracted before ``exp``."""
    return _forward_rows(x, False)


@njit_parallel
def softmax_backward(y, grad_y):
    """``grad_x = y * (grad_y - sum(grad_y * y))`` along axis 1, from the output ``y`` (outer, D, inner)."""
    return _backward_rows(y, grad_y, False)


@njit_parallel
def log_softmax_forward(x):
    """``x - max - log(sum(exp(x - max)))`` along axis 1 of ``x`` (outer, D, inner)."""
    return _forward_rows(x, True)


@njit_parallel
def log_softmax_backward(y, grad_y):
    """``grad_x = grad_y - exp(y) * sum(grad_y)`` along axis 1, from the output ``y`` (outer, D, inner)."""
    return _backward_rows(y, grad_y, True)
