"""Batch normalization kernels over a contiguous (N, C, S) view, parallel over channels C.

``S`` is the flattened spatial size (1 for (N, C) inputs, L for (N, C, L), H*W for (N, C, H, W)).
Per-channel sums are accumulated in float64 (as PyTorch's CPU kernel does), each row of S values in four
interleaved partial sums; statistics come back as float64 vectors of length C.

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

from sparkdl.config import njit, njit_parallel

__all__ = ["batch_norm_stats", "batch_norm_apply", "batch_norm_backward", "batch_norm_grad_sums",
           "batch_norm_grad_input"]


@njit(inline="always")
def _row_sum(xr, s, mu):
    """``sum(xr[j] - mu)`` and ``sum((xr[j] - mu)**2)`` over ``j < s`` in float64, each in four interleaved partial
    sums (element ``j`` into sum ``j % 4``) added pairwise, then the ``s % 4`` last elements in order: independent
    chains instead of one serial float64 sum, which was latency-bound (2.7 ms for a 64 x 16 x 32 x 32 batch)."""
    a0 = a1 = a2 = a3 = 0.0
    q0 = q1 = q2 = q3 = 0.0
    s4 = np.uint64(s - s % 4)
    for j in range(np.uint64(0), s4, np.uint64(4)):
        d0 = np.float64(xr[j]) - mu
        d1 = np.float64(xr[j + np.uint64(1)]) - mu
        d2 = np.float64(xr[j + np.uint64(2)]) - mu
        d3 = np.float64(xr[j + np.uint64(3)]) - mu
        a0 += d0
        a1 += d1
        a2 += d2
        a3 += d3
        q0 += d0 * d0
        q1 += d1 * d1
        q2 += d2 * d2
        q3 += d3 * d3
    a, q = (a0 + a1) + (a2 + a3), (q0 + q1) + (q2 + q3)
    for j in range(s4, np.uint64(s)):
        d = np.float64(xr[j]) - mu
        a += d
        q += d * d
    return a, q


@njit(inline="always")
def _row_dot(gr, xr, s, mu):
    """``sum(gr[j])`` and ``sum(gr[j] * (xr[j] - mu))`` over ``j < s`` in float64, four partial sums each as
    :func:`_row_sum`."""
    a0 = a1 = a2 = a3 = 0.0
    q0 = q1 = q2 = q3 = 0.0
    s4 = np.uint64(s - s % 4)
    for j in range(np.uint64(0), s4, np.uint64(4)):
        g0 = np.float64(gr[j])
        g1 = np.float64(gr[j + np.uint64(1)])
        g2 = np.float64(gr[j + np.uint64(2)])
        g3 = np.float64(gr[j + np.uint64(3)])
        a0 += g0
        a1 += g1
        a2 += g2
        a3 += g3
        q0 += g0 * (np.float64(xr[j]) - mu)
        q1 += g1 * (np.float64(xr[j + np.uint64(1)]) - mu)
        q2 += g2 * (np.float64(xr[j + np.uint64(2)]) - mu)
        q3 += g3 * (np.float64(xr[j + np.uint64(3)]) - mu)
    a, q = (a0 + a1) + (a2 + a3), (q0 + q1) + (q2 + q3)
    for j in range(s4, np.uint64(s)):
        g = np.float64(gr[j])
        a += g
        q += g * (np.float64(xr[j]) - mu)
    return a, q


@njit_parallel
def batch_norm_stats(x):
    """Per-channel mean and *biased* variance (two-pass: the sum, then the squared deviations from the mean) of
    ``x`` (N, C, S); returns two float64 (C,). Each row of S values is summed by :func:`_row_sum`, the rows in
    order."""
    n, c, s = x.shape
    m = n * s
    mean = np.empty(c, np.float64)
    var = np.empty(c, np.float64)
    for ch in prange(c):
        acc = 0.0
        for i in range(n):
            acc += _row_sum(x[i, ch], s, 0.0)[0]
        mu = acc / m
        acc = 0.0
        for i in range(n):
            acc += _row_sum(x[i, ch], s, mu)[1]
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


@njit(inline="always")
def _channel_sums(x, grad_y, ch, mu):
    """``(sum(grad_y), sum(grad_y * (x - mu)))`` of channel ``ch`` in float64, the rows by :func:`_row_dot` in order."""
    n, _, s = x.shape
    gb = 0.0
    gq = 0.0
    for i in range(n):
        a, q = _row_dot(grad_y[i, ch], x[i, ch], s, mu)
        gb += a
        gq += q
    return gb, gq


@njit(inline="always")
def _channel_grad_input(x, grad_y, grad_x, ch, mu, inv, w, gb, gw, m, batch_stats):
    """``grad_x[:, ch]`` from the channel's sums ``gb = sum(grad_y)`` and ``gw = sum(grad_y * x_hat)`` over ``m``
    values (batch statistics), or ``weight * invstd * grad_y`` (fixed statistics)."""
    n, _, s = x.shape
    k = w * inv
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
        gb, gw = _channel_sums(x, grad_y, ch, mu)
        gw *= inv  # sum(grad_y * x_hat)
        grad_w[ch] = gw
        grad_b[ch] = gb
        _channel_grad_input(x, grad_y, grad_x, ch, mu, inv, np.float64(weight[ch]), gb, gw, m, batch_stats)
    return grad_x, grad_w, grad_b


@njit_parallel
def batch_norm_grad_sums(x, grad_y, mean, invstd):
    """Per-channel ``sum(grad_y)`` and ``sum(grad_y * x_hat)`` of (N, C, S) arrays, two float64 (C,): the sums of
    :func:`batch_norm_backward`, for a batch whose rows are split across threads (each part's sums are added
    across the parts, then :func:`batch_norm_grad_input` runs on each part with the whole batch's sums)."""
    c = x.shape[1]
    gb = np.empty(c, np.float64)
    gw = np.empty(c, np.float64)
    for ch in prange(c):
        a, q = _channel_sums(x, grad_y, ch, mean[ch])
        gb[ch] = a
        gw[ch] = q * invstd[ch]
    return gb, gw


@njit_parallel
def batch_norm_grad_input(x, grad_y, mean, invstd, weight, gb, gw, m):
    """``grad_x`` of a batch-statistics BatchNorm for a part of a batch, (N, C, S), from the whole batch's
    statistics, its sums ``gb``, ``gw`` (float64 (C,), :func:`batch_norm_grad_sums` added over the parts) and its
    number ``m`` of values per channel."""
    c = x.shape[1]
    grad_x = np.empty_like(grad_y)
    for ch in prange(c):
        _channel_grad_input(x, grad_y, grad_x, ch, mean[ch], invstd[ch], np.float64(weight[ch]), gb[ch], gw[ch],
                            m, True)
    return grad_x
