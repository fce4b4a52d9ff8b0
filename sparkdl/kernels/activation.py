"""Activation kernels, forward and backward side by side.

Element-wise kernels take flat (raveled, contiguous) arrays and run in parallel over elements. The
softmax kernels take a contiguous ``(outer, D, inner)`` view of the input, normalise along the middle axis
and run in parallel over the ``outer * inner`` rows (sums accumulate in float64). GELU evaluates in float64
and rounds once (for float32 arrays with a rational ``erf`` that vectorises, :func:`gelu_kernels`);
``exp``-based kernels call the input dtype's ``exp``/``expm1`` (float32 ``expf`` is about twice as fast and, as
in PyTorch, accurate to float32 rounding).
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from sparkdl.config import njit, njit_parallel

__all__ = [
    "relu_forward", "relu_backward",
    "leaky_relu_forward", "leaky_relu_backward",
    "elu_forward", "elu_backward",
    "gelu_forward", "gelu_backward", "gelu_tanh_forward", "gelu_tanh_backward", "erf_forward",
    "gelu_float32_forward", "gelu_float32_backward", "erf_float32_forward", "gelu_kernels", "erf_kernel",
    "tanh_forward", "tanh_backward",
    "sigmoid_forward", "sigmoid_backward",
    "silu_forward", "silu_backward", "softplus_forward", "softplus_backward", "prelu_forward", "prelu_backward",
    "softmax_forward", "softmax_backward", "log_softmax_forward", "log_softmax_backward", "softmax",
    "softmax_float32_rows",
]

_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715


# ---------------------------------------------------------------------------------------------- ReLU
@njit_parallel
def relu_forward(x):
    out = np.empty_like(x)
    zero, inf = x.dtype.type(0), x.dtype.type(np.inf)
    for i in prange(x.size):
        v = x[i]
        out[i] = (v if v < inf else inf) if v > zero else zero  # v if v > 0 else 0, in a form LLVM vectorises
    return out


@njit_parallel
def relu_backward(y, grad_y):
    """Gradient of ReLU from its *output* y (y > 0 exactly where x > 0)."""
    out = np.empty_like(grad_y)
    zero = grad_y.dtype.type(0)
    for i in prange(y.size):
        out[i] = grad_y[i] if y[i] > zero else zero
    return out


# ----------------------------------------------------------------------------------------- LeakyReLU
@njit_parallel
def leaky_relu_forward(x, negative_slope):
    out = np.empty_like(x)
    for i in prange(x.size):
        v = x[i]
        out[i] = v if v > 0 else v * negative_slope
    return out


@njit_parallel
def leaky_relu_backward(x, grad_y, negative_slope):
    """From the *input* x (the slope may be negative, so the output's sign does not tell the branch)."""
    out = np.empty_like(grad_y)
    for i in prange(x.size):
        out[i] = grad_y[i] if x[i] > 0 else grad_y[i] * negative_slope
    return out


# ----------------------------------------------------------------------------------------------- ELU
@njit_parallel
def elu_forward(x, alpha):
    out = np.empty_like(x)
    for i in prange(x.size):
        v = x[i]
        out[i] = v if v > 0 else alpha * math.expm1(v)
    return out


@njit_parallel
def elu_backward(x, grad_y, alpha):
    """From the *input* x: ``alpha * exp(x)`` for x <= 0 (``y + alpha`` would cancel for very negative x)."""
    out = np.empty_like(grad_y)
    for i in prange(x.size):
        v = x[i]
        out[i] = grad_y[i] if v > 0 else grad_y[i] * (alpha * math.exp(v))
    return out


# ---------------------------------------------------------------------------------------------- GELU
@njit_parallel
def erf_forward(x):
    """The error function elementwise (``math.erf`` in float64, rounded to ``x``'s dtype); flat arrays."""
    out = np.empty_like(x)
    for i in prange(x.size):
        out[i] = math.erf(np.float64(x[i]))
    return out


@njit(inline="always")
def _erf_rational(z):
    """erf(z) by the odd/even rational approximation of Eigen's ``generic_fast_erf_float`` (TensorFlow/XLA),
    evaluated in float64 on z clamped to [-4, 4] (a NaN stays NaN): absolute error below 2e-7, no branch or call,
    so the loops around it vectorise (about 15x faster than ``math.erf``)."""
    z = z if not z < -4.0 else -4.0
    z = z if not z > 4.0 else 4.0
    z2 = z * z
    p = z2 * -2.72614225801306e-10 + 2.77068142495902e-08
    p = z2 * p - 2.10102402082508e-06
    p = z2 * p - 5.69250639462346e-05
    p = z2 * p - 7.34990630326855e-04
    p = z2 * p - 2.95459980854025e-03
    p = z2 * p - 1.60960333262415e-02
    q = z2 * -1.45660718464996e-05 - 2.13374055278905e-04
    q = z2 * q - 1.68282697438203e-03
    q = z2 * q - 7.37332916720468e-03
    q = z2 * q - 1.42647390514189e-02
    return z * p / q


@njit_parallel
def erf_float32_forward(x):
    """The error function of a float32 array by :func:`_erf_rational` (absolute error < 2e-7); flat arrays."""
    out = np.empty_like(x)
    for i in prange(x.size):
        out[i] = _erf_rational(np.float64(x[i]))
    return out


@njit_parallel
def gelu_float32_forward(x):
    """GELU of a float32 array with :func:`_erf_rational` (absolute error < 5e-7 against the float64 formula, at
    most about one float32 ulp of the output for x > 0)."""
    out = np.empty_like(x)
    for i in prange(x.size):
        v = np.float64(x[i])
        out[i] = 0.5 * v * (1.0 + _erf_rational(v * _SQRT_HALF))
    return out


@njit_parallel
def gelu_float32_backward(x, grad_y):
    """``Phi(x) + x * phi(x)`` with :func:`_erf_rational` for ``Phi``, for float32 arrays."""
    out = np.empty_like(grad_y)
    for i in prange(x.size):
        v = np.float64(x[i])
        cdf = 0.5 * (1.0 + _erf_rational(v * _SQRT_HALF))
        pdf = _INV_SQRT_2PI * math.exp(-0.5 * v * v)
        out[i] = grad_y[i] * (cdf + v * pdf)
    return out


def gelu_kernels(dtype) -> tuple:
    """``(forward, backward)`` of exact GELU for arrays of ``dtype``: the vectorised rational ``erf`` for float32,
    ``math.erf`` (float64 accurate) otherwise."""
    return ((gelu_float32_forward, gelu_float32_backward) if np.dtype(dtype) == np.float32
            else (gelu_forward, gelu_backward))


def erf_kernel(dtype):
    """The elementwise ``erf`` kernel for arrays of ``dtype`` (see :func:`gelu_kernels`)."""
    return erf_float32_forward if np.dtype(dtype) == np.float32 else erf_forward


@njit_parallel
def gelu_forward(x):
    """Exact GELU, ``x * Phi(x)`` with ``Phi(x) = (1 + erf(x / sqrt(2))) / 2``."""
    out = np.empty_like(x)
    for i in prange(x.size):
        v = np.float64(x[i])
        out[i] = 0.5 * v * (1.0 + math.erf(v * _SQRT_HALF))
    return out


@njit_parallel
def gelu_backward(x, grad_y):
    """``Phi(x) + x * phi(x)`` with the standard normal density ``phi``."""
    out = np.empty_like(grad_y)
    for i in prange(x.size):
        v = np.float64(x[i])
        cdf = 0.5 * (1.0 + math.erf(v * _SQRT_HALF))
        pdf = _INV_SQRT_2PI * math.exp(-0.5 * v * v)
        out[i] = grad_y[i] * (cdf + v * pdf)
    return out


@njit_parallel
def gelu_tanh_forward(x):
    """Tanh approximation, ``x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))``."""
    out = np.empty_like(x)
    for i in prange(x.size):
        v = np.float64(x[i])
        t = math.tanh(_SQRT_2_OVER_PI * (v + _GELU_C * v * v * v))
        out[i] = 0.5 * v * (1.0 + t)
    return out


@njit_parallel
def gelu_tanh_backward(x, grad_y):
    out = np.empty_like(grad_y)
    for i in prange(x.size):
        v = np.float64(x[i])
        t = math.tanh(_SQRT_2_OVER_PI * (v + _GELU_C * v * v * v))
        d_inner = _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_C * v * v)
        out[i] = grad_y[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * d_inner)
    return out


