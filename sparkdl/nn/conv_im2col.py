"""im2col + BLAS GEMM convolution drivers (any geometry), and the chunking every convolution driver shares.

The numba kernels (padding, im2col, col2im, bias) are in :mod:`sparkdl.kernels.conv`; these drivers call BLAS
(numpy ``matmul``) between them, one chunk of samples at a time. :class:`sparkdl.nn.Conv2d`,
:class:`~sparkdl.nn.Conv1d` and :class:`~sparkdl.nn.ConvTranspose2d` use them.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sparkdl.kernels import conv as K
from sparkdl.kernels.epilogue import NO_EPILOGUE
from sparkdl.nn.gemm import matmul

__all__ = ["ConvGeometry", "im2col_plan", "im2col_forward", "im2col_backward", "im2col_input_grad", "chunk_samples",
           "chunks"]

#: Bytes of work buffers (im2col columns + GEMM output, or Winograd-transformed input + output) per chunk:
#: a chunk stays in a core's L2 cache (2 MB here) between the kernels and the GEMMs (which run on one BLAS
#: thread). 512 KB measured best for LeNet-5 and the small CNN (1 MB was 10-40% slower on the im2col layers).
#: The same for every thread count: the weight gradient sums chunk by chunk, so a chunk size that followed the
#: thread count would make the bits depend on it.
_CHUNK_BYTES = 1 << 19

#: Use the wide (stride-1) column layout while it wastes at most this fraction of GEMM columns.
_MAX_WIDE_WASTE = 0.5

#: A weight matrix (or Winograd-transformed filter bank) larger than this does not stay in cache between chunks:
#: it is read from memory once per chunk, so such a layer's chunks hold at least ``_MIN_CHUNK_COLUMNS`` GEMM
#: columns (output positions of the chunk's samples) to amortise that read and BLAS's packing of it. Layers
#: with smaller weights (LeNet-5, the small CNN) keep the L2-sized chunks above, bit for bit. Measured (im2col
#: forward + backward, float32, 1 thread, the two settings interleaved, medians of 7, on a loaded shared
#: machine; floor vs L2-sized chunks): VGG-11 512 ch at 4x4 batch 32 408 vs 731 ms; ResNet-18 at 32x32 input
#: 256 -> 512 stride 2 at 2x2 41 vs 51 ms, 128 ch at 4x4 96 vs 96 ms, 256 ch at 2x2 70 vs 61 ms (the one loss).
_STREAMED_WEIGHT_BYTES = 1 << 19

#: Minimum GEMM columns per chunk for a layer whose weights exceed ``_STREAMED_WEIGHT_BYTES``.
_MIN_CHUNK_COLUMNS = 256


def chunk_samples(n: int, bytes_per_sample: int, columns_per_sample: int = 1, weight_bytes: int = 0) -> int:
    """Samples per chunk of ``n``: as many as keep one chunk's work buffers (``bytes_per_sample`` each) in the
    cores' L2 caches; with weights over ``_STREAMED_WEIGHT_BYTES``, at least enough for ``_MIN_CHUNK_COLUMNS``
    GEMM columns (``columns_per_sample`` each). Independent of the thread count (the weight gradient sums chunk
    by chunk, so the bits depend on it)."""
    nb = max(1, _CHUNK_BYTES // max(1, bytes_per_sample))
    if weight_bytes > _STREAMED_WEIGHT_BYTES:
        nb = max(nb, -(-_MIN_CHUNK_COLUMNS // max(1, columns_per_sample)))
    return int(max(1, min(n, nb)))


def chunks(n: int, nb: int, columns_per_sample: int):
    """``(n0, b, lc)`` of every chunk of at most ``nb`` of ``n`` samples: first sample, samples, GEMM columns."""
    for n0 in range(0, n, nb):
        b = min(nb, n - n0)
        yield n0, b, b * columns_per_sample

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
    xp = np.empty((nb, c, plane), x.dtype)
    cols = np.empty(k * nb * ho * wq, x.dtype)
    yw = np.empty(co * nb * ho * wq, x.dtype)
    for n0, b, lc in chunks(n, nb, ho * wq):
        colc, ywc = _columns(x, n0, b, geom, plan, ho, xp, cols), yw[:co * lc].reshape(co, lc)
        if g == 1:
            matmul(wg[0], colc, out=ywc)
        else:
            matmul(wg, colc.reshape(g, k // g, lc), out=ywc.reshape(g, co // g, lc))
        K.crop_bias(ywc, bias, n0, ho, wo, wq, y, *act)
    return y


def im2col_backward(x, weight, grad_y, geom: ConvGeometry, grad_w, input_grad: bool = True):
    """Write ``grad_w`` (the weight gradient, ``weight``'s shape) and return ``grad_x`` (or None without
    ``input_grad``) of :func:`im2col_forward`; ``grad_y`` is contiguous (N, C_out, ho, wo)."""
    n, c = x.shape[:2]
    co, ho, wo = grad_y.shape[1:]
    g = geom.groups
    plan = im2col_plan(geom, x.shape, ho, wo, co, x.itemsize)
    hp, wp, wq, plane, k, nb = plan
    wg = weight.reshape(g, co // g, k // g)
    gwt = np.zeros((g, k // g, co // g), x.dtype)  # grad_W^T: cols @ grad_y^T is the faster BLAS shape
    grad_x = np.empty_like(x) if input_grad else None
    xp = np.empty((nb, c, plane), x.dtype)
    cols = np.empty(k * nb * ho * wq, x.dtype)
    gyw = np.empty(co * nb * ho * wq, x.dtype)
    tmp = np.empty_like(gwt)
    for n0, b, lc in chunks(n, nb, ho * wq):
        colc, gywc = _columns(x, n0, b, geom, plan, ho, xp, cols), gyw[:co * lc].reshape(co, lc)
        K.widen(grad_y, n0, wq, gywc)
        gy3, col3 = gywc.reshape(g, co // g, lc), colc.reshape(g, k // g, lc)
        matmul(col3, gy3.transpose(0, 2, 1), out=gwt if n0 == 0 else tmp)
        if n0:
            gwt += tmp
        if input_grad:
            matmul(wg.transpose(0, 2, 1), gy3, out=col3)  # grad of the columns, in place of cols
            _add_columns(colc, n0, geom, plan, ho, grad_x)
    grad_w.reshape(g, co // g, k // g)[...] = gwt.transpose(0, 2, 1)
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
    cols = np.empty(k * nb * ho * wq, grad_y.dtype)
    gyw = np.empty(co * nb * ho * wq, grad_y.dtype)
    for n0, b, lc in chunks(x_shape[0], nb, ho * wq):
        colc, gywc = cols[:k * lc].reshape(k, lc), gyw[:co * lc].reshape(co, lc)
        K.widen(grad_y, n0, wq, gywc)
        matmul(wgt, gywc.reshape(g, co // g, lc), out=colc.reshape(g, k // g, lc))
        _add_columns(colc, n0, geom, plan, ho, grad_x)
    return grad_x
