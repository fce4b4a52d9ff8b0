"""Per-sample normalization kernels (LayerNorm, GroupNorm), forward and backward side by side.

Both normalise *rows*: LayerNorm a contiguous ``(R, D)`` view (R = every leading axis, D = the normalized
shape), GroupNorm a contiguous ``(N, C, S)`` view whose row ``(n, g)`` is the channels of group g of sample n
with their S spatial positions. Statistics are two-pass, accumulated in float64 and returned as float64
``mean``/``rstd`` = :math:`1/\\sqrt{\\mathrm{Var} + \\epsilon}` (biased variance), as PyTorch's CPU kernels.

With ``x_hat = (x - mean) * rstd`` and ``h = grad_y * weight`` (the gradient with respect to ``x_hat``), the
input gradient of one row of M values is ``rstd * (h - mean(h) - x_hat * mean(h * x_hat))``; the affine
gradients are ``grad_weight = sum(grad_y * x_hat)`` and ``grad_bias = sum(grad_y)`` over everything but the
affine axis. Backward recomputes ``x_hat`` from ``x`` rather than caching it.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.config import njit, njit_parallel

__all__ = ["layer_norm_forward", "layer_norm_backward", "group_norm_forward", "group_norm_backward"]

#: Rows per partial sum of the LayerNorm affine gradients (fixed, so results do not depend on the thread count).
_ROWS_PER_PARTIAL = 64


@njit(inline="always")
def _stats(v, eps):
    """Mean and ``1/sqrt(var + eps)`` (float64) of the 2-D array ``v`` (all of its entries)."""
    a, b = v.shape
    acc = 0.0
    for i in range(a):
        for j in range(b):
            acc += v[i, j]
    mu = acc / (a * b)
    acc = 0.0
    for i in range(a):
        for j in range(b):
            d = v[i, j] - mu
            acc += d * d
    return mu, 1.0 / np.sqrt(acc / (a * b) + eps)


@njit_parallel
def layer_norm_forward(x, weight, bias, eps):
    """``y = x_hat * weight + bias`` per row of ``x`` (R, D); empty ``weight``/``bias`` mean 1 and 0.
    Returns ``(y, mean, rstd)``."""
    r, d = x.shape
    y = np.empty_like(x)
    mean = np.empty(r, np.float64)
    rstd = np.empty(r, np.float64)
    has_w, has_b = weight.shape[0] > 0, bias.shape[0] > 0
    for i in prange(r):
        mu, inv = _stats(x[i:i + 1], eps)
        mean[i], rstd[i] = mu, inv
        for j in range(d):
            v = (x[i, j] - mu) * inv
            if has_w:
                v = v * weight[j]
            if has_b:
                v = v + bias[j]
            y[i, j] = v
    return y, mean, rstd


@njit_parallel
def layer_norm_backward(x, grad_y, mean, rstd, weight):
    """``(grad_x, grad_weight, grad_bias)`` for ``x``, ``grad_y`` (R, D); the affine gradients are (D,) in
    ``x``'s dtype (summed in float64 over fixed blocks of rows, then over the blocks in order)."""
    r, d = x.shape
    has_w = weight.shape[0] > 0
    gx = np.empty_like(grad_y)
    nblk = (r + _ROWS_PER_PARTIAL - 1) // _ROWS_PER_PARTIAL
    pw = np.zeros((nblk, d), np.float64)
    pb = np.zeros((nblk, d), np.float64)
    for blk in prange(nblk):
        h = np.empty(d, np.float64)
        for i in range(blk * _ROWS_PER_PARTIAL, min(r, (blk + 1) * _ROWS_PER_PARTIAL)):
            mu, inv = mean[i], rstd[i]
            s1 = 0.0
            s2 = 0.0
            for j in range(d):
                g = np.float64(grad_y[i, j])
                xh = (x[i, j] - mu) * inv
                pw[blk, j] += g * xh
                pb[blk, j] += g
                hj = g * weight[j] if has_w else g
                h[j] = hj
                s1 += hj
                s2 += hj * xh
            s1 /= d
            s2 /= d
            for j in range(d):
                xh = (x[i, j] - mu) * inv
                gx[i, j] = inv * (h[j] - s1 - xh * s2)
    gw = np.empty(d, grad_y.dtype)
    gb = np.empty(d, grad_y.dtype)
    for j in range(d):
        a = 0.0
        b = 0.0
        for blk in range(nblk):
            a += pw[blk, j]
            b += pb[blk, j]
        gw[j], gb[j] = a, b
    return gx, gw, gb


@njit_parallel
def group_norm_forward(x, groups, weight, bias, eps):
    """GroupNorm of ``x`` (N, C, S) with ``groups`` groups of C/groups channels; per-channel affine
    ``weight``/``bias`` (C,), or empty for none. Returns ``(y, mean, rstd)``, statistics of shape (N*groups,)."""
    n, c, s = x.shape
    cg = c // groups
    y = np.empty_like(x)
    mean = np.empty(n * groups, np.float64)
    rstd = np.empty(n * groups, np.float64)
    affine = weight.shape[0] > 0
    for r in prange(n * groups):
        b, g = r // groups, r % groups
        mu, inv = _stats(x[b, g * cg:(g + 1) * cg], eps)
        mean[r], rstd[r] = mu, inv
        for ch in range(g * cg, (g + 1) * cg):
            w = np.float64(weight[ch]) if affine else 1.0
            bb = np.float64(bias[ch]) if affine else 0.0
            for j in range(s):
                y[b, ch, j] = (x[b, ch, j] - mu) * inv * w + bb
    return y, mean, rstd


@njit_parallel
def group_norm_backward(x, grad_y, groups, mean, rstd, weight):
    """``(grad_x, grad_weight, grad_bias)`` of :func:`group_norm_forward`; affine gradients (C,) (float64 sums)."""
    n, c, s = x.shape
    cg = c // groups
    m = cg * s
    affine = weight.shape[0] > 0
    gx = np.empty_like(grad_y)
    for r in prange(n * groups):
        b, g = r // groups, r % groups
        mu, inv = mean[r], rstd[r]
        s1 = 0.0
        s2 = 0.0
        for ch in range(g * cg, (g + 1) * cg):
            w = np.float64(weight[ch]) if affine else 1.0
            for j in range(s):
                h = grad_y[b, ch, j] * w
                s1 += h
                s2 += h * ((x[b, ch, j] - mu) * inv)
        s1 /= m
        s2 /= m
        for ch in range(g * cg, (g + 1) * cg):
            w = np.float64(weight[ch]) if affine else 1.0
            for j in range(s):
                xh = (x[b, ch, j] - mu) * inv
                gx[b, ch, j] = inv * (grad_y[b, ch, j] * w - s1 - xh * s2)
    gw = np.empty(c, grad_y.dtype)
    gb = np.empty(c, grad_y.dtype)
    for ch in prange(c):
        a = 0.0
        bsum = 0.0
        g = ch // cg
        for b in range(n):
            mu, inv = mean[b * groups + g], rstd[b * groups + g]
            for j in range(s):
                gyv = np.float64(grad_y[b, ch, j])
                a += gyv * ((x[b, ch, j] - mu) * inv)
                bsum += gyv
        gw[ch], gb[ch] = a, bsum
    return gx, gw, gb
