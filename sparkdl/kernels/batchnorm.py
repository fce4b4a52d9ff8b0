"""Batch normalization kernels over a contiguous (N, C, S) view, parallel over channels C.

``S`` is the flattened spatial size (1 for (N, C) inputs, L for (N, C, L), H*W for (N, C, H, W)).
Per-channel sums are accumulated in float64 (as PyTorch's CPU kernel does); statistics come back as
float64 vectors of length C.

Forward: ``x_hat = (x - mean) * invstd``, ``y = weight * x_hat + bias``; backward recomputes ``x_hat`` from
``x`` (cheaper than caching an activation-sized array).

Backward, with ``M = N*S`` values per channel, ``g_b = sum(grad_y)``, ``g_w = sum(grad_y * x_hat)``:

* batch statistics (training): ``grad_x = weight * invstd / M * (M * grad_y - g_b - x_hat * g_w)``
  (the mean and variance depend on x),
* fixed statistics (evaluation with running stats): ``grad_x = weight * invstd * grad_y``.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.config import njit_parallel

__all__ = ["batch_norm_stats", "batch_norm_apply", "batch_norm_backward"]


@njit_parallel
def batch_norm_stats(x):
    """Per-channel mean and *biased* variance (two-pass) of ``x`` (N, C, S); returns two float64 (C,)."""
    n, c, s = x.shape
    m = n * s
    mean = np.empty(c, np.float64)
    var = np.empty(c, np.float64)
    for ch in prange(c):
        acc = 0.0
        for i in range(n):
            for j in range(s):
                acc += x[i, ch, j]
        mu = acc / m
        acc = 0.0
        for i in range(n):
            for j in range(s):
                d = x[i, ch, j] - mu
                acc += d * d
        mean[ch] = mu
        var[ch] = acc / m
    return mean, var


@njit_parallel
def batch_norm_apply(x, mean, invstd, weight, bias):
    """Normalise ``x`` (N, C, S) per channel: ``y = (x - mean) * invstd * weight + bias``, ``x``'s dtype."""
    n, c, s = x.shape
    y = np.empty_like(x)
    for ch in prange(c):
        mu, inv, w, b = mean[ch], invstd[ch], np.float64(weight[ch]), np.float64(bias[ch])
        for i in range(n):
            for j in range(s):
                y[i, ch, j] = (x[i, ch, j] - mu) * inv * w + b
    return y


@njit_parallel
def batch_norm_backward(x, grad_y, mean, invstd, weight, batch_stats):
    """Gradients ``(grad_x, grad_weight, grad_bias)`` from the input ``x`` and ``grad_y`` (N, C, S), with the
    statistics the forward pass used (``x_hat`` is recomputed, not stored: one less activation-sized cache).

    ``batch_stats`` is True when the forward pass used this batch's statistics.
    """
    n, c, s = x.shape
    m = n * s
    grad_x = np.empty_like(grad_y)
    grad_w = np.empty(c, grad_y.dtype)
    grad_b = np.empty(c, grad_y.dtype)
    for ch in prange(c):
        mu, inv = mean[ch], invstd[ch]
        gb = 0.0
        gw = 0.0
        for i in range(n):
            for j in range(s):
                g = np.float64(grad_y[i, ch, j])
                gb += g
                gw += g * ((x[i, ch, j] - mu) * inv)
        grad_w[ch] = gw
        grad_b[ch] = gb
        k = np.float64(weight[ch]) * inv
        if batch_stats:
            k = k / m
            for i in range(n):
                for j in range(s):
                    x_hat = (x[i, ch, j] - mu) * inv
                    grad_x[i, ch, j] = k * (m * np.float64(grad_y[i, ch, j]) - gb - x_hat * gw)
        else:
            for i in range(n):
                for j in range(s):
                    grad_x[i, ch, j] = k * grad_y[i, ch, j]
    return grad_x, grad_w, grad_b
