"""Converters of the image layers beyond convolution and pooling: ``ConvTranspose`` (->
:class:`~sparkdl.nn.ConvTranspose2d`), ``InstanceNormalization`` (-> :class:`~sparkdl.nn.GroupNorm` with one
group per channel; PyTorch's GroupNorm export, Reshape -> InstanceNormalization -> Reshape -> Mul -> Add, is
one GroupNorm) and ``Resize`` (->
:class:`~sparkdl.nn.Upsample`, nearest or bilinear as PyTorch computes them).

Each fails naming the node for what the layer cannot compute: asymmetric or automatic padding, an
``output_shape``, Resize modes other than PyTorch's ``nearest`` (asymmetric, floor) and bilinear
(half-pixel or align-corners), cubic or antialiased resizing, resizing the batch or channel axis.
"""
from __future__ import annotations

import numpy as np

from sparkdl import nn
from sparkdl.onnx.converters import converter
from sparkdl.onnx.generic import batch_first, generic

__all__ = ["average_pool_nd"]  # and the converters, which register themselves


def _pair(ctx, node, value, default, what):
    value = list(default if value is None else value)
    if len(value) != 2:
        ctx.fail(node, f"{what}={value}; supported: 2 values (2-D spatial input)")
    return [int(v) for v in value]


def average_pool_nd(node, a, ctx):
    """AveragePool over 1 or 3+ spatial axes as a generic node (the AveragePool converter's non-2-D case)."""
    x = ctx.activation(node, 0)
    shape = ctx.shape(node, x)
    rank = len(shape) - 2
    if rank < 1 or not batch_first(ctx, x):
        ctx.fail(node, f"input of shape {shape}; supported: (N, C, *spatial) with the batch axis first")
    k = list(a["kernel_shape"] or [])
    problems = {"ceil_mode": a["ceil_mode"] != 0, "dilations": any(d != 1 for d in a["dilations"] or []),
                "auto_pad": a["auto_pad"] not in ("NOTSET", "VALID"), "kernel_shape": len(k) != rank}
    if any(problems.values()):
        ctx.fail(node, f"{', '.join(f'{n}={a[n]}' for n, bad in problems.items() if bad)} for a {rank}-D pooling; "
                       "supported: ceil_mode=0, dilations 1, explicit pads, one kernel size per spatial axis")
    attrs = {"kernel_shape": [int(v) for v in k], "strides": [int(v) for v in a["strides"] or [1] * rank],
             "pads": [int(v) for v in a["pads"] or [0] * 2 * rank] if a["auto_pad"] == "NOTSET" else [0] * 2 * rank,
             "count_include_pad": int(a["count_include_pad"])}
    return generic(node, ctx, attrs)


