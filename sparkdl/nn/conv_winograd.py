"""Winograd F(2x2, 3x3) convolution drivers (3x3, stride 1, dilation 1, one group): 16 GEMMs of
``C_out x C_in`` by ``C_in x tiles`` replace the 9-tap GEMM, 2.25x fewer multiplications; the backward pass is the
exact adjoint (``dU = GY V^T``, ``dV = U^T GY``). The transforms are numba kernels in :mod:`sparkdl.kernels.conv`.

Reference: Lavin & Gray (2016), "Fast Algorithms for Convolutional Neural Networks", arXiv:1509.09308.
"""
from __future__ import annotations

import numpy as np

from sparkdl.kernels import conv as K
from sparkdl.kernels.epilogue import NO_EPILOGUE
from sparkdl.nn.conv_chunks import chunk_samples, chunks, run_chunks
from sparkdl.nn.gemm import matmul

__all__ = ["winograd_forward", "winograd_backward"]

#: Winograd F(2x2, 3x3) filter transform G (Lavin & Gray, 2016): U = G g G^T, 4x4 from 3x3.
_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


#: Work-buffer bytes per chunk (transformed input and GEMM output), larger than the im2col drivers' 512 KB: the
#: 16 GEMMs of a thin layer's one-sample chunk are too small for BLAS. Measured (forward + backward, float32,
#: 1 thread, chunk sizes interleaved, medians of 5; time relative to 512 KB): 16 ch at 32x32 batch 64 0.84, 32 ch
#: at 16x16 0.80, 64 ch at 8x8 0.91, 64 ch at 16x16 batch 32 0.99, 128 ch at 8x8 1.03, 64 ch at 32x32 batch 8 0.98,
#: 32 ch at 56x56 1.05 (4 MB: 0.81, 0.79, 0.96, 0.96, 1.12, 1.00, 1.05). Fewer chunks also mean fewer hand-offs
#: when they are dealt to threads.
_CHUNK_BYTES = 2 << 20


def _winograd_geometry(x_shape, ho, wo, itemsize, c_out):
    """Tile rows and columns, tiles per sample and samples per chunk of the Winograd path."""
    th, tw = (ho + 1) // 2, (wo + 1) // 2
    tiles = th * (tw + 1)  # per sample, including one padding tile per tile row
    nb = chunk_samples(x_shape[0], 16 * (x_shape[1] + c_out) * tiles * itemsize, tiles,
                       16 * x_shape[1] * c_out * itemsize, _CHUNK_BYTES)
    return th, tw, tiles, nb


def _workspace(dtype, c, co, columns):
    """One thread's work buffers: the transformed input (16 points x ``c`` rows) and output (16 x ``co``)."""
    return lambda: (np.empty(c * 16 * columns, dtype), np.empty(co * 16 * columns, dtype))


def _winograd_filters(weight, dtype):
    """``(G, U)``: the transform G in ``dtype`` and ``U = G w G^T`` of every 3x3 filter, (4, Co, C, 4)."""
    g = _G.astype(dtype)
    return g, np.tensordot(np.tensordot(g, weight, axes=(1, 2)), g, axes=(3, 1))


def winograd_forward(x, weight, bias, padding, ho, wo, act=NO_EPILOGUE):
    """y = act(conv(x, weight) + bias) (``act`` an epilogue of :mod:`sparkdl.kernels.epilogue`) via
    ``M[xi] = U[xi] @ V[xi]`` over 16 Winograd points, chunk by chunk."""
    n, c = x.shape[:2]
    co = weight.shape[0]
    ph, pw = padding
    th, tw, tiles, nb = _winograd_geometry(x.shape, ho, wo, x.itemsize, co)
    u = np.ascontiguousarray(_winograd_filters(weight, x.dtype)[1].transpose(0, 3, 1, 2)).reshape(16, co, c)
    y = np.empty((n, co, ho, wo), x.dtype)
    workspace = _workspace(x.dtype, c, co, nb * tiles)

    def body(chunk, ws, _):
        (n0, _, L), (vbuf, mbuf) = chunk, ws
        v, m = vbuf[:c * 16 * L].reshape(c, 16, L), mbuf[:co * 16 * L].reshape(co, 16, L)
        K.winograd_input(x, n0, ph, pw, th, tw, v)
        matmul(u, v.transpose(1, 0, 2), out=m.transpose(1, 0, 2))
        K.winograd_output(m, bias, n0, th, tw, y, *act)
    run_chunks(chunks(n, nb, tiles), body, workspace)
    return y


def winograd_backward(x, weight, grad_y, padding, grad_w, input_grad=True):
    """Exact adjoint of :func:`winograd_forward`: ``dU = sum GY V^T`` (chunk by chunk in order,
    :func:`~sparkdl.nn.conv_chunks.run_chunks`) and ``dV = U^T GY``; returns grad_x (None without ``input_grad``)."""
    n, c = x.shape[:2]
    co = weight.shape[0]
    ph, pw = padding
    ho, wo = grad_y.shape[2:]
    th, tw, tiles, nb = _winograd_geometry(x.shape, ho, wo, x.itemsize, co)
    g, u = _winograd_filters(weight, x.dtype)
    ut = np.ascontiguousarray(u.transpose(0, 3, 2, 1)).reshape(16, c, co)  # U[xi]^T
    grad_x = np.empty_like(x) if input_grad else None
    workspace = _workspace(x.dtype, c, co, nb * tiles)

    def body(chunk, ws, gu):
        (n0, _, L), (vbuf, gbuf) = chunk, ws
        v, gyt = vbuf[:c * 16 * L].reshape(c, 16, L), gbuf[:co * 16 * L].reshape(co, 16, L)
        K.winograd_input(x, n0, ph, pw, th, tw, v)
        K.winograd_grad_output(grad_y, n0, th, tw, gyt)
        matmul(gyt.transpose(1, 0, 2), v.transpose(1, 2, 0), out=gu)
        if input_grad:
            matmul(ut, gyt.transpose(1, 0, 2), out=v.transpose(1, 0, 2))  # dV, in place of V
            K.winograd_input_adjoint(v, n0, ph, pw, th, tw, grad_x)
    gu = run_chunks(chunks(n, nb, tiles), body, workspace, partial=((16, co, c), x.dtype))
    gw = np.tensordot(np.tensordot(g, gu.reshape(4, 4, co, c), axes=(0, 0)), g, axes=(1, 0))  # (3, Co, C, 3)
    grad_w[...] = gw.transpose(1, 2, 0, 3)
    return grad_x
