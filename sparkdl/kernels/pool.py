"""2-D pooling kernels over planes ``x (P, H, W)`` with ``P = N*C``; forward and backward side by side.

Every kernel is parallel over planes. Window bounds, tie-breaking and divisors follow PyTorch's CPU
kernels exactly (``aten/src/ATen/native/cpu/MaxPoolKernel.cpp``, ``AvgPoolKernel.cpp``,
``AdaptiveAvgPoolKernel.cpp``), so results match to float rounding.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.config import njit, njit_parallel

__all__ = ["is_pool2x2", "max_pool2x2_forward", "max_pool2d_forward", "max_pool2d_values", "max_pool2d_backward",
           "max_pool2d_backward_from_values", "max_pool2x2_backward", "avg_pool2d_forward", "avg_pool2d_backward",
           "adaptive_avg_pool2d_forward", "adaptive_avg_pool2d_backward"]


@njit
def is_pool2x2(H, W, kh, kw, sh, sw, ph, pw, Ho, Wo):
    """Whether a max pooling of ``(H, W)`` planes is the disjoint 2x2 / stride-2 / unpadded case whose windows
    all lie inside the input (no ``ceil_mode`` overhang): the fast kernels below."""
    return kh == 2 and kw == 2 and sh == 2 and sw == 2 and ph == 0 and pw == 0 and 2 * Ho <= H and 2 * Wo <= W


@njit(inline="always")
def _window(o, stride, pad, k, size):
    """``[lo, hi)``: the input positions along one axis that output position ``o``'s window covers (padding cut)."""
    lo = o * stride - pad
    return max(lo, 0), min(lo + k, size)


@njit
def _pick(v, best):
    """The running-maximum step of PyTorch's CPU kernel: a greater value or a NaN replaces ``best``."""
    return v if (v > best) | (v != v) else best


@njit_parallel
def max_pool2x2_forward(x, Ho, Wo):
    """Maxima of the disjoint 2x2 windows (see :func:`is_pool2x2`), without indices: branch-free selects that
    LLVM vectorises, 10x the index-tracking loop of :func:`max_pool2d_forward`. NaN propagates."""
    P = x.shape[0]
    y = np.empty((P, Ho, Wo), x.dtype)
    for p in prange(P):
        for oh in range(Ho):
            r0, r1, out = x[p, 2 * oh], x[p, 2 * oh + 1], y[p, oh]
            for ow in range(np.uint64(Wo)):
                w = ow + ow
                out[ow] = _pick(r1[w + 1], _pick(r1[w], _pick(r0[w + 1], r0[w])))
    return y


@njit_parallel
def max_pool2d_forward(x, kh, kw, sh, sw, ph, pw, Ho, Wo):
    """Window maxima and their flat in-plane indices ``h*W + w`` (int32); padding never wins, NaN does."""
    P, H, W = x.shape
    y = np.empty((P, Ho, Wo), x.dtype)
    idx = np.empty((P, Ho, Wo), np.int32)
    for p in prange(P):
        for oh in range(Ho):
            h0, h1 = _window(oh, sh, ph, kh, H)
            for ow in range(Wo):
                w0, w1 = _window(ow, sw, pw, kw, W)
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


@njit(inline="always")
def _window_max(xf, r, w0, w1):
    """The running maximum of ``xf[r + w0:r + w1]`` in order (:func:`_pick`)."""
    m = xf[np.uint64(r + w0)]
    for w in range(w0 + 1, w1):
        m = _pick(xf[np.uint64(r + w)], m)
    return m


