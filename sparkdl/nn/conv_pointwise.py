"""1x1 ("pointwise") convolution drivers: one GEMM per sample or chunk, no im2col.

A 1x1 convolution with no padding and one group is ``y[n] = W @ x[n]`` over each sample's ``(C, H*W)`` plane
matrix; a stride first subsamples the input (``x[:, :, ::sh, ::sw]``, ResNet's downsampling shortcut), and the
input gradient is scattered back onto that grid (zero elsewhere). Samples whose planes hold at least
``_PLANE_GEMM_MIN_POSITIONS`` positions are multiplied in place, one GEMM per sample (no copy of the input);
smaller planes (the 7x7..1x1 maps of a network's last stages) are gathered per chunk into one ``(C, nb*H*W)``
matrix, so BLAS gets a GEMM wide enough to run at speed.
"""
from __future__ import annotations

import numpy as np

from sparkdl.kernels.epilogue import NO_EPILOGUE, NONE, bias_activation
from sparkdl.nn.conv_chunks import chunk_samples, chunks, run_chunks
from sparkdl.nn.gemm import matmul

__all__ = ["pointwise_forward", "pointwise_backward"]

#: Planes of at least this many positions are multiplied one sample at a time, in place. Measured (forward +
#: backward, float32, 1 thread, the two layouts interleaved, medians of 7, loaded shared machine; per-sample vs
#: gathered ms): 14x14 1024 -> 256 batch 4 39.7 vs 42.8, 384 -> 64 2.9 vs 5.1; 56x56 144 -> 24 11.4 vs 13.7;
#: 7x7 960 -> 320 batch 4 20.4 vs 14.5 (gathering wins); two cases disagree with this threshold: 28x28
#: 192 -> 32 batch 16 26.5 vs 23.9, and ResNet-18's 128 -> 256 stride-2 shortcut at 4x4 output, batch 64,
#: 5.5 vs 10.0 (per-sample GEMMs on tiny planes, the weights staying in cache) -- to re-measure idle.
_PLANE_GEMM_MIN_POSITIONS = 196


def _subsample(x, stride):
    """``x[:, :, ::sh, ::sw]``, contiguous (``x`` itself for stride 1)."""
    sh, sw = stride
    return x if (sh, sw) == (1, 1) else np.ascontiguousarray(x[:, :, ::sh, ::sw])


def _plan(n, c, co, positions, itemsize):
    """Samples per chunk of the gathered layout (work buffers: input, output and weight columns)."""
    return chunk_samples(n, (c + co) * positions * itemsize, positions, c * co * itemsize)


def _workspace(dtype, c, co, columns):
    """One thread's work buffers of the gathered layout: input and output columns of a chunk."""
    return lambda: (np.empty(c * columns, dtype), np.empty(co * columns, dtype))


def pointwise_forward(x, weight, bias, stride, act=NO_EPILOGUE):
    """``y = act(conv1x1(x, weight) + bias)`` (N, C_out, ceil(H/sh), ceil(W/sw)).

    ``x`` (N, C, H, W) contiguous, ``weight`` (C_out, C, 1, 1), ``bias`` (C_out,) or empty; ``act`` an epilogue
    ``(kind, low, high)`` of :mod:`sparkdl.kernels.epilogue`, applied with the bias in one pass.
    """
    xs = _subsample(x, stride)
    n, c, ho, wo = xs.shape
    co, length = weight.shape[0], ho * wo
    w2 = weight.reshape(co, c)
    x3 = xs.reshape(n, c, length)
    if length >= _PLANE_GEMM_MIN_POSITIONS:
        y = matmul(w2, x3)
    else:
        y = np.empty((n, co, length), x.dtype)
        nb = _plan(n, c, co, length, x.itemsize)
        workspace = _workspace(x.dtype, c, co, nb * length)

        def body(chunk, ws, _):
            (n0, b, lc), (xt, yt) = chunk, ws
            xc, yc = xt[:c * lc].reshape(c, b, length), yt[:co * lc].reshape(co, lc)
            xc[...] = x3[n0:n0 + b].transpose(1, 0, 2)
            matmul(w2, xc.reshape(c, lc), out=yc)
            y[n0:n0 + b] = yc.reshape(co, b, length).transpose(1, 0, 2)
        run_chunks(chunks(n, nb, length), body, workspace)
    if bias.shape[0] or act[0] != NONE:
        bias_activation(y, bias, *act)
    return y.reshape(n, co, ho, wo)


def pointwise_backward(x, weight, grad_y, stride, grad_w, input_grad=True):
    """Write ``grad_w`` (``weight``'s shape) and return ``grad_x`` (None without ``input_grad``) of
    :func:`pointwise_forward`; ``grad_y`` contiguous (N, C_out, Ho, Wo). The weight gradient sums sample by
    sample (or chunk by chunk) in order (:func:`~sparkdl.nn.conv_chunks.run_chunks`)."""
    xs = _subsample(x, stride)
    n, c, ho, wo = xs.shape
    co, length = weight.shape[0], ho * wo
    w2t = weight.reshape(co, c).T
    x3, gy3 = xs.reshape(n, c, length), grad_y.reshape(n, co, length)
    if length >= _PLANE_GEMM_MIN_POSITIONS:
        def sample(i, _, gw):
            matmul(gy3[i], x3[i].T, out=gw)
        gw = run_chunks(range(n), sample, tuple, partial=((co, c), x.dtype))
        gxs = matmul(w2t, gy3) if input_grad else None
    else:
        gxs = np.empty((n, c, length), x.dtype) if input_grad else None
        nb = _plan(n, c, co, length, x.itemsize)
        workspace = _workspace(x.dtype, c, co, nb * length)

        def body(chunk, ws, gw):
            (n0, b, lc), (xt, gt) = chunk, ws
            xc, gc = xt[:c * lc].reshape(c, b, length), gt[:co * lc].reshape(co, b, length)
            xc[...] = x3[n0:n0 + b].transpose(1, 0, 2)
            gc[...] = gy3[n0:n0 + b].transpose(1, 0, 2)
            matmul(gc.reshape(co, lc), xc.reshape(c, lc).T, out=gw)
            if input_grad:
                matmul(w2t, gc.reshape(co, lc), out=xc.reshape(c, lc))  # grad of the gathered input, in place
                gxs[n0:n0 + b] = xc.transpose(1, 0, 2)
        gw = run_chunks(chunks(n, nb, length), body, workspace, partial=((co, c), x.dtype))
    grad_w[...] = gw.reshape(grad_w.shape)
    if not input_grad:
        return None
    if tuple(stride) == (1, 1):
        return gxs.reshape(x.shape)
    grad_x = np.zeros_like(x)
    grad_x[:, :, ::stride[0], ::stride[1]] = gxs.reshape(n, c, ho, wo)
    return grad_x
