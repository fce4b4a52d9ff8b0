"""im2col + BLAS GEMM convolution drivers (any geometry).

The numba kernels (padding, im2col, col2im, bias) are in :mod:`sparkdl.kernels.conv`; these drivers call BLAS
(numpy ``matmul``) between them, one chunk of samples at a time (:mod:`sparkdl.nn.conv_chunks`).
:class:`sparkdl.nn.Conv2d`, :class:`~sparkdl.nn.Conv1d` and :class:`~sparkdl.nn.ConvTranspose2d` use them.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sparkdl.kernels import conv as K
from sparkdl.kernels.epilogue import NO_EPILOGUE
from sparkdl.nn.conv_chunks import chunk_samples, chunks, run_chunks
from sparkdl.nn.gemm import matmul

__all__ = ["ConvGeometry", "im2col_plan", "im2col_forward", "im2col_backward", "im2col_input_grad"]

#: Use the wide (stride-1) column layout while it wastes at most this fraction of GEMM columns (its memcpy rows
#: save little on small maps, where the waste is largest). Measured (3x3 stride 1, forward / backward, 1 thread,
#: the two settings interleaved, medians of 8; 0.5 vs 0.25 ms): 4x4 256 ch batch 32 5.6 / 11.7 vs 4.4 / 9.5, 4x4
#: 128 ch batch 64 3.1 / 6.4 vs 2.7 / 5.7, 7x7 512 ch batch 8 15.0 / 29.3 vs 12.0 / 26.0 (8x8 and larger: wide
#: either way).
_MAX_WIDE_WASTE = 0.25

#: The weight gradient of a layer with more weight bytes than this is computed as ``grad_y @ cols^T`` (the
#: weight's own layout); smaller ones as ``cols @ grad_y^T`` and transposed once at the end (the faster BLAS shape
#: for thin outputs over long sums). The transpose of a large weight cost more than the GEMM. Measured (1 thread,
#: OpenBLAS 0.3.31 SkylakeX kernels on AMD EPYC (Zen 5), medians of 15; C_out x columns x K: transposed form
#: incl. its transpose vs direct ms): 512 x 128 x 4608 10.9 vs 3.6, 256 x 264 x 2304 3.1 vs 1.9, 256 x 256 x 1152
#: 1.39 vs 0.89, 128 x 360 x 1152 0.81 vs 0.74; 64 x 1152 x 576 0.59 vs 0.79, 32 x 8192 x 144 0.71 vs 1.12,
#: 16 x 16384 x 27 0.32 vs 0.42. Haswell kernels: the same order (14.5 vs 6.0 ... 0.79 vs 0.84).
_DIRECT_WEIGHT_GRAD_BYTES = 1 << 19


class ConvGeometry(NamedTuple):
    """A 2-D convolution's window geometry: (height, width) pairs and the group count."""

    kernel_size: tuple
    stride: tuple
    padding: tuple
    dilation: tuple
    groups: int


