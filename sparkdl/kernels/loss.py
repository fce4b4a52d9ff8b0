"""Loss kernels: softmax cross-entropy, binary cross-entropy on logits and on probabilities, forward and backward
side by side.

All kernels are pure (arrays in, arrays out) and accumulate in float64 whatever the input dtype, so large
logits (|z| ~ 1e4) stay finite and exact: the log-sum-exp subtracts the row maximum, and
``softplus(-x) = log1p(exp(-|x|)) + max(-x, 0)`` never exponentiates a positive number.
The validating public classes are in :mod:`sparkdl.nn.loss`.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.config import njit_parallel

__all__ = ["cross_entropy_forward", "cross_entropy_backward", "bce_with_logits_forward",
           "bce_with_logits_backward", "bce_forward", "bce_backward", "BCE_LOG_MIN", "BCE_EPS"]

#: PyTorch's clamp of ``log(p)`` and ``log(1 - p)`` in ``BCELoss`` (so p = 0 or 1 gives a finite loss).
BCE_LOG_MIN = -100.0
#: PyTorch's lower bound of ``p (1 - p)`` in the ``BCELoss`` gradient.
BCE_EPS = 1e-12


@njit_parallel
def cross_entropy_forward(z, labels, weight, ignore_index, smoothing):
    """Per-row weighted, label-smoothed cross-entropy of logits.

    Parameters
    ----------
    z : (N, C) float32 or float64, C-contiguous
    labels : (N,) int64, each in [0, C) or equal to ``ignore_index`` (checked by the caller)
    weight : (C,) float64 class weights (ones for an unweighted loss)
    ignore_index : int
    smoothing : float in [0, 1]

    Returns
    -------
    loss : (N,) float64
        ``(1 - s) * w[y] * (lse - z[y]) + s / C * sum_c w[c] * (lse - z[c])``; 0 on ignored rows.
    lse : (N,) float64
        ``log(sum_c exp(z[c]))`` per row (what the backward pass needs).
    """
    n, c = z.shape
    loss = np.zeros(n, np.float64)
    lse = np.empty(n, np.float64)
    for i in prange(n):
        m = -np.inf
        for k in range(c):
            v = np.float64(z[i, k])
            if v > m:
                m = v
        s = 0.0
        for k in range(c):
            s += np.exp(np.float64(z[i, k]) - m)
        row_lse = m + np.log(s)
        lse[i] = row_lse
        y = labels[i]
        if y != ignore_index:
            value = (1.0 - smoothing) * weight[y] * (row_lse - np.float64(z[i, y]))
            if smoothing > 0.0:
                sm = 0.0
                for k in range(c):
                    sm += weight[k] * (row_lse - np.float64(z[i, k]))
                value += smoothing / c * sm
            loss[i] = value
    return loss, lse


@njit_parallel
def cross_entropy_backward(z, lse, labels, weight, ignore_index, smoothing, scale):
    """Gradient of ``sum_i scale[i] * loss[i]`` (see :func:`cross_entropy_forward`) w.r.t. ``z``.

    ``d loss_i / d z_ik = p_ik * ((1-s) w[y] + s/C * sum_c w[c]) - (1-s) w[y] [k == y] - s/C * w[k]``
    with ``p = softmax(z_i) = exp(z_i - lse_i)``; ignored rows get 0. Returns an array like ``z``.
    """
    n, c = z.shape
    grad = np.empty_like(z)
    wsum = 0.0
    for k in range(c):
        wsum += weight[k]
    for i in prange(n):
        y = labels[i]
        if y == ignore_index:
            for k in range(c):
                grad[i, k] = 0.0
        else:
            s = scale[i]
            wy = (1.0 - smoothing) * weight[y]
            a = wy + smoothing * wsum / c
            for k in range(c):
                g = np.exp(np.float64(z[i, k]) - lse[i]) * a - smoothing / c * weight[k]
                if k == y:
                    g -= wy
                grad[i, k] = g * s
    return grad


@njit_parallel
def bce_with_logits_forward(x, t, pos_weight):
    """Element-wise ``(1 - t) x + (1 + (pw - 1) t) softplus(-x)`` in float64.

    ``x``, ``t``: flat arrays of one size (``t`` in x's dtype); ``pos_weight``: float64 (C,) applied along
    the last axis of the original (C-contiguous) array, i.e. ``pos_weight[i % C]``, or size 0 for none.
    """
    n = x.size
    c = pos_weight.size
    out = np.empty(n, np.float64)
    for i in prange(n):
        xi = np.float64(x[i])
        ti = np.float64(t[i])
        lw = 1.0 + (pos_weight[i % c] - 1.0) * ti if c > 0 else 1.0
        softplus_neg = np.log1p(np.exp(-abs(xi))) + max(-xi, 0.0)
        out[i] = (1.0 - ti) * xi + lw * softplus_neg
    return out


@njit_parallel
def bce_with_logits_backward(x, t, pos_weight, scale):
    """Gradient of ``sum_i scale[i] * loss[i]`` (see :func:`bce_with_logits_forward`) w.r.t. ``x``:
    ``(1 - t) - (1 + (pw - 1) t) * sigmoid(-x)``. ``scale`` has size ``x.size`` or 1 (broadcast).
    Returns a flat array of x's dtype."""
    n = x.size
    c = pos_weight.size
    full = scale.size == n
    grad = np.empty_like(x)
    for i in prange(n):
        xi = np.float64(x[i])
        ti = np.float64(t[i])
        lw = 1.0 + (pos_weight[i % c] - 1.0) * ti if c > 0 else 1.0
        if xi >= 0.0:
            e = np.exp(-xi)
            sig_neg = e / (1.0 + e)
        else:
            sig_neg = 1.0 / (1.0 + np.exp(xi))
        s = scale[i] if full else scale[0]
        grad[i] = ((1.0 - ti) - lw * sig_neg) * s
    return grad


@njit_parallel
def bce_forward(p, t):
    """Element-wise ``-(t max(log p, -100) + (1 - t) max(log(1 - p), -100))`` in float64 (PyTorch's clamp).

    ``p``: flat probabilities in [0, 1] (checked by the caller); ``t``: flat targets of the same size. ``1 - p`` is
    computed in float64 from the stored value, so probabilities next to 1 in float32 keep their exact loss.
    """
    n = p.size
    out = np.empty(n, np.float64)
    for i in prange(n):
        pi = np.float64(p[i])
        ti = np.float64(t[i])
        log_p = max(np.log(pi), BCE_LOG_MIN) if pi > 0.0 else BCE_LOG_MIN
        log_q = max(np.log1p(-pi), BCE_LOG_MIN) if pi < 1.0 else BCE_LOG_MIN
        out[i] = -(ti * log_p + (1.0 - ti) * log_q)
    return out


@njit_parallel
def bce_backward(p, t, scale):
    """Gradient of ``sum_i scale[i] * loss[i]`` (see :func:`bce_forward`) w.r.t. ``p``, as PyTorch computes it:
    ``(p - t) / max(p (1 - p), 1e-12)``. ``scale`` has size ``p.size`` or 1. Returns a flat array of p's dtype."""
    n = p.size
    full = scale.size == n
    grad = np.empty_like(p)
    for i in prange(n):
        pi = np.float64(p[i])
        s = scale[i] if full else scale[0]
        grad[i] = (pi - np.float64(t[i])) / max(pi * (1.0 - pi), BCE_EPS) * s
    return grad