# ---------------------------------------------------------------------------------------------- Tanh
@njit_parallel
def tanh_forward(x):
    """``tanh|x| = -expm1(-2|x|) / (2 + expm1(-2|x|))`` with the sign restored: as accurate as float64
    ``tanh`` rounded to float32, and faster than libm's ``tanhf``."""
    out = np.empty_like(x)
    for i in prange(x.size):
        v = x[i]
        e = math.expm1(-2 * abs(v))
        t = -e / (2 + e)
        out[i] = t if v >= 0 else -t
    return out


@njit_parallel
def tanh_backward(y, grad_y):
    """From the *output*: ``1 - y^2``."""
    out = np.empty_like(grad_y)
    for i in prange(y.size):
        v = np.float64(y[i])
        out[i] = grad_y[i] * (1.0 - v * v)
    return out


# ------------------------------------------------------------------------------------------- Sigmoid
@njit_parallel
def sigmoid_forward(x):
    """``1 / (1 + exp(-x))`` evaluated through ``e = exp(-|x|) <= 1``, which never overflows: ``1 / (1 + e)``
    for x >= 0 and ``e / (1 + e)`` for x < 0 (a select, not a branch)."""
    out = np.empty_like(x)
    for i in prange(x.size):
        v = x[i]
        e = math.exp(-abs(v))
        r = 1.0 / (1.0 + e)
        out[i] = r if v >= 0 else e * r
    return out