@converter("ConvTranspose", attrs={"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                                   "output_padding": None, "output_shape": None, "pads": None, "strides": None})
def _conv_transpose(node, a, ctx):
    x = ctx.activation(node, 0, ranks={4})
    shape = ctx.shape(node, x)
    w = ctx.const(node, 1, "W")
    groups = int(a["group"])
    if w.ndim != 4 or groups < 1 or w.shape[0] != shape[1] or shape[1] % groups:
        ctx.fail(node, f"weight {node.input[1]!r} of shape {w.shape} with group={groups} does not fit an input of "
                       f"shape {shape}; supported: (C_in, C_out/group, kH, kW) with C_in == {shape[1]}")
    if a["auto_pad"] != "NOTSET" or a["output_shape"] is not None:
        ctx.fail(node, f"auto_pad={a['auto_pad']!r}, output_shape={a['output_shape']}; supported: explicit pads and "
                       "output_padding (as torch.onnx.export writes ConvTranspose2d)")
    if a["kernel_shape"] is not None and list(a["kernel_shape"]) != list(w.shape[2:]):
        ctx.fail(node, f"kernel_shape={a['kernel_shape']} does not match the weight's shape {w.shape}")
    pads = list(a["pads"] or [0, 0, 0, 0])
    if len(pads) != 4 or pads[:2] != pads[2:]:
        ctx.fail(node, f"pads {pads} (begin/end per axis) are asymmetric; supported: equal padding at both ends")
    out_channels = int(w.shape[1]) * groups
    b = ctx.const(node, 2, "B")
    tensors = {"weight": (np.asarray(w, np.float32), node.input[1])}
    if b is not None:
        if b.shape != (out_channels,):
            ctx.fail(node, f"bias {node.input[2]!r} has shape {b.shape}; expected ({out_channels},)")
        tensors["bias"] = (np.asarray(b, np.float32), node.input[2])
    config = {"in_channels": int(shape[1]), "out_channels": out_channels, "kernel_size": list(w.shape[2:]),
              "stride": _pair(ctx, node, a["strides"], (1, 1), "strides"), "padding": [int(p) for p in pads[:2]],
              "output_padding": _pair(ctx, node, a["output_padding"], (0, 0), "output_padding"), "groups": groups,
              "bias": b is not None, "dilation": _pair(ctx, node, a["dilations"], (1, 1), "dilations")}
    return ctx.layer(node, nn.ConvTranspose2d, config, inputs=[x], **tensors)


def _per_channel(ctx, node, name, c):
    """The constant other input of a Mul/Add ``node`` (the one that is not ``name``), as (C,) if it is one value
    per channel of a (N, C, *) tensor, else None."""
    other = [i for i in node.input if i != name]
    value = ctx.graph.constants.get(other[0]) if len(other) == 1 else None
    if value is None or value.size != c or value.ndim < 1 or value.shape[0] != c:
        return None
    return np.asarray(value, np.float32).reshape(c), other[0]


def _is_shape_of(ctx, name, x, shape) -> bool:
    """Whether value ``name`` is x's whole shape: ``Shape(x)`` or a constant ``[0 or -1, *shape[1:]]``."""
    if name in ctx.graph.constants:
        target = [int(t) for t in np.asarray(ctx.graph.constants[name]).reshape(-1)]
        return bool(target) and target[0] in (0, -1) and tuple(target[1:]) == tuple(shape[1:])
    producer = ctx.producers.get(name)
    attrs = {} if producer is None else {at.name: at.i for at in producer.attribute}
    return producer is not None and producer.op_type == "Shape" and producer.input[0] == x and \
        attrs.get("start", 0) == 0 and attrs.get("end", len(shape)) >= len(shape)


def _group_norm(node, a, ctx):
    """PyTorch's GroupNorm export, ``Reshape(x, [0, G, -1])`` -> InstanceNormalization (unit scale, zero bias)
    -> Reshape back to x's shape -> Mul by the weight -> Add the bias, as one GroupNorm; None for another graph."""
    reshape = ctx.producers.get(node.input[0])
    if reshape is None or reshape.op_type != "Reshape" or not ctx.is_const(reshape.input[1]):
        return None
    x, target = reshape.input[0], [int(t) for t in np.asarray(ctx.graph.constants[reshape.input[1]]).reshape(-1)]
    shape = ctx.graph.shapes.get(x)
    scale, bias = (ctx.graph.constants.get(node.input[i]) for i in (1, 2))
    if len(target) != 3 or target[0] not in (0, -1) or target[2] != -1 or shape is None or len(shape) < 3 or \
            None in shape[1:] or shape[1] % max(target[1], 1) or scale is None or bias is None or \
            np.any(scale != 1) or np.any(bias != 0):
        return None
    back = ctx.sole_consumer(node.output[0])
    if back is None or back.op_type != "Reshape" or not _is_shape_of(ctx, back.input[1], x, shape):
        return None
    c, out, tensors = int(shape[1]), back.output[0], {}
    ctx.absorb(back)
    for op, local in (("Mul", "weight"), ("Add", "bias")):
        follow = ctx.sole_consumer(out)
        found = _per_channel(ctx, follow, out, c) if follow is not None and follow.op_type == op else None
        if found is None:
            break
        tensors[local] = found
        ctx.absorb(follow)
        out = follow.output[0]
    ctx.graph.shapes[out] = shape  # shape inference may not see through the computed Reshape
    if ctx.graph.types is not None:
        ctx.graph.types[out] = ctx.graph.types.get(x) or 1  # TensorProto.FLOAT
    if tensors:  # affine: a missing Mul or Add is a unit weight or zero bias
        tensors.setdefault("weight", (np.ones(c, np.float32), None))
        tensors.setdefault("bias", (np.zeros(c, np.float32), None))
    config = {"num_groups": target[1], "num_channels": c, "eps": float(a["epsilon"]), "affine": bool(tensors)}
    return ctx.layer(node, nn.GroupNorm, config, inputs=[x], output=out, **tensors)


@converter("InstanceNormalization", attrs={"epsilon": 1e-5})
def _instance_norm(node, a, ctx):
    fused = _group_norm(node, a, ctx)
    if fused is not None:
        return fused
    x = ctx.activation(node, 0)
    shape = ctx.shape(node, x)
    if len(shape) < 3:
        ctx.fail(node, f"input {x!r} of shape {shape}; supported: (N, C, *) with at least one axis after C")
    c, tensors = int(shape[1]), {}
    for i, (local, what) in enumerate((("weight", "scale"), ("bias", "B")), start=1):
        t = ctx.const(node, i, what)
        if t is None or t.shape != (c,):
            ctx.fail(node, f"{what} has shape {None if t is None else t.shape}; expected ({c},)")
        tensors[local] = (np.asarray(t, np.float32), node.input[i])
    # a unit scale and zero bias that are not named as weights (``<module>.weight``; a Constant node, or the
    # dynamo exporter's val_N) are PyTorch's InstanceNorm2d(affine=False): no parameters
    named = any(node.input[i] in ctx.graph.initializers and node.input[i].rsplit(".", 1)[-1] in ("weight", "bias")
                for i in (1, 2))
    affine = named or np.any(tensors["weight"][0] != 1) or np.any(tensors["bias"][0] != 0)
    config = {"num_groups": c, "num_channels": c, "eps": float(a["epsilon"]), "affine": bool(affine)}
    return ctx.layer(node, nn.GroupNorm, config, inputs=[x], **(tensors if affine else {}))


_RESIZE_ATTRS = {"antialias": 0, "axes": None, "coordinate_transformation_mode": "half_pixel",
                 "cubic_coeff_a": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0,
                 "keep_aspect_ratio_policy": "stretch", "mode": "nearest", "nearest_mode": "round_prefer_floor"}


def _resize_mode(node, a, ctx) -> dict:
    """ONNX mode attributes -> Upsample's mode and align_corners, or fail."""
    coords = a["coordinate_transformation_mode"]
    if a["antialias"] or a["exclude_outside"] or a["keep_aspect_ratio_policy"] != "stretch":
        ctx.fail(node, f"antialias={a['antialias']}, exclude_outside={a['exclude_outside']}, keep_aspect_ratio_policy="
                       f"{a['keep_aspect_ratio_policy']!r}; supported: 0, 0, 'stretch'")
    if a["mode"] == "nearest" and coords == "asymmetric" and a["nearest_mode"] == "floor":
        return {"mode": "nearest"}
    if a["mode"] == "linear" and coords in ("half_pixel", "pytorch_half_pixel", "align_corners"):
        return {"mode": "bilinear", "align_corners": coords == "align_corners"}
    return ctx.fail(node, f"mode={a['mode']!r}, coordinate_transformation_mode={coords!r}, nearest_mode="
                          f"{a['nearest_mode']!r}; supported: PyTorch's nearest (mode 'nearest', 'asymmetric', "
                          "'floor') and bilinear (mode 'linear', 'half_pixel', 'pytorch_half_pixel' or "
                          "'align_corners')")


def _full(values, axes, rank, fill):
    """Per-axis values of a Resize ``scales``/``sizes`` input given for ``axes`` (default all)."""
    values = [v for v in np.asarray(values).reshape(-1).tolist()]
    if axes is None:
        return values
    full = list(fill)
    for ax, v in zip(axes, values):
        full[int(ax) % rank] = v
    return full


def _constant_tail(ctx, name):
    """(H, W) of a sizes vector ``Concat(..., constant (H, W))`` computed in the graph, else None."""
    node = ctx.producers.get(name)
    while node is not None and node.op_type == "Cast":
        node = ctx.producers.get(node.input[0])
    if node is None or node.op_type != "Concat" or node.input[-1] not in ctx.graph.constants:
        return None
    tail = np.asarray(ctx.graph.constants[node.input[-1]]).reshape(-1)
    return [int(v) for v in tail[-2:]] if tail.size >= 2 and tail.dtype.kind in "iu" else None


@converter("Resize", attrs=_RESIZE_ATTRS)
def _resize(node, a, ctx):
    if ctx.opset < 11:
        ctx.fail(node, f"Resize at opset {ctx.opset} (no coordinate_transformation_mode); supported: opset >= 11")
    x = ctx.activation(node, 0, ranks={4})
    shape = ctx.shape(node, x)
    config = _resize_mode(node, a, ctx)
    scales, sizes = (ctx.graph.constants.get(node.input[i]) if i < len(node.input) and node.input[i] else None
                     for i in (2, 3))
    if scales is not None and scales.size:
        full = _full(scales, a["axes"], 4, [1.0] * 4)
        if full[:2] != [1.0, 1.0]:
            ctx.fail(node, f"scales {full} resize the batch or channel axis; supported: scales (1, 1, sH, sW)")
        config["scale_factor"] = [float(s) for s in full[2:]]
    elif sizes is not None and sizes.size:
        full = _full(sizes, a["axes"], 4, shape)
        if full[1] != shape[1]:
            ctx.fail(node, f"sizes {full} resize the channel axis of an input of shape {shape}")
        config["size"] = [int(s) for s in full[2:]]
    else:  # sizes computed in the graph (Concat(Shape(x)[:2], (H, W))): their constant tail, or the inferred shape
        out = ctx.graph.shapes.get(node.output[0])
        tail = _constant_tail(ctx, node.input[3]) if len(node.input) > 3 and node.input[3] else None
        if tail is not None:
            out = (None, shape[1], *tail)
        if out is None or len(out) != 4 or out[1] != shape[1] or None in out[2:]:
            ctx.fail(node, f"the output size is computed in the graph and inferred as {out}; supported: constant "
                           "scales or sizes, or an output of static spatial size")
        config["size"] = [int(s) for s in out[2:]]
    return ctx.layer(node, nn.Upsample, config, inputs=[x])