@njit(inline="always")
def _row_maxima(xf, r, W, kw, sw, pw, Wo, hm, o):
    """``hm[o + ow]`` = the maximum of input row ``xf[r:r + W]`` over output column ``ow``'s window (clipped to
    the row), taken in column order. Windows wholly inside the row run branch-free with unsigned indices (the
    3- and 2-wide stride-2 windows written out, so LLVM vectorises their strided loads); the clipped ones at
    either end (padding, ``ceil_mode`` overhang) one by one."""
    lo = 0  # the first window that starts inside the row
    while lo < Wo and lo * sw - pw < 0:
        lo += 1
    hi = Wo  # one past the last window that ends inside the row
    while hi > lo and (hi - 1) * sw - pw + kw > W:
        hi -= 1
    for ow in range(lo):
        hm[np.uint64(o + ow)] = _window_max(xf, r, max(ow * sw - pw, 0), min(ow * sw - pw + kw, W))
    ur, uo, upw, one, two = np.uint64(r), np.uint64(o), np.uint64(pw), np.uint64(1), np.uint64(2)
    if sw == 2 and kw == 3:
        for ow in range(np.uint64(lo), np.uint64(hi)):
            s = ur + ow * two - upw
            hm[uo + ow] = _pick(xf[s + two], _pick(xf[s + one], xf[s]))
    elif sw == 2 and kw == 2:
        for ow in range(np.uint64(lo), np.uint64(hi)):
            s = ur + ow * two - upw
            hm[uo + ow] = _pick(xf[s + one], xf[s])
    else:
        usw = np.uint64(sw)
        for ow in range(np.uint64(lo), np.uint64(hi)):
            s = ur + ow * usw - upw
            m = xf[s]
            for j in range(1, kw):
                m = _pick(xf[s + np.uint64(j)], m)
            hm[uo + ow] = m
    for ow in range(hi, Wo):
        hm[np.uint64(o + ow)] = _window_max(xf, r, max(ow * sw - pw, 0), min(ow * sw - pw + kw, W))


#: Planes per work item of :func:`max_pool2d_values` (each item allocates its row-maxima buffer once).
_POOL_ITEMS = 64


