"""2-D convolution kernels, forward and backward side by side: im2col / col2im around BLAS GEMMs, and the
Winograd F(2x2, 3x3) transforms (second half of the file).

im2col layout
-------------
Tensors are NCHW. A convolution over a *chunk* of ``nb`` samples is one GEMM (per group)::

    yw[Co, nb*Lq] = W[Co, K] @ cols[K, nb*Lq]          K = C*kh*kw, row k = (c, i, j)

Input planes are first copied, zero-padded, into ``xp[nb, C, P]`` (flat planes of width ``Wp = W + 2*pw``).
Column ``q`` of sample ``b`` in ``cols`` is the output position ``(oh, ow) = divmod(q, Wq)``; row ``(c, i, j)``
reads ``xp[b, c, (oh*sh + i*dh)*Wp + ow*sw + j*dw]``.

Stride 1 uses the *wide* layout ``Wq = Wp``: then each row of ``cols`` is one contiguous slice of the padded
plane (a memcpy), at the price of ``Wp - Wo`` garbage columns per output row that are dropped by
:func:`crop_bias` (forward) and zero in :func:`widen` (backward, so they add nothing to the gradients).
Otherwise ``Wq = Wo`` (exact layout).

The GEMMs themselves run in numpy (BLAS, called by :mod:`sparkdl.nn.conv`); these kernels do the data
movement, parallel over (sample, channel) planes so they also scale when a chunk holds a single large sample.

Vectorisation: numba checks every signed array index for negative wrap-around, and the resulting selects
stop LLVM from vectorising loops whose index has a run-time offset. Hot loops therefore index with
``np.uint64`` values (``range(np.uint64(n))`` plus unsigned offsets), which measured 3-10x faster here.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.config import njit, njit_parallel
from sparkdl.kernels.epilogue import NONE, activate_flat

__all__ = ["pad_planes", "im2col", "col2im", "crop_bias", "widen", "channel_sum", "winograd_input",
           "winograd_output", "winograd_grad_output", "winograd_input_adjoint"]


@njit_parallel
def pad_planes(x, n0, ph, pw, xp):
    """Copy samples ``x[n0:n0+nb]`` into zero-padded flat planes ``xp (nb, C, P)``; ``P >= Hp*Wp``."""
    nb, C, P = xp.shape
    H, W = x.shape[2], x.shape[3]
    Wp = W + 2 * pw
    for t in prange(nb * C):
        b = t // C
        c = t - b * C
        dst = xp[b, c]
        src = x[n0 + b, c]
        dst[:ph * Wp + pw] = 0
        for h in range(H):
            base = np.uint64((h + ph) * Wp + pw)
            for w in range(np.uint64(W)):
                dst[base + w] = src[h, w]
            dst[(h + ph) * Wp + pw + W:(h + ph + 1) * Wp + pw] = 0
        dst[(H + ph) * Wp + pw:] = 0


@njit_parallel
def im2col(xp, Wp, kh, kw, sh, sw, dh, dw, Ho, Wq, cols):
    """Fill ``cols (C*kh*kw, nb*Ho*Wq)`` from padded planes ``xp (nb, C, P)`` (see module docstring)."""
    nb, C, P = xp.shape
    Lq = Ho * Wq
    contiguous = sh == 1 and sw == 1 and Wq == Wp
    usw = np.uint64(sw)
    for t in prange(nb * C):
        b = t // C
        c = t - b * C
        src = xp[b, c]
        for i in range(kh):
            for j in range(kw):
                row = cols[(c * kh + i) * kw + j]
                if contiguous:
                    s, d = np.uint64(i * dh * Wp + j * dw), np.uint64(b * Lq)
                    for q in range(np.uint64(Lq)):
                        row[d + q] = src[s + q]
                    continue
                for oh in range(Ho):
                    s, d = np.uint64((oh * sh + i * dh) * Wp + j * dw), np.uint64(b * Lq + oh * Wq)
                    if sw == 1:
                        for ow in range(np.uint64(Wq)):
                            row[d + ow] = src[s + ow]
                    else:
                        for ow in range(np.uint64(Wq)):
                            row[d + ow] = src[s + ow * usw]


@njit_parallel
def col2im(gcols, n0, Hp, Wp, ph, pw, kh, kw, sh, sw, dh, dw, Ho, Wq, gx):
    """Adjoint of :func:`pad_planes` + :func:`im2col`: scatter-add ``gcols`` into ``gx[n0:n0+nb]`` (overwritten)."""
    N, C, H, W = gx.shape
    Lq = Ho * Wq
    nb = gcols.shape[1] // Lq
    contiguous = sh == 1 and sw == 1 and Wq == Wp
    P = Hp * Wp + (kw - 1) * dw
    usw = np.uint64(sw)
    for t in prange(nb * C):
        b = t // C
        c = t - b * C
        plane = np.zeros(P, gcols.dtype)
        for i in range(kh):
            for j in range(kw):
                row = gcols[(c * kh + i) * kw + j]
                if contiguous:
                    s, d = np.uint64(i * dh * Wp + j * dw), np.uint64(b * Lq)
                    for q in range(np.uint64(Lq)):
                        plane[s + q] += row[d + q]
                    continue
                for oh in range(Ho):
                    s, d = np.uint64((oh * sh + i * dh) * Wp + j * dw), np.uint64(b * Lq + oh * Wq)
                    for ow in range(np.uint64(Wq)):
                        plane[s + ow * usw] += row[d + ow]
        dst = gx[n0 + b, c]
        for h in range(H):
            base = np.uint64((h + ph) * Wp + pw)
            for w in range(np.uint64(W)):
                dst[h, w] = plane[base + w]


@njit_parallel
def crop_bias(yw, bias, n0, Ho, Wo, Wq, y, act=NONE, low=0.0, high=0.0):
    """``y[n0+b, co, oh, ow] = act(yw[co, b*Ho*Wq + oh*Wq + ow] + bias[co])`` (``bias`` may be empty: no bias;
    ``(act, low, high)`` an epilogue of :mod:`sparkdl.kernels.epilogue`, applied to each plane as it is written)."""
    Co, L = yw.shape
    Lq = Ho * Wq
    nb = L // Lq
    has_bias = bias.shape[0] > 0
    yf = y.reshape(-1)
    for t in prange(nb * Co):
        b = t // Co
        co = t - b * Co
        v = bias[co] if has_bias else yw.dtype.type(0)
        src = yw[co]
        dst = y[n0 + b, co]
        for oh in range(Ho):
            s = np.uint64(b * Lq + oh * Wq)
            for ow in range(np.uint64(Wo)):
                dst[oh, ow] = src[s + ow] + v
        if act != NONE:
            activate_flat(yf, ((n0 + b) * Co + co) * Ho * Wo, Ho * Wo, act, low, high)


@njit_parallel
def widen(gy, n0, Wq, gyw):
    """Adjoint of :func:`crop_bias`: ``gyw (Co, nb*Ho*Wq)`` from ``gy[n0:n0+nb]``, zeros in the extra columns."""
    N, Co, Ho, Wo = gy.shape
    Lq = Ho * Wq
    nb = gyw.shape[1] // Lq
    for t in prange(nb * Co):
        b = t // Co
        co = t - b * Co
        src = gy[n0 + b, co]
        dst = gyw[co]
        for oh in range(Ho):
            d = np.uint64(b * Lq + oh * Wq)
            for ow in range(np.uint64(Wo)):
                dst[d + ow] = src[oh, ow]
            dst[b * Lq + oh * Wq + Wo:b * Lq + (oh + 1) * Wq] = 0


@njit_parallel
def channel_sum(gy, out):
    """``out[c] = sum over (n, h, w) of gy[n, c, h, w]`` (float64 accumulation): the bias gradient."""
    N, C, H, W = gy.shape
    g = gy.reshape(N, C, H * W)
    for c in prange(C):
        acc = np.zeros(H * W, np.float64)  # one partial sum per position: a vectorisable element-wise loop
        for n in range(N):
            for q in range(np.uint64(H * W)):
                acc[q] += g[n, c, q]
        out[c] = acc.sum()


# ---------------------------------------------------------------------------------------------------------
# Winograd F(2x2, 3x3) (Lavin & Gray, 2016) for 3x3 / stride 1 / dilation 1 convolutions.
#
# Output tiles are 2x2, input patches 4x4 with stride 2. Tile q = a*(tw+1) + k of a sample covers output rows
# 2a, 2a+1 and columns 2k, 2k+1; tiles k == tw are padding tiles (zero input gradient, ignored in the output)
# so that every loop over the tiles of a plane is one long, vectorisable loop. A padded plane is stored as
# four *parity planes* P[2*(row & 1) + (col & 1), (row >> 1)*(tw+1) + (col >> 1)], so that patch entry (i, s)
# of tile q is P[2*(i & 1) + (s & 1), q + (i >> 1)*(tw+1) + (s >> 1)]: contiguous in q.
# Transformed tensors are laid out (channels, 16, nb*T) so the 16 rows written per tile never share cache
# sets; the stacked GEMMs read them through strided views.
# For LLVM to vectorise, hot loops index with unsigned integers (see the module docstring) and write at most
# 8 output streams per loop (with more, LLVM gives up on the run-time alias checks).
# ---------------------------------------------------------------------------------------------------------
_U1 = np.uint64(1)


@njit
def _to_parity(src, r0, c0, K1, P):
    """Write plane ``src (H, W)``, placed at padded offset (r0, c0), into zeroed parity planes ``P (4, S)``.

    Each pair of columns ``(2i, 2i + 1)`` of a row goes to the even and odd parity planes, in an order fixed by
    the parity of ``c0``: the two cases are separate loops so both reads sit at constant offsets from ``2i``, which
    LLVM turns into vector loads and shuffles (with the parity a run-time offset it gathered: 2.5x slower)."""
    H, W = src.shape
    w0 = c0 & 1  # 1: even source columns land on odd padded columns
    ke, ko = (w0 + c0) >> 1, (1 - w0 + c0) >> 1
    half = np.uint64(W >> 1)
    for h in range(H):
        r = h + r0
        pe = 2 * (r & 1)
        be, bo = np.uint64((r >> 1) * K1 + ke), np.uint64((r >> 1) * K1 + ko)
        row = src[h]
        if w0 == 0:
            for i in range(half):
                P[pe, be + i] = row[i + i]
                P[pe + 1, bo + i] = row[i + i + _U1]
        else:
            for i in range(half):
                P[pe + 1, bo + i] = row[i + i]
                P[pe, be + i] = row[i + i + _U1]
        if W & 1:
            s = W - 1 + c0
            P[pe + (s & 1), (r >> 1) * K1 + (s >> 1)] = src[h, W - 1]


@njit
def _from_parity(P, r0, c0, K1, dst):
    """``dst (H, W) =`` the window at padded offset (r0, c0) of the plane stored as parity planes ``P`` (the
    column parity split into two loops as in :func:`_to_parity`, so the writes are vector stores)."""
    H, W = dst.shape
    w0 = c0 & 1
    ke, ko = (w0 + c0) >> 1, (1 - w0 + c0) >> 1
    half = np.uint64(W >> 1)
    for h in range(H):
        r = h + r0
        pe = 2 * (r & 1)
        be, bo = np.uint64((r >> 1) * K1 + ke), np.uint64((r >> 1) * K1 + ko)
        row = dst[h]
        if w0 == 0:
            for i in range(half):
                row[i + i] = P[pe, be + i]
                row[i + i + _U1] = P[pe + 1, bo + i]
        else:
            for i in range(half):
                row[i + i] = P[pe + 1, bo + i]
                row[i + i + _U1] = P[pe, be + i]
        if W & 1:
            s = W - 1 + c0
            dst[h, W - 1] = P[pe + (s & 1), (r >> 1) * K1 + (s >> 1)]


@njit_parallel
def winograd_input(x, n0, ph, pw, th, tw, V):
    """``V[c, xi, b*T + q] = (B^T d B)[xi]`` for the 4x4 zero-padded input patch ``d`` of tile q."""
    N, C, H, W = x.shape
    K1 = tw + 1
    T = th * K1
    nb = V.shape[2] // T
    k1, k2 = np.uint64(K1), np.uint64(K1 + 1)
    for t in prange(nb * C):
        b = t // C
        c = t - b * C
        P = np.zeros((4, (th + 1) * K1 + 1), x.dtype)
        _to_parity(x[n0 + b, c], ph, pw, K1, P)
        o = np.uint64(b * T)
        for q in range(np.uint64(T)):  # rows 0, 1 of B^T d B (needs patch rows 0..2)
            d00, d01, d02, d03 = P[0, q], P[1, q], P[0, q + _U1], P[1, q + _U1]
            d10, d11, d12, d13 = P[2, q], P[3, q], P[2, q + _U1], P[3, q + _U1]
            d20, d21, d22, d23 = P[0, q + k1], P[1, q + k1], P[0, q + k2], P[1, q + k2]
            u00, u01, u02, u03 = d00 - d02, d01 + d02, d02 - d01, d01 - d03
            u10, u11, u12, u13 = d10 - d12, d11 + d12, d12 - d11, d11 - d13
            u20, u21, u22, u23 = d20 - d22, d21 + d22, d22 - d21, d21 - d23
            p = o + q
            V[c, 0, p], V[c, 1, p], V[c, 2, p], V[c, 3, p] = u00 - u20, u01 - u21, u02 - u22, u03 - u23
            V[c, 4, p], V[c, 5, p], V[c, 6, p], V[c, 7, p] = u10 + u20, u11 + u21, u12 + u22, u13 + u23
        for q in range(np.uint64(T)):  # rows 2, 3 (needs patch rows 1..3)
            d10, d11, d12, d13 = P[2, q], P[3, q], P[2, q + _U1], P[3, q + _U1]
            d20, d21, d22, d23 = P[0, q + k1], P[1, q + k1], P[0, q + k2], P[1, q + k2]
            d30, d31, d32, d33 = P[2, q + k1], P[3, q + k1], P[2, q + k2], P[3, q + k2]
            u10, u11, u12, u13 = d10 - d12, d11 + d12, d12 - d11, d11 - d13
            u20, u21, u22, u23 = d20 - d22, d21 + d22, d22 - d21, d21 - d23
            u30, u31, u32, u33 = d30 - d32, d31 + d32, d32 - d31, d31 - d33
            p = o + q
            V[c, 8, p], V[c, 9, p], V[c, 10, p], V[c, 11, p] = u20 - u10, u21 - u11, u22 - u12, u23 - u13
            V[c, 12, p], V[c, 13, p], V[c, 14, p], V[c, 15, p] = u10 - u30, u11 - u31, u12 - u32, u13 - u33


@njit_parallel
def winograd_output(M, bias, n0, th, tw, y, act=NONE, low=0.0, high=0.0):
    """``y[n0+b, co] = act(A^T m A + bias[co])`` for every tile (``m = M[co, :, tile]``), cropped to y's size;
    ``(act, low, high)`` an epilogue of :mod:`sparkdl.kernels.epilogue`, applied to each plane as it is written."""
    Co, _, L = M.shape
    plane = y.shape[2] * y.shape[3]
    yf = y.reshape(-1)
    K1 = tw + 1
    T = th * K1
    nb = L // T
    has_bias = bias.shape[0] > 0
    for t in prange(nb * Co):
        b = t // Co
        co = t - b * Co
        bv = bias[co] if has_bias else M.dtype.type(0)
        Y = np.empty((4, T), M.dtype)
        o = np.uint64(b * T)
        for q in range(np.uint64(T)):  # output row 0 of each tile: A^T row (1, 1, 1, 0)
            p = o + q
            s0 = M[co, 0, p] + M[co, 4, p] + M[co, 8, p]
            s1 = M[co, 1, p] + M[co, 5, p] + M[co, 9, p]
            s2 = M[co, 2, p] + M[co, 6, p] + M[co, 10, p]
            s3 = M[co, 3, p] + M[co, 7, p] + M[co, 11, p]
            Y[0, q], Y[1, q] = s0 + s1 + s2 + bv, s1 - s2 - s3 + bv
        for q in range(np.uint64(T)):  # output row 1: A^T row (0, 1, -1, -1)
            p = o + q
            s0 = M[co, 4, p] - M[co, 8, p] - M[co, 12, p]
            s1 = M[co, 5, p] - M[co, 9, p] - M[co, 13, p]
            s2 = M[co, 6, p] - M[co, 10, p] - M[co, 14, p]
            s3 = M[co, 7, p] - M[co, 11, p] - M[co, 15, p]
            Y[2, q], Y[3, q] = s0 + s1 + s2 + bv, s1 - s2 - s3 + bv
        _from_parity(Y, 0, 0, K1, y[n0 + b, co])
        if act != NONE:
            activate_flat(yf, ((n0 + b) * Co + co) * plane, plane, act, low, high)


@njit_parallel
def winograd_grad_output(gy, n0, th, tw, GY):
    """``GY[co, xi, b*T + q] = (A g A^T)[xi]`` for the 2x2 output-gradient tile ``g`` (zero off the output)."""
    N, Co, Ho, Wo = gy.shape
    K1 = tw + 1
    T = th * K1
    nb = GY.shape[2] // T
    for t in prange(nb * Co):
        b = t // Co
        co = t - b * Co
        G = np.zeros((4, T), gy.dtype)
        _to_parity(gy[n0 + b, co], 0, 0, K1, G)
        o = np.uint64(b * T)
        for q in range(np.uint64(T)):  # A = [[1, 0], [1, 1], [1, -1], [0, -1]]: rows 0, 1 of A g A^T
            g00, g01, g10, g11 = G[0, q], G[1, q], G[2, q], G[3, q]
            p = o + q
            GY[co, 0, p], GY[co, 1, p], GY[co, 2, p], GY[co, 3, p] = g00, g00 + g01, g00 - g01, -g01
            h0, h1 = g00 + g10, g01 + g11
            GY[co, 4, p], GY[co, 5, p], GY[co, 6, p], GY[co, 7, p] = h0, h0 + h1, h0 - h1, -h1
        for q in range(np.uint64(T)):  # rows 2, 3
            g00, g01, g10, g11 = G[0, q], G[1, q], G[2, q], G[3, q]
            p = o + q
            h0, h1 = g00 - g10, g01 - g11
            GY[co, 8, p], GY[co, 9, p], GY[co, 10, p], GY[co, 11, p] = h0, h0 + h1, h0 - h1, -h1
            GY[co, 12, p], GY[co, 13, p], GY[co, 14, p], GY[co, 15, p] = -g10, -g10 - g11, g11 - g10, g11


@njit(inline="always")
def _adjoint_columns(D, row, r, g0, g1, g2, g3):
    """``D[row:row + 4, r]`` = the column-transform adjoint of one row ``(g0, g1, g2, g3)`` of ``B (gV) B^T``."""
    D[row, r], D[row + 1, r], D[row + 2, r], D[row + 3, r] = g0, g1 - g2 + g3, g1 + g2 - g0, -g3


@njit_parallel
def winograd_input_adjoint(gV, n0, ph, pw, th, tw, gx):
    """Adjoint of :func:`winograd_input`: ``gx[n0:n0+nb]`` (overwritten) from ``gV (C, 16, nb*T)``."""
    N, C, H, W = gx.shape
    K1 = tw + 1
    T = th * K1
    nb = gV.shape[2] // T
    S = (th + 1) * K1 + 1
    Z = K1 + 1  # zero margin: tiles q - 1 and q - K1 - 1 exist for every q
    z, z1, zk, zk1 = np.uint64(Z), np.uint64(Z - 1), np.uint64(Z - K1), np.uint64(Z - K1 - 1)
    for t in prange(nb * C):
        b = t // C
        c = t - b * C
        D = np.empty((16, T + 2 * Z), gV.dtype)  # D[4*i + s, Z + q]: gradient of patch entry (i, s) of tile q
        for r in range(16):  # only the margins (no slices: views cost more than the zeros on small maps)
            for j in range(Z):
                D[r, j] = 0
                D[r, Z + T + j] = 0
        o = np.uint64(b * T)
        # row i of B (gV) B^T: the B^T row-transform adjoint, then the column adjoint (_adjoint_columns); one
        # loop per row i, so the loops hold no branch
        for q in range(np.uint64(T)):
            p = o + q
            _adjoint_columns(D, 0, z + q, gV[c, 0, p], gV[c, 1, p], gV[c, 2, p], gV[c, 3, p])
        for q in range(np.uint64(T)):
            p = o + q
            _adjoint_columns(D, 4, z + q, gV[c, 4, p] - gV[c, 8, p] + gV[c, 12, p],
                             gV[c, 5, p] - gV[c, 9, p] + gV[c, 13, p], gV[c, 6, p] - gV[c, 10, p] + gV[c, 14, p],
                             gV[c, 7, p] - gV[c, 11, p] + gV[c, 15, p])
        for q in range(np.uint64(T)):
            p = o + q
            _adjoint_columns(D, 8, z + q, gV[c, 4, p] + gV[c, 8, p] - gV[c, 0, p],
                             gV[c, 5, p] + gV[c, 9, p] - gV[c, 1, p], gV[c, 6, p] + gV[c, 10, p] - gV[c, 2, p],
                             gV[c, 7, p] + gV[c, 11, p] - gV[c, 3, p])
        for q in range(np.uint64(T)):
            p = o + q
            _adjoint_columns(D, 12, z + q, -gV[c, 12, p], -gV[c, 13, p], -gV[c, 14, p], -gV[c, 15, p])
        P = np.empty((4, S), gV.dtype)
        for rp in range(2):
            for cp in range(2):  # each padded input cell gathers from the four tiles that overlap it
                i0, i1, i2, i3 = 4 * rp + cp, 4 * rp + cp + 2, 4 * rp + cp + 8, 4 * rp + cp + 10
                for q in range(np.uint64(S)):
                    P[2 * rp + cp, q] = D[i0, z + q] + D[i1, z1 + q] + D[i2, zk + q] + D[i3, zk1 + q]
        _from_parity(P, ph, pw, K1, gx[n0 + b, c])