def im2col_plan(geom: ConvGeometry, x_shape, ho: int, wo: int, c_out: int, itemsize: int):
    """Chunk geometry ``(hp, wp, wq, plane, k, nb)`` of a convolution of input ``x_shape`` (N, C, H, W) with
    output size ``(ho, wo)`` and ``c_out`` output channels (see :mod:`sparkdl.kernels.conv`)."""
    n, c, h, w = x_shape
    (kh, kw), (sh, sw), (ph, pw), dw = geom.kernel_size, geom.stride, geom.padding, geom.dilation[1]
    hp, wp = h + 2 * ph, w + 2 * pw
    wide = sh == 1 and sw == 1 and wp <= (1 + _MAX_WIDE_WASTE) * wo
    wq = wp if wide else wo
    plane = hp * wp + ((kw - 1) * dw if wide else 0)
    k = c * kh * kw
    return hp, wp, wq, plane, k, chunk_samples(n, (k + c_out) * ho * wq * itemsize, ho * wq,
                                               c_out * k // geom.groups * itemsize)


def _columns(x, n0: int, b: int, geom: ConvGeometry, plan: tuple, ho: int, xp, cols) -> np.ndarray:
    """The im2col columns ``(k, b*ho*wq)`` of samples ``x[n0:n0+b]`` (a view of ``cols``): the samples are
    padded into ``xp``, then gathered (``plan`` from :func:`im2col_plan`)."""
    hp, wp, wq, plane, k, nb = plan
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geom.kernel_size, geom.stride, geom.padding, geom.dilation
    lc = b * ho * wq
    xpc, colc = xp[:b], cols[:k * lc].reshape(k, lc)
    K.pad_planes(x, n0, ph, pw, xpc)
    K.im2col(xpc, wp, kh, kw, sh, sw, dh, dw, ho, wq, colc)
    return colc


def _add_columns(gcols, n0: int, geom: ConvGeometry, plan: tuple, ho: int, grad_x) -> None:
    """Adjoint of :func:`_columns`: ``grad_x[n0:n0+b]`` (overwritten) from the column gradients ``gcols``."""
    hp, wp, wq, plane, k, nb = plan
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geom.kernel_size, geom.stride, geom.padding, geom.dilation
    K.col2im(gcols, n0, hp, wp, ph, pw, kh, kw, sh, sw, dh, dw, ho, wq, grad_x)


def _workspace(dtype, plan: tuple, c: int, co: int, ho: int):
    """One thread's work buffers for a chunk of :func:`im2col_plan`'s ``plan``: padded samples, columns, GEMM output."""
    hp, wp, wq, plane, k, nb = plan
    return lambda: (np.empty((nb, c, plane), dtype), np.empty(k * nb * ho * wq, dtype),
                    np.empty(co * nb * ho * wq, dtype))


def im2col_forward(x, weight, bias, geom: ConvGeometry, ho: int, wo: int, act=NO_EPILOGUE) -> np.ndarray:
    """``y = act(conv(x, weight) + bias)`` (N, C_out, ho, wo) by im2col + one GEMM per group and chunk.

    ``x`` (N, C, H, W) contiguous, ``weight`` (C_out, C/groups, kH, kW), ``bias`` (C_out,) or empty; ``act`` an
    epilogue of :mod:`sparkdl.kernels.epilogue`.
    """
    n, c = x.shape[:2]
    co, g = weight.shape[0], geom.groups
    plan = im2col_plan(geom, x.shape, ho, wo, co, x.itemsize)
    hp, wp, wq, plane, k, nb = plan
    wg = weight.reshape(g, co // g, k // g)
    y = np.empty((n, co, ho, wo), x.dtype)
    workspace = _workspace(x.dtype, plan, c, co, ho)

    def body(chunk, ws, _):
        (n0, b, lc), (xp, cols, yw) = chunk, ws
        colc, ywc = _columns(x, n0, b, geom, plan, ho, xp, cols), yw[:co * lc].reshape(co, lc)
        if g == 1:
            matmul(wg[0], colc, out=ywc)
        else:
            matmul(wg, colc.reshape(g, k // g, lc), out=ywc.reshape(g, co // g, lc))
        K.crop_bias(ywc, bias, n0, ho, wo, wq, y, *act)
    run_chunks(chunks(n, nb, ho * wq), body, workspace)
    return y


def im2col_backward(x, weight, grad_y, geom: ConvGeometry, grad_w, input_grad: bool = True):
    """Write ``grad_w`` (the weight gradient, ``weight``'s shape) and return ``grad_x`` (or None without
    ``input_grad``) of :func:`im2col_forward`; ``grad_y`` is contiguous (N, C_out, ho, wo). The weight gradient
    sums chunk by chunk in order (:func:`~sparkdl.nn.conv_chunks.run_chunks`)."""
    n, c = x.shape[:2]
    co, ho, wo = grad_y.shape[1:]
    g = geom.groups
    plan = im2col_plan(geom, x.shape, ho, wo, co, x.itemsize)
    hp, wp, wq, plane, k, nb = plan
    wg = weight.reshape(g, co // g, k // g)
    grad_x = np.empty_like(x) if input_grad else None
    workspace = _workspace(x.dtype, plan, c, co, ho)
    direct = co * (k // g) * x.itemsize > _DIRECT_WEIGHT_GRAD_BYTES  # grad_W, else grad_W^T (see the constant)

    def body(chunk, ws, gw):  # gw: this chunk's grad_W (direct) or grad_W^T
        (n0, b, lc), (xp, cols, gyw) = chunk, ws
        colc, gywc = _columns(x, n0, b, geom, plan, ho, xp, cols), gyw[:co * lc].reshape(co, lc)
        K.widen(grad_y, n0, wq, gywc)
        gy3, col3 = gywc.reshape(g, co // g, lc), colc.reshape(g, k // g, lc)
        if direct:
            matmul(gy3, col3.transpose(0, 2, 1), out=gw)
        else:
            matmul(col3, gy3.transpose(0, 2, 1), out=gw)
        if input_grad:
            matmul(wg.transpose(0, 2, 1), gy3, out=col3)  # grad of the columns, in place of cols
            _add_columns(colc, n0, geom, plan, ho, grad_x)
    shape = (g, co // g, k // g) if direct else (g, k // g, co // g)
    gw = run_chunks(chunks(n, nb, ho * wq), body, workspace, partial=(shape, x.dtype))
    grad_w.reshape(g, co // g, k // g)[...] = gw if direct else gw.transpose(0, 2, 1)
    return grad_x


def im2col_input_grad(grad_y, weight, geom: ConvGeometry, x_shape) -> np.ndarray:
    """Input gradient alone, ``conv^T(grad_y, weight)`` of shape ``x_shape``: the forward pass of a transposed
    convolution. ``grad_y`` contiguous (N, C_out, ho, wo), ``weight`` (C_out, C/groups, kH, kW)."""
    co, ho, wo = grad_y.shape[1:]
    g = geom.groups
    plan = im2col_plan(geom, x_shape, ho, wo, co, grad_y.itemsize)
    hp, wp, wq, plane, k, nb = plan
    wgt = weight.reshape(g, co // g, k // g).transpose(0, 2, 1)
    grad_x = np.empty(x_shape, grad_y.dtype)

    def workspace():
        return np.empty(k * nb * ho * wq, grad_y.dtype), np.empty(co * nb * ho * wq, grad_y.dtype)

    def body(chunk, ws, _):
        (n0, _, lc), (cols, gyw) = chunk, ws
        colc, gywc = cols[:k * lc].reshape(k, lc), gyw[:co * lc].reshape(co, lc)
        K.widen(grad_y, n0, wq, gywc)
        matmul(wgt, gywc.reshape(g, co // g, lc), out=colc.reshape(g, k // g, lc))
        _add_columns(colc, n0, geom, plan, ho, grad_x)
    run_chunks(chunks(x_shape[0], nb, ho * wq), body, workspace)
    return grad_x
