"""Direct 2-D convolution forward kernel (the ``direct`` algorithm of :mod:`sparkdl.nn.conv_algorithm`).

Unsigned loop indices, as in :mod:`sparkdl.kernels.conv`, let LLVM vectorise the inner loops.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.config import njit, njit_parallel
from sparkdl.kernels.epilogue import activate_flat

__all__ = ["direct_forward", "phase_layout"]

#: Output channels accumulated together: each input row loaded feeds this many accumulator rows.
CHANNEL_BLOCK = 4

#: Accumulator floats per channel and pass (whole output rows, at least one): the block's accumulators stay in
#: the L1 cache on large maps (4 x 2048 floats = 32 KiB).
TILE = 2048


@njit
def phase_layout(C, H, W, kh, kw, sh, sw, ph, pw, dh, dw):
    """``(offs, P, plane, Ws)`` of the padded input cut into stride phases: ``offs[t]`` is where tap ``t = (c, i,
    j)`` starts in the flat buffer, ``P`` the floats per channel, ``plane`` per phase plane and ``Ws`` a phase
    plane's width, which is also the wide output's row length (columns ``Wo..Ws-1`` of each row are discarded)."""
    Hp, Wp = H + 2 * ph, W + 2 * pw
    Hs, Ws = (Hp + sh - 1) // sh, (Wp + sw - 1) // sw
    plane = Hs * Ws + ((kw - 1) * dw) // sw  # the last row's widest tap reads past the plane's end
    P = sh * sw * plane
    offs = np.empty(C * kh * kw, np.uint64)
    for c in range(C):
        for i in range(kh):
            for j in range(kw):
                r, s = i * dh, j * dw
                base = c * P + ((r % sh) * sw + s % sw) * plane
                offs[(c * kh + i) * kw + j] = np.uint64(base + (r // sh) * Ws + s // sw)
    return offs, P, plane, Ws


@njit_parallel
def direct_forward(x, w, bias, sh, sw, ph, pw, dh, dw, Ho, Wo, kind, low, high, threads):
    """``y (N, Co, Ho, Wo) = act(conv(x, w) + bias)``: one-group convolution computed directly, sample by sample.

    ``x`` (N, C, H, W) and ``w`` (Co, C, kh, kw) contiguous, ``bias`` (Co,) or empty; any stride, padding and
    dilation; ``(kind, low, high)`` an epilogue of :mod:`sparkdl.kernels.epilogue`, applied as each output
    plane is written; the samples are dealt to ``threads`` shares in order (the bits do not depend on it). Each
    sample is zero-padded and cut into its ``sh * sw`` stride phases (plane ``(a, b)``
    holds padded pixels ``(u * sh + a, v * sw + b)``), so that every tap ``(c, i, j)`` of every output row reads
    one contiguous run of one phase plane: output ``q = oh * Ws + ow`` of tap ``t`` is ``xp[offs[t] + q]``
    (:func:`phase_layout`); with stride 1 there is one phase, the padded image itself.

    No column matrix is built. Output channels are taken :data:`CHANNEL_BLOCK` at a time (the rest one at a
    time) and taps two at a time: each pass loads two input runs and adds ``w_a * x_a + w_b * x_b`` to each
    block channel's accumulator row, which starts at the bias -- the same expression, in tap order, for every
    channel, whichever block it is in. The output rows are taken :data:`TILE` floats at a time. Blocking the
    channels is what makes this faster than im2col and Winograd on layers with few taps (a stem, ResNet-20's
    first stage; :mod:`sparkdl.nn.conv_algorithm`).
    """
    N, C, H, W = x.shape
    Co, kh, kw = w.shape[0], w.shape[2], w.shape[3]
    offs, P, plane, Ws = phase_layout(C, H, W, kh, kw, sh, sw, ph, pw, dh, dw)
    T = C * kh * kw
    wf = w.reshape(Co, T)
    y = np.empty((N, Co, Ho, Wo), x.dtype)
    rows = max(1, min(Ho, TILE // Ws))
    shares = max(1, min(N, threads))
    for share in prange(shares):  # one padded buffer per thread: its padding stays zero from sample to sample
        xp = np.zeros(C * P, x.dtype)
        acc = np.empty((CHANNEL_BLOCK, _row_stride(rows * Ws)), x.dtype)
        for b in range(share * N // shares, (share + 1) * N // shares):
            _fill_phases(xp, x, b, sh, sw, ph, pw, P, plane, Ws)
            for oh0 in range(0, Ho, rows):
                _output_channels(y, acc, xp, offs, wf, bias, b, T, oh0, min(Ho, oh0 + rows), Ws, kind, low, high)
    return y


@njit(inline="always")
def _row_stride(n):
    """Floats between accumulator rows: ``n`` rounded up to 64 bytes, then 64 more while the rows would sit
    within 256 bytes of a multiple of 4 KiB apart (loads of one row would wait on stores to the other: 4K
    aliasing measured 1.5x slower)."""
    s = (n + 15) // 16 * 16
    while (s * 4) % 4096 < 256 or (s * 4) % 4096 > 4096 - 256:
        s += 16
    return s


@njit(inline="always")
def _fill_phases(xp, x, b, sh, sw, ph, pw, P, plane, Ws):
    """Write sample ``b`` of ``x`` into the interior of its phase planes in ``xp`` (the padding is left as is)."""
    _, C, H, W = x.shape
    for c in range(C):
        for a in range(sh):
            for e in range(sw):
                dst0 = c * P + (a * sw + e) * plane
                v_lo = (pw - e + sw - 1) // sw  # first phase column inside the image (e < sw: >= 0)
                v_hi = (W + pw - e + sw - 1) // sw
                for u in range((H + 2 * ph - a + sh - 1) // sh):
                    h = u * sh + a - ph
                    if h >= 0 and h < H:
                        row = dst0 + u * Ws
                        if sw == 1:  # a contiguous copy (vectorised)
                            d, src = np.uint64(row + pw), x[b, c, h]
                            for v in range(np.uint64(W)):
                                xp[d + v] = src[v]
                        else:
                            for v in range(v_lo, v_hi):
                                xp[row + v] = x[b, c, h, v * sw + e - pw]


@njit(inline="always")
def _output_channels(y, acc, xp, offs, wf, bias, b, T, oh0, oh1, Ws, kind, low, high):
    """Output rows ``oh0..oh1-1`` of every channel of sample ``b`` from its phase planes ``xp``, written with the
    epilogue applied."""
    Co, Ho, Wo = y.shape[1], y.shape[2], y.shape[3]
    yf = y.reshape(-1)
    has_bias = bias.shape[0] > 0
    nblock = Co // CHANNEL_BLOCK
    start, n = np.uint64(oh0 * Ws), (oh1 - oh0) * Ws
    for blk in range(nblock + Co % CHANNEL_BLOCK):
        c0 = blk * CHANNEL_BLOCK if blk < nblock else nblock * CHANNEL_BLOCK + (blk - nblock)
        rows = CHANNEL_BLOCK if blk < nblock else 1
        for r in range(rows):
            v0 = bias[c0 + r] if has_bias else y.dtype.type(0)
            for q in range(np.uint64(n)):
                acc[r, q] = v0
        if rows == CHANNEL_BLOCK:
            _block_taps(acc, xp, offs, start, wf[c0], wf[c0 + 1], wf[c0 + 2], wf[c0 + 3], T, n)
        else:
            _single_taps(acc[0], xp, offs, start, wf[c0], T, n)
        for r in range(rows):
            o = ((b * Co + c0 + r) * Ho + oh0) * Wo
            for oh in range(oh1 - oh0):
                s0 = np.uint64(oh * Ws)
                d0 = np.uint64(o + oh * Wo)
                for ow in range(np.uint64(Wo)):
                    yf[d0 + ow] = acc[r, s0 + ow]
            activate_flat(yf, o, (oh1 - oh0) * Wo, kind, low, high)


@njit(inline="always")
def _block_taps(acc, xp, offs, start, w0, w1, w2, w3, T, n):
    """Add every tap of four output channels (weight rows ``w0..w3``) to ``acc[0..3, :n]``, wide outputs
    ``start..start+n-1``, two taps per pass."""
    a0, a1, a2, a3 = acc[0], acc[1], acc[2], acc[3]
    t = 0
    while t + 2 <= T:
        oa, ob = offs[t] + start, offs[t + 1] + start
        p0, q0, p1, q1 = w0[t], w0[t + 1], w1[t], w1[t + 1]
        p2, q2, p3, q3 = w2[t], w2[t + 1], w3[t], w3[t + 1]
        for q in range(np.uint64(n)):
            xa, xb = xp[oa + q], xp[ob + q]
            a0[q] += p0 * xa + q0 * xb
            a1[q] += p1 * xa + q1 * xb
            a2[q] += p2 * xa + q2 * xb
            a3[q] += p3 * xa + q3 * xb
        t += 2
    if t < T:
        oa = offs[t] + start
        p0, p1, p2, p3 = w0[t], w1[t], w2[t], w3[t]
        for q in range(np.uint64(n)):
            xa = xp[oa + q]
            a0[q] += p0 * xa
            a1[q] += p1 * xa
            a2[q] += p2 * xa
            a3[q] += p3 * xa


@njit(inline="always")
def _single_taps(a0, xp, offs, start, w0, T, n):
    """:func:`_block_taps` for one output channel (the same expression per element)."""
    t = 0
    while t + 2 <= T:
        oa, ob = offs[t] + start, offs[t + 1] + start
        p0, q0 = w0[t], w0[t + 1]
        for q in range(np.uint64(n)):
            a0[q] += p0 * xp[oa + q] + q0 * xp[ob + q]
        t += 2
    if t < T:
        oa, p0 = offs[t] + start, w0[t]
        for q in range(np.uint64(n)):
            a0[q] += p0 * xp[oa + q]
