"""2-D pooling kernels over planes ``x (P, H, W)`` with ``P = N*C``; forward and backward side by side.

Every kernel is parallel over planes. Window bounds, tie-breaking and divisors follow PyTorch's CPU
kernels exactly (``aten/src/ATen/native/cpu/MaxPoolKernel.cpp``, ``AvgPoolKernel.cpp``,
``AdaptiveAvgPoolKernel.cpp``), so results match to float rounding.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.config import njit, njit_parallel

__all__ = ["max_pool2d_forward", "max_pool2d_backward", "avg_pool2d_forward", "avg_pool2d_backward",
           "adaptive_avg_pool2d_forward", "adaptive_avg_pool2d_backward"]


@njit_parallel
def max_pool2d_forward(x, kh, kw, sh, sw, ph, pw, Ho, Wo):
    """Window maxima and their flat in-plane indices ``h*W + w`` (int32); padding never wins, NaN does."""
    P, H, W = x.shape
    if kh == 2 and kw == 2 and sh == 2 and sw == 2 and ph == 0 and pw == 0 and 2 * Ho <= H and 2 * Wo <= W:
        return _max_pool2x2(x, Ho, Wo)
    y = np.empty((P, Ho, Wo), x.dtype)
    idx = np.empty((P, Ho, Wo), np.int32)
    for p in prange(P):
        for oh in range(Ho):
            h0 = oh * sh - ph
            h1 = min(h0 + kh, H)
            h0 = max(h0, 0)
            for ow in range(Wo):
                w0 = ow * sw - pw
                w1 = min(w0 + kw, W)
                w0 = max(w0, 0)
                best = x[p, h0, w0]
                arg = h0 * W + w0
                for h in range(h0, h1):
                    for w in range(w0, w1):
                        v = x[p, h, w]
                        better = v > best or v != v  # first maximum wins; NaN propagates (as PyTorch)
                        best = v if better else best
                        arg = h * W + w if better else arg
                y[p, oh, ow] = best
                idx[p, oh, ow] = arg
    return y, idx


@njit_parallel
def _max_pool2x2(x, Ho, Wo):
    """Fast path of :func:`max_pool2d_forward` for 2x2 windows with stride 2 and no padding."""
    P, H, W = x.shape
    y = np.empty((P, Ho, Wo), x.dtype)
    idx = np.empty((P, Ho, Wo), np.int32)
    for p in prange(P):
        for oh in range(Ho):
            b0 = 2 * oh * W
            for ow in range(np.uint64(Wo)):
                w = ow + ow
                best, arg = x[p, 2 * oh, w], b0 + w
                v = x[p, 2 * oh, w + 1]
                better = v > best or v != v
                best, arg = (v, b0 + w + 1) if better else (best, arg)
                v = x[p, 2 * oh + 1, w]
                better = v > best or v != v
                best, arg = (v, b0 + W + w) if better else (best, arg)
                v = x[p, 2 * oh + 1, w + 1]
                better = v > best or v != v
                best, arg = (v, b0 + W + w + 1) if better else (best, arg)
                y[p, oh, ow] = best
                idx[p, oh, ow] = arg
    return y, idx


@njit_parallel
def max_pool2d_backward(grad_y, idx, H, W, kh, kw, sh, sw, ph, pw):
    """Route each output gradient to its window's argmax (summing where windows overlap)."""
    P, Ho, Wo = grad_y.shape
    if kh == 2 and kw == 2 and sh == 2 and sw == 2 and ph == 0 and pw == 0 and 2 * Ho <= H and 2 * Wo <= W:
        return _max_pool2x2_backward(grad_y, idx, H, W)
    gx = np.zeros((P, H * W), grad_y.dtype)
    for p in prange(P):
        for oh in range(Ho):
            for ow in range(Wo):
                gx[p, idx[p, oh, ow]] += grad_y[p, oh, ow]
    return gx.reshape(P, H, W)


@njit_parallel
def _max_pool2x2_backward(grad_y, idx, H, W):
    """Fast path for disjoint 2x2 windows: every input cell is written once (no zero-fill pass, no scatter)."""
    P, Ho, Wo = grad_y.shape
    gx = np.empty((P, H, W), grad_y.dtype)
    zero = grad_y.dtype.type(0)
    for p in prange(P):
        for oh in range(Ho):
            b0 = 2 * oh * W
            for ow in range(Wo):
                g, a, w = grad_y[p, oh, ow], idx[p, oh, ow], 2 * ow
                gx[p, 2 * oh, w] = g if a == b0 + w else zero
                gx[p, 2 * oh, w + 1] = g if a == b0 + w + 1 else zero
                gx[p, 2 * oh + 1, w] = g if a == b0 + W + w else zero
                gx[p, 2 * oh + 1, w + 1] = g if a == b0 + W + w + 1 else zero
            gx[p, 2 * oh:2 * oh + 2, 2 * Wo:] = zero  # odd width: last column is in no window
        gx[p, 2 * Ho:, :] = zero
    return gx


