"""Reducing ONNX operators for :class:`sparkdl.nn.OnnxOp` (numpy on whole arrays, forward and backward side
by side): ``ReduceSum``/``ReduceMax``/``ReduceMin`` over axes, and the variadic element-wise ``Sum``, ``Max``,
``Min``, ``Mean`` of any number of broadcasting inputs.

A maximum or minimum passes its gradient to the elements that attain it, split evenly between ties (as
``torch.amax`` and ``torch.maximum`` do). Axes come from the ``axes`` input (ReduceSum from opset 13, the
others from 18) or attribute; no axes reduce over every axis.
"""
from __future__ import annotations

import numpy as np

from sparkdl.nn.onnx_op_elementwise import unbroadcast

__all__ = ["REDUCE_OPS"]


def _reduce_axes(xs, a) -> tuple:
    x = xs[0]
    if len(xs) > 1 and xs[1] is not None:
        axes = [int(v) for v in np.asarray(xs[1]).reshape(-1)]
    else:
        axes = a.get("axes") or []
    return tuple(range(x.ndim)) if not axes else tuple(sorted(ax % x.ndim for ax in axes))


def _reduce(fn, extremum: bool):
    """``ReduceSum`` (``extremum`` False) or ``ReduceMax``/``ReduceMin`` with ``fn`` the numpy reduction."""
    def forward(xs, a):
        x, axes = xs[0], _reduce_axes(xs, a)
        keep = bool(a.get("keepdims", 1))
        y = fn(x, axis=axes, keepdims=True)
        return (y if keep else np.squeeze(y, axes)), (x if extremum else x.shape, y, axes, keep)

    def backward(cache, g, a):
        x, y, axes, keep = cache
        g = g if keep else np.expand_dims(g, axes)
        if not extremum:
            return (np.broadcast_to(g, x).copy(), None)
        hit = x == y
        ties = hit.sum(axis=axes, keepdims=True).astype(g.dtype)
        return (np.where(hit, g / ties, np.zeros((), g.dtype)), None)
    return forward, backward


def _variadic(fn, kind: str):
    """Element-wise ``Sum``/``Mean`` (``kind`` "sum"/"mean") or ``Max``/``Min`` ("extremum") of broadcasting
    inputs; ``fn`` is the pairwise numpy function."""
    def forward(xs, a):
        y = xs[0]
        for x in xs[1:]:
            y = fn(y, x)
        if kind == "mean":
            y = y / y.dtype.type(len(xs))
        y = np.array(np.broadcast_to(y, np.broadcast_shapes(*(x.shape for x in xs))), copy=True)
        return y, ([x if kind == "extremum" else x.shape for x in xs], y)

    def backward(cache, g, a):
        inputs, y = cache
        if kind != "extremum":
            scale = g / g.dtype.type(len(inputs)) if kind == "mean" else g
            return tuple(unbroadcast(scale, s) for s in inputs)
        hits = [np.broadcast_to(x, y.shape) == y for x in inputs]
        ties = np.sum(hits, axis=0).astype(g.dtype)
        share = g / ties
        zero = np.zeros((), g.dtype)
        return tuple(unbroadcast(np.where(h, share, zero), x.shape) for h, x in zip(hits, inputs))
    return forward, backward


#: op_type -> (forward, backward), merged into :data:`sparkdl.nn.onnx_op.ONNX_OPS`.
REDUCE_OPS = {
    "ReduceSum": _reduce(np.sum, False),
    "ReduceMax": _reduce(np.max, True),
    "ReduceMin": _reduce(np.min, True),
    "Sum": _variadic(np.add, "sum"),
    "Mean": _variadic(np.add, "mean"),
    "Max": _variadic(np.maximum, "extremum"),
    "Min": _variadic(np.minimum, "extremum"),
}