@njit_parallel
def max_pool2d_values(x, kh, kw, sh, sw, ph, pw, Ho, Wo):
    """The maxima of :func:`max_pool2d_forward` without the indices (inference), separably: each input row's
    maxima over every output column's window (:func:`_row_maxima`, once per row even where windows overlap), then
    each output row the running maximum of its window's rows, one contiguous pass per row. Bit for bit the
    window scan in row-major order: the first of equal maxima wins (so the sign of a zero), as in PyTorch's CPU
    kernel, and the last NaN (NaN propagates). MaxPool 3x3/2 of SqueezeNet's 111x111 planes: 4x the previous
    row-by-offset kernel at 1 thread."""
    P, H, W = x.shape
    y = np.empty((P, Ho, Wo), x.dtype)
    xf, yf = np.ascontiguousarray(x).reshape(-1), y.reshape(-1)
    items = min(P, _POOL_ITEMS)
    for item in prange(items):
        hm = np.empty(H * Wo, x.dtype)
        for p in range(item * P // items, (item + 1) * P // items):
            for h in range(H):
                _row_maxima(xf, (p * H + h) * W, W, kw, sw, pw, Wo, hm, h * Wo)
            for oh in range(Ho):
                h0, h1 = max(oh * sh - ph, 0), min(oh * sh - ph + kh, H)
                o, a = np.uint64((p * Ho + oh) * Wo), np.uint64(h0 * Wo)
                for k in range(np.uint64(Wo)):
                    yf[o + k] = hm[a + k]
                for h in range(h0 + 1, h1):
                    a = np.uint64(h * Wo)
                    for k in range(np.uint64(Wo)):
                        yf[o + k] = _pick(hm[a + k], yf[o + k])
    return y


@njit_parallel
def max_pool2d_backward(grad_y, idx, H, W, kh, kw, sh, sw, ph, pw):
    """Route each output gradient to its window's argmax (summing where windows overlap)."""
    P, Ho, Wo = grad_y.shape
    gx = np.zeros((P, H * W), grad_y.dtype)
    for p in prange(P):
        for oh in range(Ho):
            for ow in range(Wo):
                gx[p, idx[p, oh, ow]] += grad_y[p, oh, ow]
    return gx.reshape(P, H, W)


@njit_parallel
def max_pool2d_backward_from_values(grad_y, x, y, kh, kw, sh, sw, ph, pw):
    """Backward of :func:`max_pool2d_values` from its input ``x (P, H, W)`` and output ``y (P, Ho, Wo)`` instead of
    saved indices: each window's winner is the one :func:`max_pool2d_forward` records, the *first* cell (row-major)
    equal to the maximum, or the *last* NaN when the maximum is NaN; overlapping windows sum in output order.

    Tracking indices kept the forward pass scalar. Measured on 2,048 planes of 31x31, 3x3 windows, stride 2
    (SqueezeNet's first pool at 64x64 input, batch 32), 1 thread: forward with indices 19.1 ms + backward 0.7,
    values 2.2 ms + this search 9.6 (it stops at the winner)."""
    P, Ho, Wo = grad_y.shape
    H, W = x.shape[1], x.shape[2]
    gx = np.zeros((P, H * W), grad_y.dtype)
    for p in prange(P):
        xp, gp = x[p], gx[p]
        for oh in range(Ho):
            h0, h1 = _window(oh, sh, ph, kh, H)
            for ow in range(Wo):
                w0, w1 = _window(ow, sw, pw, kw, W)
                m = y[p, oh, ow]
                pos = -1
                if m == m:
                    for h in range(h0, h1):
                        for w in range(w0, w1):
                            if xp[h, w] == m:
                                pos = h * W + w
                                break
                        if pos >= 0:
                            break
                else:
                    for h in range(h0, h1):
                        for w in range(w0, w1):
                            if xp[h, w] != xp[h, w]:
                                pos = h * W + w
                gp[pos] += grad_y[p, oh, ow]
    return gx.reshape(P, H, W)


@njit_parallel
def max_pool2x2_backward(grad_y, x, y):
    """Backward of :func:`max_pool2x2_forward` from its input ``x (P, H, W)`` and output ``y`` instead of saved
    indices: the winner is recomputed as the running maximum picks it, i.e. the *first* cell equal to the
    maximum, or the *last* NaN when the maximum is NaN. Every input cell is written once (no zero-fill pass).

    Tracking indices in the forward pass stops LLVM from vectorising it (10x slower), and ``x`` is usually
    held anyway (a ReLU's output), so this costs no memory."""
    P, Ho, Wo = grad_y.shape
    H, W = x.shape[1], x.shape[2]
    gx = np.empty((P, H, W), grad_y.dtype)
    zero = grad_y.dtype.type(0)
    for p in prange(P):
        for oh in range(Ho):
            r0, r1, g0, g1 = x[p, 2 * oh], x[p, 2 * oh + 1], gx[p, 2 * oh], gx[p, 2 * oh + 1]
            ym, gy = y[p, oh], grad_y[p, oh]
            for ow in range(np.uint64(Wo)):
                w = ow + ow
                m, g = ym[ow], gy[ow]
                a, b, c, d = r0[w], r0[w + 1], r1[w], r1[w + 1]
                fa, fb, fc = a == m, b == m, c == m  # all False when m is NaN
                nb, nc, nd = b != b, c != c, d != d  # all False when m is not NaN
                nm = m != m
                g0[w] = g if fa | (nm & ~(nb | nc | nd)) else zero
                g0[w + 1] = g if (fb & ~fa) | (nb & ~(nc | nd)) else zero
                g1[w] = g if (fc & ~(fa | fb)) | (nc & ~nd) else zero
                g1[w + 1] = g if (~(fa | fb | fc) & ~nm) | nd else zero
            gx[p, 2 * oh:2 * oh + 2, 2 * Wo:] = zero  # odd width: the last column is in no window
        gx[p, 2 * Ho:, :] = zero
    return gx


@njit(inline="always")
def _window_sum(x, p, h0, h1, w0, w1):
    """Sum of ``x[p, h0:h1, w0:w1]`` in ``x``'s dtype, row by row."""
    s = x.dtype.type(0)
    for h in range(h0, h1):
        for w in range(w0, w1):
            s += x[p, h, w]
    return s


@njit(inline="always")
def _window_add(gx, p, h0, h1, w0, w1, g):
    """``gx[p, h0:h1, w0:w1] += g``, row by row (the adjoint of :func:`_window_sum`)."""
    for h in range(h0, h1):
        for w in range(w0, w1):
            gx[p, h, w] += g


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
                s = _window_sum(x, p, bounds[oh, ow, 0], bounds[oh, ow, 1], bounds[oh, ow, 2], bounds[oh, ow, 3])
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
                _window_add(gx, p, bounds[oh, ow, 0], bounds[oh, ow, 1], bounds[oh, ow, 2], bounds[oh, ow, 3], g)
    return gx


@njit(inline="always")
def _adaptive_window(i, n_in, n_out):
    """Input range ``[floor(i*n_in/n_out), ceil((i+1)*n_in/n_out))`` of adaptive output index ``i``."""
    return (i * n_in) // n_out, ((i + 1) * n_in + n_out - 1) // n_out


@njit(inline="always")
def _plane_sum(xf, o, n):
    """Sum of ``xf[o:o + n]`` in eight interleaved partial sums (element ``i`` into sum ``i % 8``), added pairwise,
    then the ``n % 8`` last elements in order: eight independent chains instead of one (a global average pool's
    serial sum was latency-bound, 7x onnxruntime's ReduceMean)."""
    z = xf.dtype.type(0)
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = z
    o, n8 = np.uint64(o), np.uint64(n - n % 8)
    for i in range(o, o + n8, np.uint64(8)):
        s0 += xf[i]
        s1 += xf[i + np.uint64(1)]
        s2 += xf[i + np.uint64(2)]
        s3 += xf[i + np.uint64(3)]
        s4 += xf[i + np.uint64(4)]
        s5 += xf[i + np.uint64(5)]
        s6 += xf[i + np.uint64(6)]
        s7 += xf[i + np.uint64(7)]
    s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    for i in range(o + n8, o + np.uint64(n)):
        s += xf[i]
    return s


@njit_parallel
def adaptive_avg_pool2d_forward(x, Ho, Wo):
    """Mean over ``[floor(i*H/Ho), ceil((i+1)*H/Ho))`` (rows; columns likewise), divided as ``sum/kh/kw``; a
    global pool (``Ho == Wo == 1``) sums each plane with :func:`_plane_sum`, other windows row by row."""
    P, H, W = x.shape
    y = np.empty((P, Ho, Wo), x.dtype)
    if Ho == 1 and Wo == 1:
        xf = np.ascontiguousarray(x).reshape(-1)
        for p in prange(P):
            y[p, 0, 0] = _plane_sum(xf, p * H * W, H * W) / x.dtype.type(H) / x.dtype.type(W)
        return y
    for p in prange(P):
        for oh in range(Ho):
            h0, h1 = _adaptive_window(oh, H, Ho)
            for ow in range(Wo):
                w0, w1 = _adaptive_window(ow, W, Wo)
                s = _window_sum(x, p, h0, h1, w0, w1)
                y[p, oh, ow] = s / x.dtype.type(h1 - h0) / x.dtype.type(w1 - w0)
    return y


@njit_parallel
def adaptive_avg_pool2d_backward(grad_y, H, W):
    """Adjoint of :func:`adaptive_avg_pool2d_forward`."""
    P, Ho, Wo = grad_y.shape
    gx = np.zeros((P, H, W), grad_y.dtype)
    for p in prange(P):
        for oh in range(Ho):
            h0, h1 = _adaptive_window(oh, H, Ho)
            for ow in range(Wo):
                w0, w1 = _adaptive_window(ow, W, Wo)
                g = grad_y[p, oh, ow] / grad_y.dtype.type(h1 - h0) / grad_y.dtype.type(w1 - w0)
                _window_add(gx, p, h0, h1, w0, w1, g)
    return gx
