"""Spatial ONNX operators for :class:`sparkdl.nn.OnnxOp` (numpy on whole arrays, forward and backward side by
side): ``Pad`` in its four modes (constant, reflect, edge, wrap; negative pads crop), ``LRN`` (local
response normalisation across channels, AlexNet/GoogLeNet's) and ``AveragePool`` over 1 or 3+ spatial axes
(the 2-D one is :class:`~sparkdl.nn.AvgPool2d`; the dynamo exporter writes LocalResponseNorm with a 3-D one).

The backward of a pad is the adjoint of its gather: every output element adds its gradient to the input
element it copies (reflect/edge/wrap copy an element several times), found by padding an array of element
indices the same way.
"""
from __future__ import annotations

import numpy as np

__all__ = ["SPATIAL_OPS", "pad_widths"]

_NUMPY_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def pad_widths(shape, pads, axes=None) -> list:
    """ONNX ``pads`` ``[b_1, ..., b_k, e_1, ..., e_k]`` (over ``axes``, default all) -> ``(begin, end)`` per
    axis of ``shape``."""
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    axes = list(range(len(shape))) if axes is None else [int(ax) % len(shape) for ax in np.asarray(axes).reshape(-1)]
    widths = [(0, 0)] * len(shape)
    for i, ax in enumerate(axes):
        widths[ax] = (pads[i], pads[i + len(axes)])
    return widths


def _pad_array(x, widths, mode, value):
    """Pad by the positive widths, then crop the negative ones."""
    grow = [(max(b, 0), max(e, 0)) for b, e in widths]
    kwargs = {"constant_values": value} if mode == "constant" else {}
    y = np.pad(x, grow, mode=_NUMPY_MODES[mode], **kwargs) if any(b or e for b, e in grow) else x
    crop = tuple(slice(-min(b, 0), y.shape[i] + min(e, 0)) for i, (b, e) in enumerate(widths))
    return y[crop]


def _pad():
    def forward(xs, a):
        x = xs[0]
        pads = xs[1] if len(xs) > 1 and xs[1] is not None else a["pads"]
        widths = pad_widths(x.shape, pads, xs[3] if len(xs) > 3 else None)
        mode = a.get("mode", "constant")
        value = xs[2] if len(xs) > 2 and xs[2] is not None else a.get("value", 0)
        y = np.array(_pad_array(x, widths, mode, np.asarray(value, x.dtype).reshape(())), copy=True)
        return y, (x.shape, widths, mode)

    def backward(cache, g, a):
        shape, widths, mode = cache
        size = int(np.prod(shape))
        index = _pad_array(np.arange(size).reshape(shape), widths, mode, -1).reshape(-1)
        kept = index >= 0
        gx = np.bincount(index[kept], weights=g.reshape(-1)[kept], minlength=size)
        return (gx.astype(g.dtype).reshape(shape),)
    return forward, backward


def _channel_window_sum(a, before: int, after: int):
    """``out[:, c] = sum(a[:, c - before : c + after + 1])`` along axis 1 (zero outside), by cumulative sums."""
    widths = [(0, 0)] * a.ndim
    widths[1] = (before + 1, after)
    c = np.cumsum(np.pad(a, widths), axis=1)
    n = a.shape[1]
    return c[:, before + after + 1:before + after + 1 + n] - c[:, :n]


def _lrn():
    """Local response normalisation across channels: ``y = x / (bias + alpha / size * S) ** beta`` with ``S`` the
    sum of squares over the ``size`` channels around each (``(size - 1) // 2`` before, the rest after)."""
    def forward(xs, a):
        x, size = xs[0], int(a["size"])
        before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
        d = a.get("bias", 1.0) + a.get("alpha", 1e-4) / size * _channel_window_sum(x * x, before, after)
        return (x * d ** -a.get("beta", 0.75)).astype(x.dtype), (x, d, before, after)

    def backward(cache, g, a):
        x, d, before, after = cache
        beta, scale = a.get("beta", 0.75), a.get("alpha", 1e-4) / int(a["size"])
        t = g * x * d ** (-beta - 1)  # channel c's sum of squares feeds the channels j whose window holds c
        return ((g * d ** -beta - 2 * beta * scale * x * _channel_window_sum(t, after, before)).astype(g.dtype),)
    return forward, backward


def _pool_geometry(x, a):
    """(kernel, strides, begin pads, end pads) of an AveragePool over the axes after (N, C)."""
    k = [int(v) for v in a["kernel_shape"]]
    strides = [int(v) for v in a.get("strides") or [1] * len(k)]
    pads = [int(v) for v in a.get("pads") or [0] * (2 * len(k))]
    return k, strides, pads[:len(k)], pads[len(k):]


def _window_sum(xp, k, strides):
    """Sums over the ``k`` windows at ``strides`` of the spatial axes (2, 3, ...) of a padded array."""
    axes = tuple(range(2, xp.ndim))
    windows = np.lib.stride_tricks.sliding_window_view(xp, k, axis=axes)
    windows = windows[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)]
    return windows.sum(axis=tuple(range(xp.ndim, windows.ndim)))


def _average_pool():
    """AveragePool over any number of spatial axes (``ceil_mode=0``, no dilation; the 2-D case is a layer)."""
    def forward(xs, a):
        x = xs[0]
        k, strides, begin, end = _pool_geometry(x, a)
        widths = [(0, 0), (0, 0)] + list(zip(begin, end))
        total = _window_sum(np.pad(x, widths), k, strides)
        if a.get("count_include_pad", 0) or not any(begin + end):
            counts = np.asarray(np.prod(k), x.dtype)
        else:
            ones = np.pad(np.ones((1, 1) + x.shape[2:], x.dtype), widths)
            counts = _window_sum(ones, k, strides)
        return (total / counts).astype(x.dtype), (x.shape, counts, widths)

    def backward(cache, g, a):
        shape, counts, widths = cache
        k, strides, begin, end = _pool_geometry(np.empty(shape), a)
        share = g / counts
        gp = np.zeros([n + b + e for n, (b, e) in zip(shape, widths)], g.dtype)
        for offset in np.ndindex(*k):  # every kernel position adds its share to the elements it covered
            index = tuple(slice(o, o + s * (n - 1) + 1, s) for o, s, n in zip(offset, strides, g.shape[2:]))
            gp[(slice(None), slice(None)) + index] += share
        crop = tuple(slice(b, b + n) for n, (b, _) in zip(shape, widths))
        return (np.ascontiguousarray(gp[crop]),)
    return forward, backward


#: op_type -> (forward, backward), merged into :data:`sparkdl.nn.onnx_op.ONNX_OPS`.
SPATIAL_OPS = {
    "AveragePool": _average_pool(),
    "Pad": _pad(),
    "LRN": _lrn(),
}
