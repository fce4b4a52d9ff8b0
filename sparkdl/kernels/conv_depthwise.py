"""Depthwise 2-D convolution kernels (``groups == in_channels == out_channels``), forward and backward side by side.

Every channel is convolved with its own ``kh x kw`` filter, so there is no GEMM to feed: im2col would copy the
input ``kh*kw`` times to run ``C`` GEMMs of a single row. These kernels read each zero-padded input plane
once per tap instead.

A plane is zero-padded into a flat buffer ``xp`` of row width ``Wp = W + 2*pw`` (the layout of
:mod:`sparkdl.kernels.conv`). Stride 1 uses the *wide* layout: output position ``q = oh*Wp + ow`` of tap
``(i, j)`` reads ``xp[i*dh*Wp + j*dw + q]``, so each tap is one long contiguous multiply-add over the plane,
at the price of ``Wp - Wo`` garbage columns per row that are never written out (and are zero in the
gradient). The forward runs small stride-2 planes the same way on the plane split by row and column parity
(the *quarter* layout); other strides loop over output rows, ``xp[(oh*sh + i*dh)*Wp + j*dw + ow*sw]``.

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


@njit(inline="always")
def _pad_flat(xf, src, H, W, ph, pw, Wp, xp):
    """Write plane ``xf[src:src + H*W]`` (H, W) at offset ``(ph, pw)`` into the flat buffer ``xp`` of row width
    ``Wp`` (only the plane's positions: the zero border is left as it is)."""
    s = np.uint64(src)
    for h in range(H):
        base, r = np.uint64((h + ph) * Wp + pw), s + np.uint64(h * W)
        for v in range(np.uint64(W)):
            xp[base + v] = xf[r + v]


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


@njit(inline="always")
def _taps3x3(acc, n, xp, r, d, wf, t, v0):
    """``acc[q] = v0 + w00*xp[q] + w01*xp[q + d] + ... + w22*xp[q + 2r + 2d]`` summed left to right for ``q < n``:
    a 3x3 filter's nine taps (rows ``r`` apart, columns ``d`` apart in ``xp``) in one pass, the order of
    :func:`_row_taps` row after row, with no accumulator round trip between rows."""
    n, r, d = np.uint64(n), np.uint64(r), np.uint64(d)
    w0, w1, w2, w3, w4 = wf[t], wf[t + 1], wf[t + 2], wf[t + 3], wf[t + 4]
    w5, w6, w7, w8 = wf[t + 5], wf[t + 6], wf[t + 7], wf[t + 8]
    r2, d2 = r + r, d + d
    for q in range(n):
        a = ((v0 + w0 * xp[q]) + w1 * xp[q + d]) + w2 * xp[q + d2]
        a = ((a + w3 * xp[q + r]) + w4 * xp[q + r + d]) + w5 * xp[q + r + d2]
        acc[q] = ((a + w6 * xp[q + r2]) + w7 * xp[q + r2 + d]) + w8 * xp[q + r2 + d2]


@njit(inline="always")
def _split_rows(xf, src, H, W, ph, pw, Wh, xe, xo, row_base):
    """Write plane ``xf[src:src + H*W]`` (H, W), zero-padded by ``(ph, pw)``, into the column-split buffers ``xe`` /
    ``xo`` (the even / odd columns of the padded plane, ``Wh`` per row): padded row ``R`` starts at
    ``row_base[R]`` (both halves). Only the plane's own positions are written: the zero border stays from the
    buffers' first zeroing. Stride-2 windows then read contiguous runs. Source columns ``2i, 2i + 1`` go to the
    two halves in an order fixed by the parity of ``pw``: one loop per case, both reads at constant offsets, so
    LLVM vectorises the split (with the parity tested per column it stayed scalar: 3x slower)."""
    s = np.uint64(src)
    half, k = np.uint64(W >> 1), np.uint64(pw >> 1)
    one = np.uint64(1)
    for h in range(H):
        base, r = np.uint64(row_base[h + ph]) + k, s + np.uint64(h * W)
        if pw & 1 == 0:
            for i in range(half):
                xe[base + i] = xf[r + i + i]
                xo[base + i] = xf[r + i + i + one]
        else:
            for i in range(half):
                xo[base + i] = xf[r + i + i]
                xe[base + i + one] = xf[r + i + i + one]
        if W & 1:
            col = W - 1 + pw
            if col & 1:
                xo[np.uint64(row_base[h + ph]) + np.uint64(col >> 1)] = xf[r + np.uint64(W - 1)]
            else:
                xe[np.uint64(row_base[h + ph]) + np.uint64(col >> 1)] = xf[r + np.uint64(W - 1)]


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


@njit(inline="always")
def _taps3x3_s2(yf, o, n, xe, xo, r0, r1, r2, wf, t, v0):
    """``yf[o + k] = v0 + w00*xe[r0 + k] + w01*xo[r0 + k] + w02*xe[r0 + k + 1] + w10*xe[r1 + k] + ...`` for
    ``k < n``: one output row of a 3x3 stride-2 filter (dilation 1) on the column-split plane, rows starting at
    ``r0``, ``r1``, ``r2`` in ``xe``/``xo``; the nine taps in one pass, the order of :func:`_row_taps_s2` row after
    row (the same bits, without the output row's round trip per kernel row)."""
    o, n = np.uint64(o), np.uint64(n)
    r0, r1, r2, one = np.uint64(r0), np.uint64(r1), np.uint64(r2), np.uint64(1)
    w0, w1, w2, w3, w4 = wf[t], wf[t + 1], wf[t + 2], wf[t + 3], wf[t + 4]
    w5, w6, w7, w8 = wf[t + 5], wf[t + 6], wf[t + 7], wf[t + 8]
    for k in range(n):
        a = ((v0 + w0 * xe[r0 + k]) + w1 * xo[r0 + k]) + w2 * xe[r0 + k + one]
        a = ((a + w3 * xe[r1 + k]) + w4 * xo[r1 + k]) + w5 * xe[r1 + k + one]
        yf[o + k] = ((a + w6 * xe[r2 + k]) + w7 * xo[r2 + k]) + w8 * xe[r2 + k + one]


@njit(inline="always")
def _copy_rows(yf, o, acc, Ho, Wo, Wa):
    """``yf[o + oh*Wo + ow] = acc[oh*Wa + ow]``: the valid columns of a wide accumulator."""
    for oh in range(Ho):
        d, a = np.uint64(o + oh * Wo), np.uint64(oh * Wa)
        for k in range(np.uint64(Wo)):
            yf[d + k] = acc[a + k]


#: Stride-2 planes of at most this many output positions are computed in the quarter layout (the plane split by
#: row and column parity, each tap one contiguous run over ``Ho * Wh`` positions); larger ones row by row.
#: Measured (1 thread, batch 8, interleaved medians of 21, idle; row-wise vs quarter ms): 28x28 -> 14x14 192 ch
#: 1.63 vs 0.90, 14x14 -> 7x7 576 ch 1.71 vs 0.97, 5x5 288 ch 1.20 vs 0.66, 28x28 5x5 96 ch 1.31 vs 0.59; but
#: 56x56 -> 28x28 144 ch 3.43 vs 3.98 (the copy out of the accumulator costs more than the short rows).
_QUARTER_MAX_POSITIONS = 14 * 14

#: Planes per work item of the forward: each item allocates and zeroes its padded buffers once, and every plane
#: after the first only rewrites their interior (on 7x7 maps the per-plane allocations and zeroing were most of
#: the time). The partition of planes into items does not change any result.
_FORWARD_ITEMS = 64


@njit_parallel
def depthwise_forward(x, w, bias, sh, sw, ph, pw, dh, dw, Ho, Wo, act, low, high):
    """``y[n, c] = act(bias[c] + sum_ij w[c, 0, i, j] * xpad[n, c, oh*sh + i*dh, ow*sw + j*dw])``.

    ``x`` (N, C, H, W), ``w`` (C, 1, kh, kw), ``bias`` (C,) or empty; ``(act, low, high)`` an epilogue of
    :mod:`sparkdl.kernels.epilogue` (``NONE`` for the plain convolution), applied to each output plane while it is
    in cache. Returns ``y`` (N, C, Ho, Wo), x's dtype.

    Layouts: stride 1 the wide one (each tap one run over ``Ho * Wp`` positions); stride 2 in both directions on
    planes of at most :data:`_QUARTER_MAX_POSITIONS` outputs the quarter layout (rows and columns split by parity,
    each tap one run over ``Ho * Wh``); other column stride 2 row by row on the column-split plane; other strides
    row by row. Every layout sums the same terms in the same order (bias, then taps in ``(i, j)`` order), so
    they give the same bits.
    """
    N, C, H, W = x.shape
    kh, kw = w.shape[2], w.shape[3]
    Hp, Wp = H + 2 * ph, W + 2 * pw
    y = np.empty((N, C, Ho, Wo), x.dtype)
    xf = np.ascontiguousarray(x).reshape(-1)
    yf, wf = y.reshape(-1), np.ascontiguousarray(w).reshape(-1)
    has_bias = bias.shape[0] > 0
    split = sw == 2
    quarter = split and sh == 2 and Ho * Wo <= _QUARTER_MAX_POSITIONS
    wide = sh == 1 and sw == 1
    Wh = (Wp + (kw - 1) * dw) // 2 + 1  # columns per row of the even/odd halves (stride 2)
    Hq = (Hp + 1) // 2 + (kh - 1) * dh // 2 + 1  # rows per quarter, with slack for the garbage columns' reads
    Q = Hq * Wh
    if quarter:  # padded row R: quarter (R & 1), row R >> 1; xe holds the even-column quarters, xo the odd ones
        row_base, plane, rows = np.array([(R & 1) * Q + (R >> 1) * Wh for R in range(Hp)]), 2 * Q, Ho * Wh
    elif split:
        row_base, plane, rows = np.array([R * Wh for R in range(Hp)]), Hp * Wh, 0
    else:
        row_base, plane, rows = np.zeros(0, np.int64), Hp * Wp + (kw - 1) * dw, Ho * Wp if wide else 0
    T = N * C
    items = min(T, _FORWARD_ITEMS)
    for item in prange(items):
        xe = np.zeros(plane, x.dtype)  # the padded plane (stride 1 and others) or its even columns (stride 2)
        xo = np.zeros(plane if split else 0, x.dtype)
        acc = np.empty(rows, x.dtype)
        for t in range(item * T // items, (item + 1) * T // items):
            c = t % C
            v0 = bias[c] if has_bias else x.dtype.type(0)
            o = t * Ho * Wo
            if split:
                _split_rows(xf, t * H * W, H, W, ph, pw, Wh, xe, xo, row_base)
            else:
                _pad_flat(xf, t * H * W, H, W, ph, pw, Wp, xe)
            if wide and kh == 3 and kw == 3:  # all nine taps in one pass (the same sums, in the same order)
                _taps3x3(acc, rows, xe, dh * Wp, dw, wf, c * 9, v0)
                _copy_rows(yf, o, acc, Ho, Wo, Wp)
            elif quarter or wide:  # the plane as one long row of accumulators, then its Wo valid columns copied out
                acc[:] = v0
                for i in range(kh):
                    if quarter:
                        _row_taps_s2(acc, 0, rows, xe, xo, ((i * dh) & 1) * Q + ((i * dh) >> 1) * Wh, wf,
                                     (c * kh + i) * kw, kw, dw)
                    else:
                        _row_taps(acc, 0, rows, xe, i * dh * Wp, wf, (c * kh + i) * kw, kw, dw, 1)
                _copy_rows(yf, o, acc, Ho, Wo, Wh if quarter else Wp)
            elif split and sh == 2 and kh == 3 and kw == 3 and dh == 1 and dw == 1:
                for oh in range(Ho):
                    _taps3x3_s2(yf, o + oh * Wo, Wo, xe, xo, (2 * oh) * Wh, (2 * oh + 1) * Wh, (2 * oh + 2) * Wh,
                                wf, c * 9, v0)
            else:
                for oh in range(Ho):
                    d = np.uint64(o + oh * Wo)
                    for k in range(d, d + np.uint64(Wo)):
                        yf[k] = v0
                    for i in range(kh):
                        if split:
                            _row_taps_s2(yf, d, Wo, xe, xo, (oh * sh + i * dh) * Wh, wf, (c * kh + i) * kw, kw,
                                         dw)
                        else:
                            _row_taps(yf, d, Wo, xe, (oh * sh + i * dh) * Wp, wf, (c * kh + i) * kw, kw, dw, sw)
            if act != NONE:  # the plane, still in cache, in one loop
                activate_flat(yf, o, Ho * Wo, act, low, high)
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
