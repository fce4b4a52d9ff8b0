"""Converters of tensor operators that import as generic nodes (:class:`~sparkdl.nn.OnnxOp`): reductions
(``ReduceMean``/``ReduceSum``/``ReduceMax``/``ReduceMin``; a ReduceMean over the spatial axes of an image is
an :class:`~sparkdl.nn.AdaptiveAvgPool2d`), variadic ``Sum``/``Mean``/``Max``/``Min``, ``Split`` (one Slice
per output), ``Pad``, ``LRN``, ``Einsum`` and ``CastLike`` (a Cast to the other input's element type, which the
dynamo exporter writes around constants).

What would mix the samples of a batch is refused where the batch axis is known (a batch-first tensor reduced,
split or padded along axis 0); on constants the nodes fold at import, their size predicted first
(:func:`sparkdl.onnx.generic.result_elements`).
"""
from __future__ import annotations

import numpy as np

from sparkdl import nn
from sparkdl.nn.onnx_op import CASTS
from sparkdl.nn.onnx_op_einsum import check_equation
from sparkdl.nn.onnx_op_spatial import pad_widths
from sparkdl.onnx.converters import converter
from sparkdl.onnx.generic import batch_first, check_reduce, generic, plain

__all__: list[str] = []  # converters register themselves

#: numpy dtype -> ONNX element type, for CastLike.
_ELEMENT_TYPES = {np.dtype(t): code for code, t in CASTS.items()}


def _axes_value(node, a, ctx, index: int):
    """The constant axes of a node (input ``index`` or attribute), None for all axes, or "computed"."""
    if index < len(node.input) and node.input[index]:
        value = ctx.graph.constants.get(node.input[index])
        return "computed" if value is None else [int(v) for v in np.asarray(value).reshape(-1)]
    return a.get("axes")


def _refuse_batch_axis(node, ctx, x, axes, what):
    if batch_first(ctx, x) and (axes is None or not axes or 0 in [ax % len(ctx.graph.shapes[x]) for ax in axes]):
        ctx.fail(node, f"{what} the batch axis 0 of {x!r} (shape {ctx.graph.shapes[x]}) and would mix the samples "
                       "of a batch; supported: non-batch axes")


def _reduce(op_type):
    def convert(node, a, ctx):
        check_reduce(node, a, ctx)
        x, axes = node.input[0], _axes_value(node, a, ctx, 1)
        if axes != "computed":
            _refuse_batch_axis(node, ctx, x, axes, "reduces over")
            if op_type == "ReduceMean" and a["keepdims"] and len(ctx.graph.shapes[x]) == 4 \
                    and sorted(ax % 4 for ax in axes) == [2, 3]:  # the dynamo export of AdaptiveAvgPool2d(1)
                return ctx.layer(node, nn.AdaptiveAvgPool2d, {"output_size": [1, 1]}, inputs=[x])
        return generic(node, ctx, {k: v for k, v in a.items() if v is not None})
    converter(op_type, attrs={"axes": None, "keepdims": 1, "noop_with_empty_axes": 0})(convert)


for _op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"):
    _reduce(_op)
for _op in ("Sum", "Mean", "Max", "Min"):
    converter(_op, attrs={})(lambda node, a, ctx: generic(node, ctx))


def _check_lrn(node, a, ctx):
    shape = ctx.graph.shapes.get(node.input[0])
    if a["size"] is None or a["size"] < 1 or shape is None or len(shape) < 3:
        ctx.fail(node, f"size={a['size']} on an input of shape {shape}; supported: size >= 1 over the channels of "
                       "an (N, C, *) input")


plain("LRN", {"alpha": 1e-4, "beta": 0.75, "bias": 1.0, "size": None}, _check_lrn)


@converter("CastLike", attrs={"saturate": 1})
def _cast_like(node, a, ctx):
    target = node.input[1]
    code = (ctx.graph.types or {}).get(target) if target not in ctx.graph.constants else \
        _ELEMENT_TYPES.get(np.asarray(ctx.graph.constants[target]).dtype)
    if code not in CASTS:
        ctx.fail(node, f"target_type {target!r} has element type {code}; supported: {sorted(CASTS)} (float, int32, "
                       "int64, bool, float64)")
    return generic(node, ctx, {"to": int(code)}, inputs=[node.input[0]], op_type="Cast")


