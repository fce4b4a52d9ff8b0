"""Converters of the mobile-network activations: ``Sigmoid`` (and SiLU, ``Mul(x, Sigmoid(x))``), ``Clip``
(ReLU6, Hardtanh, clamps), ``HardSigmoid``, ``HardSwish``, ``PRelu``, ``Softplus`` and ``Erf``.

A node on a computed float tensor with the parameters of a PyTorch layer becomes that layer
(:class:`~sparkdl.nn.ReLU6`, :class:`~sparkdl.nn.Hardtanh`, :class:`~sparkdl.nn.Hardsigmoid`,
:class:`~sparkdl.nn.Hardswish`, :class:`~sparkdl.nn.PReLU`, :class:`~sparkdl.nn.Softplus`); any other form
(integer shape arithmetic, computed bounds, other slopes or HardSigmoid coefficients) is a generic node
(:class:`~sparkdl.nn.OnnxOp`) with the same ONNX semantics, and a node on constants is folded at import.
"""
from __future__ import annotations

import numpy as np

from sparkdl import nn
from sparkdl.onnx.converters import converter
from sparkdl.onnx.generic import batch_first, generic

__all__: list[str] = []  # converters register themselves

_FLOAT = 1  # TensorProto.FLOAT


def _float32(value) -> float:
    """A float32 constant as the shortest Python float that rounds to it (6.0, 0.1; not 0.10000000149)."""
    return float(str(np.float32(value)))


def _computed_float(ctx, name: str) -> bool:
    return name not in ctx.graph.constants and (ctx.graph.types or {}).get(name, _FLOAT) == _FLOAT


@converter("Sigmoid", attrs={})
def _sigmoid(node, a, ctx):
    """Sigmoid; ``Mul(x, Sigmoid(x))`` (how both exporters write SiLU) is one SiLU layer."""
    x, mul = ctx.activation(node, 0), ctx.sole_consumer(node.output[0])
    if mul is not None and mul.op_type == "Mul" and sorted(mul.input) == sorted([x, node.output[0]]):
        ctx.absorb(mul)
        return ctx.layer(node, nn.SiLU, {}, output=mul.output[0])
    return ctx.layer(node, nn.Sigmoid, {})


@converter("Clip", attrs={"min": None, "max": None})
def _clip(node, a, ctx):
    """Clip of a computed float tensor by constant bounds -> ReLU6 (0, 6) or Hardtanh; else generic."""
    x = node.input[0]
    if ctx.opset < 11:  # bounds are attributes; as inputs they would be read the same way below
        bounds = [a["min"], a["max"]]
        attrs = {k: float(v) for k, v in a.items() if v is not None}
    else:
        bounds = [ctx.graph.constants.get(node.input[i]) if i < len(node.input) and node.input[i] else None
                  for i in (1, 2)]
        attrs = {}
        computed = [i for i in (1, 2) if i < len(node.input) and node.input[i] and bounds[i - 1] is None]
        if computed:  # a bound computed in the graph: numpy on whole arrays
            return generic(node, ctx)
    if not _computed_float(ctx, x):
        return generic(node, ctx, attrs)
    lo, hi = (None if b is None else _float32(np.asarray(b).reshape(())) for b in bounds)
    if (lo, hi) == (0.0, 6.0):
        return ctx.layer(node, nn.ReLU6, {})
    if lo is not None and hi is not None and not hi > lo:  # degenerate (every output max): ONNX's semantics
        return generic(node, ctx, attrs)
    return ctx.layer(node, nn.Hardtanh, {"min_val": lo, "max_val": hi})


@converter("HardSigmoid", attrs={"alpha": 0.2, "beta": 0.5})
def _hard_sigmoid(node, a, ctx):
    """PyTorch's coefficients (alpha 1/6, beta 1/2) -> Hardsigmoid; other coefficients -> generic."""
    if _computed_float(ctx, node.input[0]) and np.float32(a["alpha"]) == np.float32(1 / 6) and a["beta"] == 0.5:
        return ctx.layer(node, nn.Hardsigmoid, {})
    return generic(node, ctx, {"alpha": float(a["alpha"]), "beta": float(a["beta"])})


@converter("HardSwish", attrs={})
def _hard_swish(node, a, ctx):
    return ctx.layer(node, nn.Hardswish, {})


@converter("Softplus", attrs={})
def _softplus(node, a, ctx):
    """ONNX's exact ``log(1 + exp(x))`` as PyTorch's Softplus (beta 1; above x = 20 it returns x, which differs
    by less than 2.1e-9, under float32 rounding)."""
    return ctx.layer(node, nn.Softplus, {"beta": 1.0, "threshold": 20.0})


@converter("PRelu", attrs={})
def _prelu(node, a, ctx):
    """A constant slope shared by every element, or one per channel (axis 1) -> PReLU; else generic."""
    x, slope = node.input[0], ctx.graph.constants.get(node.input[1])
    if slope is None or not batch_first(ctx, x) or slope.dtype.kind != "f":
        return generic(node, ctx)
    shape = ctx.graph.shapes[x]
    if slope.size == 1:
        count = 1
    else:
        aligned = (1,) * (len(shape) - slope.ndim) + slope.shape
        count = shape[1] if len(shape) >= 2 else None
        if slope.ndim > len(shape) or aligned[0] != 1 or aligned[1] != count or any(d != 1 for d in aligned[2:]):
            return generic(node, ctx)
    return ctx.layer(node, nn.PReLU, {"num_parameters": int(count)}, inputs=[x],
                     weight=(np.asarray(slope, np.float32).reshape(-1), node.input[1]))


converter("Erf", attrs={})(lambda node, a, ctx: generic(node, ctx))
