"""Element-wise ONNX operators for :class:`sparkdl.nn.OnnxOp` (numpy on whole arrays, forward and backward
side by side): ``Clip``, ``HardSigmoid``, ``PRelu``, ``Erf`` in the general forms no layer expresses (integer
shape arithmetic, computed bounds, other slopes), and :func:`unbroadcast`, the gradient of a NumPy broadcast.

Each entry of :data:`ELEMENTWISE_OPS` is ``(forward(inputs, attrs) -> (y, cache), backward(cache, grad_y,
attrs) -> one gradient per input)``; constant inputs (bounds, slopes) get a gradient where they are float.
"""
from __future__ import annotations

import math

import numpy as np

from sparkdl.kernels.activation import erf_kernel

__all__ = ["ELEMENTWISE_OPS", "unbroadcast"]


def unbroadcast(g, shape):
    """Sum ``g`` down to ``shape`` (the gradient of a NumPy broadcast)."""
    if g.shape == tuple(shape):
        return g
    g = g.sum(axis=tuple(range(g.ndim - len(shape)))) if g.ndim > len(shape) else g
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


def _bound(xs, a, index, name):
    """A Clip bound: input ``index`` (opset >= 11) or attribute ``name`` (opset < 11); None when absent."""
    if len(xs) > index and xs[index] is not None:
        return np.asarray(xs[index])
    return a.get(name)


def _clip():
    def forward(xs, a):
        x, lo, hi = xs[0], _bound(xs, a, 1, "min"), _bound(xs, a, 2, "max")
        y = x
        if lo is not None:
            y = np.maximum(y, np.asarray(lo, x.dtype))
        if hi is not None:
            y = np.minimum(y, np.asarray(hi, x.dtype))
        return np.array(y, copy=True), (x, lo, hi)

    def backward(cache, g, a):
        x, lo, hi = cache
        inside = np.ones(x.shape, bool)
        if lo is not None:
            inside &= x > lo
        if hi is not None:
            inside &= x < hi
        return (np.where(inside, g, np.zeros((), g.dtype)),)
    return forward, backward


def _hard_sigmoid():
    def forward(xs, a):
        x = xs[0]
        z = x * x.dtype.type(a.get("alpha", 0.2)) + x.dtype.type(a.get("beta", 0.5))
        return np.clip(z, 0, 1).astype(x.dtype), z

    def backward(z, g, a):
        return (np.where((z > 0) & (z < 1), g * g.dtype.type(a.get("alpha", 0.2)), np.zeros((), g.dtype)),)
    return forward, backward


def _prelu():
    def forward(xs, a):
        x, slope = xs
        return np.where(x > 0, x, slope * x).astype(x.dtype), (x, slope)

    def backward(cache, g, a):
        x, slope = cache
        negative = x <= 0
        zero = np.zeros((), g.dtype)
        return np.where(negative, g * slope, g), unbroadcast(np.where(negative, g * x, zero), np.shape(slope))
    return forward, backward


def _erf():
    scale = 2.0 / math.sqrt(math.pi)

    def forward(xs, a):
        x = np.ascontiguousarray(xs[0])
        return erf_kernel(x.dtype)(x.reshape(-1)).reshape(x.shape), xs[0]
    return forward, (lambda x, g, a: (g * (scale * np.exp(-x * x)).astype(g.dtype),))


#: op_type -> (forward, backward), merged into :data:`sparkdl.nn.onnx_op.ONNX_OPS`.
ELEMENTWISE_OPS = {
    "Clip": _clip(),
    "HardSigmoid": _hard_sigmoid(),
    "PRelu": _prelu(),
    "Erf": _erf(),
}