@converter("Split", attrs={"axis": 0, "split": None, "num_outputs": None})
def _split(node, a, ctx):
    """One generic Slice per output (the sizes are known at import)."""
    x = node.input[0]
    shape = ctx.graph.shapes.get(x)
    rank = None if shape is None else len(shape)
    if rank is not None and -rank <= a["axis"] < rank:
        _refuse_batch_axis(node, ctx, x, [a["axis"]], "splits")
    if rank is None or not -rank <= a["axis"] < rank or shape[a["axis"] % rank] is None:
        ctx.fail(node, f"axis={a['axis']} of {x!r} with shape {shape} (None = dynamic); supported: a static axis")
    axis = a["axis"] % rank
    size, count = shape[axis], len(node.output)
    sizes = a["split"] if a["split"] is not None else ctx.const(node, 1, "split")
    if sizes is None:  # equal parts; opset 18 num_outputs: ceil(size / count) each, the last one smaller
        step = -(-size // count)
        sizes = [min(step, size - i * step) for i in range(count)]
    sizes = [int(s) for s in np.asarray(sizes).reshape(-1)]
    if len(sizes) != count or sum(sizes) != size or min(sizes) < 0:
        ctx.fail(node, f"split sizes {sizes} for {count} outputs of an axis of size {size}; supported: sizes "
                       "that add up to the axis")
    layers, start = [], 0
    for i, (out, n) in enumerate(zip(node.output, sizes)):
        names = [f"{out}/{key}" for key in ("starts", "ends", "axes")]
        for name, value in zip(names, ([start], [start + n], [axis])):
            ctx.graph.constants[name] = np.asarray(value, np.int64)
        layers += [generic(node, ctx, {}, inputs=[x, *names], op_type="Slice", output=out)]
        start += n
    return [layer for made in layers for layer in (made if isinstance(made, list) else [made])]


@converter("Pad", attrs={"mode": "constant", "pads": None, "value": 0.0})
def _pad(node, a, ctx):
    """ONNX Pad in any mode numpy has (constant, reflect, edge, wrap); never along a batch axis."""
    if a["mode"] not in ("constant", "reflect", "edge", "wrap"):
        ctx.fail(node, f"mode={a['mode']!r}; supported: 'constant', 'reflect', 'edge', 'wrap'")
    x = node.input[0]
    pads = a["pads"] if ctx.opset < 11 else ctx.graph.constants.get(node.input[1])
    axes = _axes_value(node, a, ctx, 3)
    if pads is not None and axes != "computed" and batch_first(ctx, x):
        shape = ctx.graph.shapes[x]
        widths = pad_widths(shape, pads, axes)
        if widths[0] != (0, 0):
            ctx.fail(node, f"pads {list(np.asarray(pads).reshape(-1))} pad the batch axis 0 of {x!r} (shape "
                           f"{shape}); supported: padding of the other axes")
        if not batch_first(ctx, node.output[0]):  # pads folded here that shape inference could not see
            ctx.graph.shapes[node.output[0]] = (None,) + tuple(n + b + e for n, (b, e) in zip(shape[1:], widths[1:]))
            if ctx.graph.types is not None:
                ctx.graph.types[node.output[0]] = ctx.graph.types.get(x)
    attrs = {"mode": a["mode"]}
    if ctx.opset < 11:
        attrs.update(pads=[int(p) for p in a["pads"]], value=float(a["value"]))
    return generic(node, ctx, attrs)


@converter("Einsum", attrs={"equation": ""})
def _einsum(node, a, ctx):
    """Einsum without diagonals; an explicit output keeps the batch letter of batch-first operands first."""
    equation = str(a["equation"])
    problem = check_equation(equation)
    if problem is not None:
        ctx.fail(node, problem)
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    for term, name in zip(lhs.split(","), node.input):
        lead = "..." if term.startswith("...") else term[:1]
        if arrow and batch_first(ctx, name) and not rhs.startswith(lead):
            ctx.fail(node, f"equation {equation!r} moves or sums the batch axis of {name!r} (its first letter "
                           f"{lead!r}); supported: an output that starts with it")
    return generic(node, ctx, {"equation": equation})
