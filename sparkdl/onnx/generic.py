"""Generic nodes: ONNX operators imported as :class:`sparkdl.nn.OnnxOp` (numpy on whole arrays) when no sparkdl
layer expresses them -- the attention arithmetic (MatMul of two activations, scaling, masking, Softmax over
(N, heads, L, L) scores), the Transpose/Reshape/Squeeze glue around recurrent nodes, and the shape arithmetic
(Shape, Gather, Concat, ...) that ``torch.onnx.export`` writes for a dynamic batch axis.

:func:`generic` turns a node into such a layer: computed inputs stay graph inputs, integer constants become
config values, float constants become parameters (a weight initializer read by this node only) or buffers
(scalars, ``Constant`` nodes, shared constants); a node whose inputs are all constants is evaluated at import
(constant folding) and produces a constant. Operators with a layer of their own (MatMul, Add, Reshape,
Concat, Softmax, Gather) fall back to :func:`generic` from their converters when the layer does not apply.

A generic node computes the ONNX semantics exactly, on the whole batch. That each sample's output depends on
that sample only is checked where the batch axis is known (a constant Reshape target that mixes samples of a
batch-first tensor is refused); shapes computed in the graph (``Reshape(x, Concat(Shape(x)[0], ...))``) are
taken as the exporter wrote them.
"""
from __future__ import annotations

import re

import numpy as np

from sparkdl import nn
from sparkdl.nn.onnx_op import CASTS, ONNX_OPS
from sparkdl.nn.onnx_op_einsum import output_shape as einsum_output_shape
from sparkdl.nn.onnx_op_spatial import pad_widths
from sparkdl.onnx.converters import converter, describe
from sparkdl.onnx.reader import tensor_array

__all__ = ["generic", "batch_first", "plain", "check_reduce"]

_FLOAT = 1  # TensorProto.FLOAT


def batch_first(ctx, name: str) -> bool:
    """Whether value ``name`` is a float tensor of known shape whose only unknown axis is axis 0."""
    s = ctx.graph.shapes.get(name)
    t = (ctx.graph.types or {}).get(name, _FLOAT)
    return name not in ctx.graph.constants and t == _FLOAT and s is not None and len(s) >= 1 \
        and all(d is not None for d in s[1:])


def _local(source: str, index: int, taken: set) -> str:
    last = source.rsplit(".", 1)[-1]
    name = last if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", last) and "::" not in source else f"constant{index}"
    while name in taken:
        name += "_"
    taken.add(name)
    return name


#: Operators whose result never has more elements than their largest input.
_NOT_GROWING = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Slice", "Softmax",
                          "ReduceMean", "Cast", "Sqrt", "Neg", "Exp", "Reciprocal", "Shape", "Not", "IsNaN",
                          "Clip", "HardSigmoid", "Erf", "ReduceSum", "ReduceMax", "ReduceMin",
                          "LRN"})
_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Where", "Equal", "Less", "Greater", "Mod", "PRelu",
                           "Sum", "Mean", "Max", "Min"})


def _elements(shape) -> int:
    return int(np.prod([int(d) for d in shape], dtype=object))  # Python ints: no overflow for 10**12 and beyond


def _shape_values(value) -> tuple:
    return tuple(int(s) for s in np.asarray(value).reshape(-1))


def result_elements(op_type: str, args: list, attrs: dict) -> int | None:
    """Elements of a generic operator's result, computed from its inputs' shapes before it runs (None when
    the operator is not one this knows)."""
    shapes = [np.shape(a) for a in args if a is not None]
    if op_type == "ConstantOfShape":
        return _elements(_shape_values(args[0]))
    if op_type == "Expand":
        return _elements(np.broadcast_shapes(shapes[0], _shape_values(args[1])))
    if op_type in _BROADCASTING:
        return _elements(np.broadcast_shapes(*shapes))
    if op_type == "MatMul":
        a, b = (s if len(s) > 1 else (1,) + s for s in shapes[:2])
        return _elements(np.broadcast_shapes(a[:-2], b[:-2])) * a[-2] * b[-1]
    if op_type == "Gather":
        x, idx = shapes[0], shapes[1]
        axis = attrs.get("axis", 0) % max(len(x), 1)
        return _elements(x[:axis] + idx + x[axis + 1:])
    if op_type == "Concat":
        return sum(_elements(s) for s in shapes)
    if op_type == "Einsum":
        return _elements(einsum_output_shape(attrs["equation"], shapes))
    if op_type == "Pad":  # grows by the pads (negative pads crop)
        pads = args[1] if len(args) > 1 and args[1] is not None else attrs["pads"]
        widths = pad_widths(shapes[0], pads, args[3] if len(args) > 3 else None)
        return _elements(max(n + b + e, 0) for n, (b, e) in zip(shapes[0], widths))
    if op_type == "AveragePool":  # at most the padded input (kernels and strides are >= 1)
        rank, pads = len(shapes[0]) - 2, [int(p) for p in attrs.get("pads") or []] or [0] * 2 * (len(shapes[0]) - 2)
        return _elements(shapes[0][:2] + tuple(n + pads[i] + pads[i + rank] for i, n in enumerate(shapes[0][2:])))
    if op_type in _NOT_GROWING:
        return max(_elements(s) for s in shapes)
    return None


