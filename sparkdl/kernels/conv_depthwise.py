"""Depthwise 2-D convolution kernels (``groups == in_channels == out_channels``), forward and backward side by side.

Every channel is convolved with its own ``kh x kw`` filter, so there is no GEMM to feed: im2col would copy the
input ``kh*kw`` times to run ``C`` GEMMs of a single row. These kernels read each zero-padded input plane
once per tap instead.

A plane is zero-padded into a flat buffer ``xp`` of row width ``Wp = W + 2*pw`` (the layout of
:mod:`sparkdl.kernels.conv`). Stride 1 uses the *wide* layout: output position ``q = oh*Wp + ow`` of tap
``(i, j)`` reads ``xp[i*dh*Wp + j*dw + q]``, so each tap is one long contiguous multiply-add over the plane,
at the price of ``Wp - Wo`` garbage columns per row that are never written out (and are zero in the
gradient). Other strides loop over output rows, ``xp[(oh*sh + i*dh)*Wp + j*dw + ow*sw]``.

Sums run over the taps in ``(i, j)`` order, starting from the bias. The weight gradient of a channel
accumulates, per tap, one partial sum per output position (or column) over the samples in order, then sums
those partials in order: the bits do not depend on the thread count (each channel is one thread's
work). Loop indices are unsigned, as in :mod:`sparkdl.kernels.conv`, so LLVM vectorises the inner loops.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.config import njit, njit_parallel
from sparkdl.kernels.epilogue import NONE, activate_flat

__all__ = ["depthwise_forward", "depthwise_backward"]

#: Stride-1 backward uses the wide layout while its weight-gradient partials (``kh*kw*Ho*Wp`` values per channel)
#: fit in L1/L2 (64 KB of float32): MobileNetV2's 28x28 and smaller maps. Larger maps go row by row. Measured
#: (backward, 1 thread, interleaved medians of 7, batch 4, loaded machine): row-wise vs wide everywhere,
#: 112x112 32 ch 8.9-15.4 ms vs 24.8-28.3, 56x56 144 ch 14.5-21.4 vs 23.9-26.5; 14x14 576 ch 10.2 vs 6.8 and
#: 7x7 960 ch 8.2 vs 4.8 (wide wins: short rows).
_WIDE_BACKWARD_MAX = 16384


@njit
def _pad_plane(src, ph, pw, Wp, xp):
    """Write plane ``src (H, W)`` at offset ``(ph, pw)`` into the zeroed flat buffer ``xp``."""
    H, W = src.shape
    for h in range(H):
        base = np.uint64((h + ph) * Wp + pw)
        for v in range(np.uint64(W)):
            xp[base + v] = src[h, v]


@njit(inline="always")
def _row_taps(yf, o, n, xp, s, wf, t, kw, dw, sw):
    """``yf[o + k] = ((yf[o + k] + wf[t]*xp[s + k*sw]) + wf[t + 1]*xp[s + k*sw + dw]) + ...`` for ``k < n``: one
    kernel row's taps in order, one pass over the output row; the 3- and 5-tap rows at stride 1 are written out so
    that LLVM vectorises them (stride 2 reads a column-split plane instead: :func:`_row_taps_s2`). All arguments
    are flat arrays and offsets (no views in the loop)."""
    o, n, s, d = np.uint64(o), np.uint64(n), np.uint64(s), np.uint64(dw)
    d2, d3, d4 = d + d, d + d + d, d + d + d + d  # uint64 only: int64 with uint64 is float64
    if kw == 3 and sw == 1:
        w0, w1, w2 = wf[t], wf[t + 1], wf[t + 2]
        for k in range(n):
            q = s + k
            yf[o + k] = ((yf[o + k] + w0 * xp[q]) + w1 * xp[q + d]) + w2 * xp[q + d2]
    elif kw == 5 and sw == 1:
        w0, w1, w2, w3, w4 = wf[t], wf[t + 1], wf[t + 2], wf[t + 3], wf[t + 4]
        for k in range(n):
            q = s + k
            yf[o + k] = ((((yf[o + k] + w0 * xp[q]) + w1 * xp[q + d]) + w2 * xp[q + d2])
                         + w3 * xp[q + d3]) + w4 * xp[q + d4]
    else:
        usw = np.uint64(sw)
        for j in range(kw):
            wv, sj = wf[t + j], s + np.uint64(j) * d
            for k in range(n):
                yf[o + k] += wv * xp[sj + k * usw]


@njit
def _pad_plane_split(src, ph, pw, Wh, xe, xo):
    """Write plane ``src (H, W)``, zero-padded by ``(ph, pw)``, into the zeroed flat buffers ``xe`` / ``xo``: the
    even / odd columns of the padded plane, ``Wh`` per row (stride-2 windows then read contiguous runs)."""
    H, W = src.shape
    for h in range(H):
        base = np.uint64((h + ph) * Wh)
        for v in range(W):
            col = v + pw
            half = np.uint64(col >> 1)
            if col & 1:
                xo[base + half] = src[h, v]
            else:
                xe[base + half] = src[h, v]


@njit(inline="always")
def _row_taps_s2(yf, o, n, xe, xo, s, wf, t, kw, dw):
    """:func:`_row_taps` at stride 2 on the column-split plane (``s`` the row's offset in ``xe``/``xo``): tap ``j``
    reads column ``2*k + j*dw``, i.e. ``xe`` or ``xo`` (by the parity of ``j*dw``) at ``k + (j*dw) // 2``."""
    o, n, s = np.uint64(o), np.uint64(n), np.uint64(s)
    one, two = np.uint64(1), np.uint64(2)
    if kw == 3 and dw == 1:
        w0, w1, w2 = wf[t], wf[t + 1], wf[t + 2]
        for k in range(n):
            q = s + k
            yf[o + k] = ((yf[o + k] + w0 * xe[q]) + w1 * xo[q]) + w2 * xe[q + one]
    elif kw == 5 and dw == 1:
        w0, w1, w2, w3, w4 = wf[t], wf[t + 1], wf[t + 2], wf[t + 3], wf[t + 4]
        for k in range(n):
            q = s + k
            yf[o + k] = ((((yf[o + k] + w0 * xe[q]) + w1 * xo[q]) + w2 * xe[q + one]) + w3 * xo[q + one]
                         ) + w4 * xe[q + two]
    else:
        for j in range(kw):
            wv, col = wf[t + j], j * dw
            src, sj = (xo if col & 1 else xe), s + np.uint64(col >> 1)
            for k in range(n):
                yf[o + k] += wv * src[sj + k]


@njit_parallel
def depthwise_forward(x, w, bias, sh, sw, ph, pw, dh, dw, Ho, Wo, act, low, high):
    """``y[n, c] = act(bias[c] + sum_ij w[c, 0, i, j] * xpad[n, c, oh*sh + i*dh, ow*sw + j*dw])``.

    ``x`` (N, C, H, W), ``w`` (C, 1, kh, kw), ``bias`` (C,) or empty; ``(act, low, high)`` an epilogue of
    :mod:`sparkdl.kernels.epilogue` (``NONE`` for the plain convolution), applied to each output plane while it is
    in cache. Returns ``y`` (N, C, Ho, Wo), x's dtype. Each output row is built in place, one pass per kernel row.
    """
    N, C, H, W = x.shape
    kh, kw = w.shape[2], w.shape[3]
    Wp = W + 2 * pw
    P = (H + 2 * ph) * Wp + (kw - 1) * dw
    y = np.empty((N, C, Ho, Wo), x.dtype)
    yf, wf = y.reshape(-1), np.ascontiguousarray(w).reshape(-1)
    has_bias = bias.shape[0] > 0
    wide = sh == 1 and sw == 1
    L = np.uint64(Ho * Wp)
    Wh = (Wp + (kw - 1) * dw) // 2 + 1  # columns per row of the even/odd halves (stride 2)
    for t in prange(N * C):
        b = t // C
        c = t - b * C
        v0 = bias[c] if has_bias else x.dtype.type(0)
        if sw == 2:
            Hp = H + 2 * ph
            xe, xo = np.zeros(Hp * Wh, x.dtype), np.zeros(Hp * Wh, x.dtype)
            _pad_plane_split(x[b, c], ph, pw, Wh, xe, xo)
            for oh in range(Ho):
                o = np.uint64((t * Ho + oh) * Wo)
                for k in range(o, o + np.uint64(Wo)):
                    yf[k] = v0
                for i in range(kh):
                    _row_taps_s2(yf, o, Wo, xe, xo, (oh * sh + i * dh) * Wh, wf, (c * kh + i) * kw, kw, dw)
            if act != NONE:
                activate_flat(yf, t * Ho * Wo, Ho * Wo, act, low, high)
            continue
        xp = np.zeros(P, x.dtype)
        _pad_plane(x[b, c], ph, pw, Wp, xp)
        if wide:  # the whole plane as one long row of Ho*Wp positions, then its Wo valid columns copied out
            acc = np.full(L, v0, x.dtype)
            for i in range(kh):
                _row_taps(acc, 0, L, xp, i * dh * Wp, wf, (c * kh + i) * kw, kw, dw, 1)
            for oh in range(Ho):
                o, a = np.uint64((t * Ho + oh) * Wo), np.uint64(oh * Wp)
                for k in range(np.uint64(Wo)):
                    yf[o + k] = acc[a + k]
        else:
            for oh in range(Ho):
                o = np.uint64((t * Ho + oh) * Wo)
                for k in range(o, o + np.uint64(Wo)):
                    yf[k] = v0
                for i in range(kh):
                    _row_taps(yf, o, Wo, xp, (oh * sh + i * dh) * Wp, wf, (c * kh + i) * kw, kw, dw, sw)
        if act != NONE:  # the plane, still in cache, in one loop
            activate_flat(yf, t * Ho * Wo, Ho * Wo, act, low, high)
    return y


@njit
def _plane_backward_wide(xp, g, w2, dh, dw, Wp, accw, gxp, input_grad):
    """One stride-1 (sample, channel) plane (``xp`` padded): one long loop per tap over the wide layout, the
    weight-gradient partials per position ``accw (kh*kw, Ho*Wp)``; with ``input_grad``, adds the padded plane's
    input gradient into ``gxp``."""
    kh, kw = w2.shape
    Ho, Wo = g.shape
    gw = np.zeros(Ho * Wp, xp.dtype)  # the output gradient in the wide layout, zero in the extra columns
    for oh in range(Ho):
        d = np.uint64(oh * Wp)
        for ow in range(np.uint64(Wo)):
            gw[d + ow] = g[oh, ow]
    for i in range(kh):
        for j in range(kw):
            a, wv, off = accw[i * kw + j], w2[i, j], np.uint64(i * dh * Wp + j * dw)
            for q in range(np.uint64(Ho * Wp)):
                a[q] += gw[q] * xp[off + q]
            if input_grad:
                for q in range(np.uint64(Ho * Wp)):
                    gxp[off + q] += wv * gw[q]


@njit
def _plane_backward_rows(xp, g, w2, sh, sw, dh, dw, Wp, accw, gxp, input_grad):
    """One (sample, channel) plane (``xp`` padded), output row by output row: the weight-gradient partials per
    output column ``accw (kh*kw, Wo)`` (they stay in L1 on large maps); with ``input_grad``, adds the padded
    plane's input gradient into ``gxp``."""
    kh, kw = w2.shape
    Ho, Wo = g.shape
    usw = np.uint64(sw)
    for oh in range(Ho):
        grow = g[oh]
        for i in range(kh):
            for j in range(kw):
                a, wv, s = accw[i * kw + j], w2[i, j], np.uint64((oh * sh + i * dh) * Wp + j * dw)
                if sw == 1:
                    for ow in range(np.uint64(Wo)):
                        a[ow] += grow[ow] * xp[s + ow]
                    if input_grad:
                        for ow in range(np.uint64(Wo)):
                            gxp[s + ow] += wv * grow[ow]
                    continue
                for ow in range(np.uint64(Wo)):
                    a[ow] += grow[ow] * xp[s + ow * usw]
                if input_grad:
                    for ow in range(np.uint64(Wo)):
                        gxp[s + ow * usw] += wv * grow[ow]


@njit_parallel
def depthwise_backward(x, w, gy, sh, sw, ph, pw, dh, dw, input_grad):
    """Gradients of :func:`depthwise_forward`: ``(grad_x, grad_w)``; ``grad_x`` is empty (0, 0, 0, 0) without
    ``input_grad``. ``gy`` (N, C, Ho, Wo) contiguous; ``grad_w`` has ``w``'s shape (C, 1, kh, kw)."""
    N, C, H, W = x.shape
    Ho, Wo = gy.shape[2], gy.shape[3]
    kh, kw = w.shape[2], w.shape[3]
    Wp = W + 2 * pw
    P = (H + 2 * ph) * Wp + (kw - 1) * dw
    grad_x = np.empty((N, C, H, W) if input_grad else (0, 0, 0, 0), x.dtype)
    grad_w = np.empty(w.shape, x.dtype)
    wide = sh == 1 and sw == 1 and kh * kw * Ho * Wp <= _WIDE_BACKWARD_MAX
    for c in prange(C):
        accw = np.zeros((kh * kw, Ho * Wp if wide else Wo), x.dtype)
        gxp = np.empty(P, x.dtype)
        for b in range(N):
            xp = np.zeros(P, x.dtype)
            _pad_plane(x[b, c], ph, pw, Wp, xp)
            if input_grad:
                gxp[:] = 0
            if wide:
                _plane_backward_wide(xp, gy[b, c], w[c, 0], dh, dw, Wp, accw, gxp, input_grad)
            else:
                _plane_backward_rows(xp, gy[b, c], w[c, 0], sh, sw, dh, dw, Wp, accw, gxp, input_grad)
            if input_grad:
                dst = grad_x[b, c]
                for h in range(H):
                    base = np.uint64((h + ph) * Wp + pw)
                    for v in range(np.uint64(W)):
                        dst[h, v] = gxp[base + v]
        for i in range(kh):
            for j in range(kw):
                grad_w[c, 0, i, j] = accw[i * kw + j].sum()
    return grad_x, grad_w