@njit
def _avg_windows(H, W, kh, kw, sh, sw, ph, pw, Ho, Wo, count_include_pad):
    """Clipped window bounds (Ho, Wo, 4) int64 and divisors (Ho, Wo) float64."""
    bounds = np.empty((Ho, Wo, 4), np.int64)
    div = np.empty((Ho, Wo), np.float64)
    for oh in range(Ho):
        for ow in range(Wo):
            h0 = oh * sh - ph
            w0 = ow * sw - pw
            h1 = min(h0 + kh, H + ph)
            w1 = min(w0 + kw, W + pw)
            size = (h1 - h0) * (w1 - w0)
            h0, w0 = max(h0, 0), max(w0, 0)
            h1, w1 = min(h1, H), min(w1, W)
            if not count_include_pad:
                size = (h1 - h0) * (w1 - w0)
            bounds[oh, ow, 0] = h0
            bounds[oh, ow, 1] = h1
            bounds[oh, ow, 2] = w0
            bounds[oh, ow, 3] = w1
            div[oh, ow] = size
    return bounds, div


@njit_parallel
def avg_pool2d_forward(x, kh, kw, sh, sw, ph, pw, Ho, Wo, count_include_pad):
    """Window means; the divisor counts padding cells when ``count_include_pad`` (PyTorch's rule)."""
    P, H, W = x.shape
    bounds, div = _avg_windows(H, W, kh, kw, sh, sw, ph, pw, Ho, Wo, count_include_pad)
    y = np.empty((P, Ho, Wo), x.dtype)
    for p in prange(P):
        for oh in range(Ho):
            for ow in range(Wo):
                s = x.dtype.type(0)
                for h in range(bounds[oh, ow, 0], bounds[oh, ow, 1]):
                    for w in range(bounds[oh, ow, 2], bounds[oh, ow, 3]):
                        s += x[p, h, w]
                y[p, oh, ow] = s / x.dtype.type(div[oh, ow]) if div[oh, ow] > 0 else 0
    return y


@njit_parallel
def avg_pool2d_backward(grad_y, H, W, kh, kw, sh, sw, ph, pw, count_include_pad):
    """Spread each output gradient evenly (by the forward divisor) over its window."""
    P, Ho, Wo = grad_y.shape
    bounds, div = _avg_windows(H, W, kh, kw, sh, sw, ph, pw, Ho, Wo, count_include_pad)
    gx = np.zeros((P, H, W), grad_y.dtype)
    for p in prange(P):
        for oh in range(Ho):
            for ow in range(Wo):
                if div[oh, ow] == 0:
                    continue
                g = grad_y[p, oh, ow] / grad_y.dtype.type(div[oh, ow])
                for h in range(bounds[oh, ow, 0], bounds[oh, ow, 1]):
                    for w in range(bounds[oh, ow, 2], bounds[oh, ow, 3]):
                        gx[p, h, w] += g
    return gx


@njit_parallel
def adaptive_avg_pool2d_forward(x, Ho, Wo):
    """Mean over ``[floor(i*H/Ho), ceil((i+1)*H/Ho))`` (rows; columns likewise), divided as ``sum/kh/kw``."""
    P, H, W = x.shape
    y = np.empty((P, Ho, Wo), x.dtype)
    for p in prange(P):
        for oh in range(Ho):
            h0 = (oh * H) // Ho
            h1 = ((oh + 1) * H + Ho - 1) // Ho
            for ow in range(Wo):
                w0 = (ow * W) // Wo
                w1 = ((ow + 1) * W + Wo - 1) // Wo
                s = x.dtype.type(0)
                for h in range(h0, h1):
                    for w in range(w0, w1):
                        s += x[p, h, w]
                y[p, oh, ow] = s / x.dtype.type(h1 - h0) / x.dtype.type(w1 - w0)
    return y


@njit_parallel
def adaptive_avg_pool2d_backward(grad_y, H, W):
    """Adjoint of :func:`adaptive_avg_pool2d_forward`."""
    P, Ho, Wo = grad_y.shape
    gx = np.zeros((P, H, W), grad_y.dtype)
    for p in prange(P):
        for oh in range(Ho):
            h0 = (oh * H) // Ho
            h1 = ((oh + 1) * H + Ho - 1) // Ho
            for ow in range(Wo):
                w0 = (ow * W) // Wo
                w1 = ((ow + 1) * W + Wo - 1) // Wo
                g = grad_y[p, oh, ow] / grad_y.dtype.type(h1 - h0) / grad_y.dtype.type(w1 - w0)
                for h in range(h0, h1):
                    for w in range(w0, w1):
                        gx[p, h, w] += g
    return gx