@njit_parallel
def sigmoid_backward(y, grad_y):
    """From the *output*: ``y (1 - y)``."""
    out = np.empty_like(grad_y)
    for i in prange(y.size):
        v = np.float64(y[i])
        out[i] = grad_y[i] * (v * (1.0 - v))
    return out


# ---------------------------------------------------------------------------------------------- SiLU
@njit(inline="always")
def _sigmoid(v):
    e = math.exp(-abs(v))
    r = 1.0 / (1.0 + e)
    return r if v >= 0 else e * r


@njit_parallel
def silu_forward(x):
    """``x * sigmoid(x)`` (the overflow-free sigmoid of :func:`sigmoid_forward`)."""
    out = np.empty_like(x)
    for i in prange(x.size):
        v = x[i]
        out[i] = v * _sigmoid(v)
    return out


@njit_parallel
def silu_backward(x, grad_y):
    """From the *input*: ``s (1 + x (1 - s))`` with ``s = sigmoid(x)``."""
    out = np.empty_like(grad_y)
    for i in prange(x.size):
        v = np.float64(x[i])
        s = _sigmoid(v)
        out[i] = grad_y[i] * (s * (1.0 + v * (1.0 - s)))
    return out


# ------------------------------------------------------------------------------------------ Softplus
@njit_parallel
def softplus_forward(x, beta, threshold):
    """``log1p(exp(beta x)) / beta``, or ``x`` where ``beta x > threshold`` (PyTorch's linear regime)."""
    out = np.empty_like(x)
    for i in prange(x.size):
        v = x[i]
        z = v * beta
        out[i] = v if z > threshold else math.log1p(math.exp(z)) / beta
    return out


@njit_parallel
def softplus_backward(x, grad_y, beta, threshold):
    """From the *input*: ``sigmoid(beta x)``, or 1 in the linear regime."""
    out = np.empty_like(grad_y)
    for i in prange(x.size):
        z = x[i] * beta
        out[i] = grad_y[i] if z > threshold else grad_y[i] * _sigmoid(z)
    return out


# --------------------------------------------------------------------------------------------- PReLU
@njit_parallel
def prelu_forward(x, weight):
    """``x`` where positive, else ``weight[c] * x``, for ``x`` (outer, C, inner) and ``weight`` (C,) or (1,)."""
    outer, c, inner = x.shape
    shared = weight.shape[0] == 1
    out = np.empty_like(x)
    for r in prange(outer * c):
        o, ch = r // c, r % c
        a = weight[0] if shared else weight[ch]
        for j in range(inner):
            v = x[o, ch, j]
            out[o, ch, j] = v if v > 0 else a * v
    return out


@njit_parallel
def prelu_backward(x, grad_y, weight):
    """``(grad_x, grad_weight)``; ``grad_weight[c] = sum of grad_y * x where x <= 0`` (float64 accumulation)."""
    outer, c, inner = x.shape
    shared = weight.shape[0] == 1
    gx = np.empty_like(grad_y)
    gw = np.zeros(c, np.float64)
    for ch in prange(c):
        a = weight[0] if shared else weight[ch]
        acc = 0.0
        for o in range(outer):
            for j in range(inner):
                v, g = x[o, ch, j], grad_y[o, ch, j]
                if v > 0:
                    gx[o, ch, j] = g
                else:
                    gx[o, ch, j] = a * g
                    acc += np.float64(g) * v
        gw[ch] = acc
    out = np.empty(weight.shape[0], grad_y.dtype)
    if shared:
        out[0] = gw.sum()
    else:
        out[:] = gw
    return gx, out


# ---------------------------------------------------------------------------------- Softmax/LogSoftmax
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