def _fold(node, ctx, op_type: str, args: list, attrs: dict):
    """Evaluate ``op_type`` on constant ``args`` at import, its size counted against the import's cap first."""
    what = describe(node)
    expected = result_elements(op_type, args, attrs)
    if expected is not None:
        ctx.graph.reserve(expected, what)
    value = ONNX_OPS[op_type][0](args, attrs)[0]
    if expected is None:
        ctx.graph.reserve(value.size, what)
    return value


def generic(node, ctx, attrs=None, inputs=None, op_type=None, output=None):
    """A :class:`~sparkdl.onnx.converters.Layer` of :class:`sparkdl.nn.OnnxOp` for ``node``.

    ``inputs`` overrides the node's input names (absent optional inputs as ''); ``attrs`` are the attributes
    passed on (plain values); ``op_type`` and ``output`` override the node's operator and (first) output, for
    a node imported as several generic nodes (Split as one Slice per output).
    """
    op_type, output = op_type or node.op_type, output or node.output[0]
    names = list(node.input) if inputs is None else list(inputs)
    spec, runtime, params, buffers, tensors, taken = [], [], {}, {}, {}, set()
    for i, name in enumerate(names):
        if not name:
            spec.append(None)
        elif name not in ctx.graph.constants:
            spec.append("x")
            runtime.append(name)
        else:
            value = np.asarray(ctx.graph.constants[name])
            if value.dtype.kind in "iub":
                spec.append({"value": value.tolist(), "dtype": str(value.dtype)})
                continue
            local = _local(name, i, taken)
            learned = (name in ctx.graph.initializers and value.size > 1
                       and len(ctx.consumers.get(name, [])) == 1)
            (params if learned else buffers)[local] = list(value.shape)
            tensors[local] = (value.astype(np.float32), name if learned else None)
            spec.append({"tensor": local})
    if not runtime:  # constant folding: evaluate now, consumers see a constant
        args = [None if e is None else tensors[e["tensor"]][0] if "tensor" in e else np.asarray(
            e["value"], e["dtype"]) for e in spec]
        value = _fold(node, ctx, op_type, args, dict(attrs or {}))
        ctx.graph.constants[output] = value
        ctx.graph.shapes[output] = value.shape
        return []
    config = {"op_type": op_type, "attrs": dict(attrs or {}), "inputs": spec,
              "parameters": params, "buffers": buffers}
    return ctx.layer(node, nn.OnnxOp, config, inputs=runtime, output=output, **tensors)


def plain(op_type, attrs=None, check=None):
    """Register a converter that imports ``op_type`` as a generic node, its attributes (``attrs``: names and
    defaults) passed on; ``check(node, attrs, ctx)`` may refuse a node first."""
    def convert(node, a, ctx):
        if check is not None:
            check(node, a, ctx)
        return generic(node, ctx, {k: v for k, v in a.items() if v is not None})
    converter(op_type, attrs=dict(attrs or {}))(convert)


def _check_cast(node, a, ctx):
    if a["to"] not in CASTS:
        ctx.fail(node, f"to={a['to']}; supported element types: {sorted(CASTS)} (float, float64, int32, int64, "
                       "bool)")


def check_reduce(node, a, ctx):
    """Refuse ``noop_with_empty_axes=1`` of a Reduce* node (empty axes reduce over every axis)."""
    if a["noop_with_empty_axes"]:
        ctx.fail(node, "noop_with_empty_axes=1; supported: 0 (empty axes reduce over every axis)")


for _op in ("Sub", "Mul", "Div", "Pow", "Where", "Equal", "Less", "Greater", "Not", "IsNaN", "Neg", "Exp",
            "Sqrt", "Reciprocal", "Expand"):
    plain(_op)
plain("Mod", {"fmod": 0})
plain("Transpose", {"perm": None})
plain("Shape", {"start": 0, "end": None})
plain("Squeeze", {"axes": None})
plain("Unsqueeze", {"axes": None})
plain("Cast", {"to": None, "saturate": 1}, _check_cast)


@converter("Slice", attrs={"starts": None, "ends": None, "axes": None})
def _slice(node, a, ctx):
    if a["starts"] is None:  # opset >= 10: starts, ends, axes, steps are inputs
        return generic(node, ctx)
    consts = {}
    for key in ("starts", "ends", "axes"):
        if a[key] is not None:
            consts[key] = f"{node.name}/{key}"
            ctx.graph.constants[consts[key]] = np.asarray(a[key], np.int64)
    return generic(node, ctx, inputs=[node.input[0], consts["starts"], consts["ends"], consts.get("axes", "")])


@converter("ConstantOfShape", attrs={"value": None})
def _constant_of_shape(node, a, ctx):
    value = np.zeros(1, np.float32) if a["value"] is None else tensor_array(a["value"], describe(node)).reshape(-1)
    if value.dtype.kind not in "fiub":
        ctx.fail(node, f"value of type {value.dtype}; supported: a numeric value")
    return generic(node, ctx, {"value": value[0].item(), "dtype": str(value.dtype)})
