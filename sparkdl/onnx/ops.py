"""One converter per ONNX operator (opsets 9..22), registered in :data:`sparkdl.onnx.converters.CONVERTERS`.

Each function checks what sparkdl's layer cannot express (an attribute value, a dynamic or batch-mixing shape,
asymmetric pooling padding) and fails naming the node, the operator and what is supported; a Conv with
asymmetric padding becomes a generic zero Pad and an unpadded Conv2d.
"""
from __future__ import annotations

import numpy as np

from sparkdl import nn
from sparkdl.onnx.converters import converter
from sparkdl.onnx.generic import batch_first, generic
from sparkdl.onnx.ops_spatial import average_pool_nd

__all__: list[str] = []  # converters register themselves; nothing to import from here

_F32 = np.float32


def _f32(a):
    return np.asarray(a, _F32)


# ------------------------------------------------------------------------------------------------- activations
def _simple(op_type, cls):
    converter(op_type, attrs={})(lambda node, a, ctx: ctx.layer(node, cls, {}))


_simple("Relu", nn.ReLU)
_simple("Tanh", nn.Tanh)
_simple("Identity", nn.Identity)


@converter("LeakyRelu", attrs={"alpha": 0.01})
def _leaky_relu(node, a, ctx):
    return ctx.layer(node, nn.LeakyReLU, {"negative_slope": float(a["alpha"])})


@converter("Elu", attrs={"alpha": 1.0})
def _elu(node, a, ctx):
    return ctx.layer(node, nn.ELU, {"alpha": float(a["alpha"])})


@converter("Gelu", attrs={"approximate": "none"})
def _gelu(node, a, ctx):
    if a["approximate"] not in ("none", "tanh"):
        ctx.fail(node, f"approximate={a['approximate']!r}; supported: 'none', 'tanh'")
    return ctx.layer(node, nn.GELU, {"approximate": a["approximate"]})


def _softmax(cls):
    def convert(node, a, ctx):
        x = ctx.activation(node, 0)
        shape, axis = ctx.graph.shapes.get(x), a["axis"]
        rank = len(shape) if shape is not None else None
        if ctx.opset < 13 and axis not in (-1, None if rank is None else rank - 1):
            ctx.fail(node, f"axis={axis} at opset {ctx.opset} normalises over the flattened axes {axis}.. (the "
                           "pre-13 semantics); supported: the last axis, or opset >= 13")
        if not batch_first(ctx, x):  # batch axis elsewhere (attention scores): numpy on the whole array
            if cls is nn.LogSoftmax:
                ctx.fail(node, f"input {x!r} of shape {shape}; supported: a static shape with the batch axis first")
            return generic(node, ctx, {"axis": int(axis)})
        if not -rank <= axis < rank or axis % rank == 0:
            ctx.fail(node, f"axis={axis} for a {rank}-D input; supported: a non-batch axis (1..{rank - 1})")
        return ctx.layer(node, cls, {"dim": int(axis)})
    return convert


converter("Softmax", attrs={"axis": lambda opset: 1 if opset < 13 else -1})(_softmax(nn.Softmax))
converter("LogSoftmax", attrs={"axis": lambda opset: 1 if opset < 13 else -1})(_softmax(nn.LogSoftmax))


@converter("Dropout", attrs={"ratio": 0.5, "seed": None})
def _dropout(node, a, ctx):
    ratio = ctx.const(node, 1, "ratio") if ctx.opset >= 12 else None
    p = float(a["ratio"] if ratio is None else np.asarray(ratio).reshape(()))
    return ctx.layer(node, nn.Dropout, {"p": p})


# ------------------------------------------------------------------------------------------------- affine layers
def _bias_vector(ctx, node, c, out: int, what: str):
    c = np.asarray(c, _F32)
    if c.ndim > 2 or (c.ndim == 2 and c.shape[0] != 1) or (c.ndim and c.shape[-1] not in (1, out)):
        ctx.fail(node, f"{what} has shape {c.shape}; supported: a bias broadcastable to ({out},)")
    return np.broadcast_to(c.reshape(-1) if c.ndim else c, (out,)).copy()


@converter("Gemm", attrs={"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0})
def _gemm(node, a, ctx):
    x = ctx.activation(node, 0)
    shape = ctx.graph.shapes.get(x)  # may be unknown after a computed Reshape: Linear checks it at run time
    if shape is not None and len(shape) != 2:
        ctx.fail(node, f"input {x!r} has shape {shape}; supported ranks: [2] (batch axis first)")
    if a["transA"]:
        ctx.fail(node, "transA=1 (the activation transposed); supported: transA=0")
    b = ctx.const(node, 1, "B")
    if b.ndim != 2:
        ctx.fail(node, f"B has shape {b.shape}; supported: a 2-D weight")
    w = _f32(b if a["transB"] else b.T) * _F32(a["alpha"])
    if shape is not None and shape[1] is not None and w.shape[1] != shape[1]:
        ctx.fail(node, f"weight {node.input[1]!r} of shape {b.shape} (transB={a['transB']}) does not fit an input "
                       f"of shape {shape}")
    c = ctx.const(node, 2, "C")
    tensors = {"weight": (w, node.input[1])}
    if c is not None:
        tensors["bias"] = (_bias_vector(ctx, node, c, w.shape[0], "C") * _F32(a["beta"]), node.input[2])
    return ctx.layer(node, nn.Linear, {"in_features": int(w.shape[1]), "out_features": int(w.shape[0]),
                                       "bias": c is not None}, **tensors)


@converter("MatMul", attrs={})
def _matmul(node, a, ctx):
    """x @ W with a constant W (in, out) -> Linear on the last axis of x (rank >= 2, the batch axis anywhere, as
    attention's (L, N, E) projections); a following Add of a constant becomes its bias. Anything else (a product
    of two activations, a batched weight) is a generic node."""
    x = node.input[0]
    shape = ctx.graph.shapes.get(x)
    if ctx.is_const(x) or not ctx.is_const(node.input[1]) or shape is None or len(shape) < 2 or shape[-1] is None \
            or np.ndim(ctx.graph.constants[node.input[1]]) != 2:
        return generic(node, ctx)
    w = ctx.const(node, 1, "B (the weight)")
    in_features = shape[-1]
    if w.shape[0] != in_features:
        ctx.fail(node, f"weight {node.input[1]!r} has shape {w.shape}; supported: ({in_features}, out) for an "
                       f"input of shape {shape}")
    tensors, output = {"weight": (_f32(w.T), node.input[1])}, node.output[0]
    add = ctx.sole_consumer(output)
    if add is not None and add.op_type == "Add":
        other = [i for i in add.input if i != output]
        if len(other) == 1 and ctx.is_const(other[0]):
            tensors["bias"] = (_bias_vector(ctx, add, ctx.graph.constants[other[0]], w.shape[1], "the bias"),
                               other[0])
            ctx.absorb(add)
            output = add.output[0]
    return ctx.layer(node, nn.Linear, {"in_features": int(w.shape[0]), "out_features": int(w.shape[1]),
                                       "bias": "bias" in tensors}, output=output, **tensors)


@converter("Add", attrs={})
def _add(node, a, ctx):
    """The sum of two computed tensors of one batch-first shape is an Add layer; anything else (a constant,
    broadcasting, the batch axis elsewhere) a generic node."""
    x, y = node.input
    if not (batch_first(ctx, x) and batch_first(ctx, y)) or ctx.graph.shapes[x] != ctx.graph.shapes[y]:
        return generic(node, ctx)
    if not batch_first(ctx, node.output[0]):  # unknown after a computed Reshape that a converter fused away
        ctx.graph.shapes[node.output[0]] = ctx.graph.shapes[x]
        if ctx.graph.types is not None:
            ctx.graph.types[node.output[0]] = ctx.graph.types.get(x)
    return ctx.layer(node, nn.Add, {}, inputs=[x, y])


@converter("Concat", attrs={"axis": None})
def _concat(node, a, ctx):
    if not all(batch_first(ctx, i) for i in node.input):  # shape vectors, (D, N, H) states: generic
        return generic(node, ctx, {"axis": int(a["axis"])})
    xs = [ctx.activation(node, i) for i in range(len(node.input))]
    rank, axis = len(ctx.shape(node, xs[0])), a["axis"]
    if not -rank <= axis < rank or axis % rank == 0:
        ctx.fail(node, f"axis={axis} for {rank}-D inputs; supported: a non-batch axis (1..{rank - 1})")
    if len(xs) == 1:
        return ctx.layer(node, nn.Identity, {}, inputs=xs)
    return ctx.layer(node, nn.Concatenate, {"dim": int(axis)}, inputs=xs)


# ------------------------------------------------------------------------------------------------- conv / pool
def _pad_list(ctx, node, a, x_shape, kernel, strides, dilations) -> list:
    """ONNX pads/auto_pad -> [top, left, bottom, right], or fail."""
    auto = a.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        pads = list(a.get("pads") or [0, 0, 0, 0]) if auto == "NOTSET" else [0, 0, 0, 0]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0, 0, 0, 0]
        for i in range(2):
            size = x_shape[2 + i]
            total = max((-(-size // strides[i]) - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size, 0)
            small, large = total // 2, total - total // 2  # SAME_UPPER puts the odd one at the end
            pads[i], pads[i + 2] = (small, large) if auto == "SAME_UPPER" else (large, small)
    else:
        ctx.fail(node, f"auto_pad={auto!r}; supported: NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    if len(pads) != 4:
        ctx.fail(node, f"pads {pads}; supported: 4 values (2-D spatial input)")
    return [int(p) for p in pads]


def _pads(ctx, node, a, x_shape, kernel, strides, dilations):
    """ONNX pads/auto_pad -> symmetric (pad_h, pad_w), or fail."""
    pads = _pad_list(ctx, node, a, x_shape, kernel, strides, dilations)
    if pads[0] != pads[2] or pads[1] != pads[3]:
        ctx.fail(node, f"pads {pads} (begin/end per axis) are asymmetric; supported: equal padding at both ends")
    return pads[0], pads[1]


def _explicit_pad(ctx, node, x, pads):
    """A generic zero Pad of ``x`` by [top, left, bottom, right], before a node whose padding is asymmetric;
    returns (its Layer, its output value)."""
    name, out = f"{node.output[0]}/pads", f"{node.output[0]}/padded"
    ctx.graph.constants[name] = np.array([0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]], np.int64)
    return generic(node, ctx, {"mode": "constant"}, inputs=[x, name], op_type="Pad", output=out), out


def _pair(ctx, node, a, name, default=(1, 1)):
    v = a.get(name) or list(default)
    if len(v) != 2:
        ctx.fail(node, f"{name}={v}; supported: 2 values (2-D spatial input)")
    return [int(i) for i in v]


_CONV_ATTRS = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None, "pads": None,
               "strides": None}


@converter("Conv", attrs=_CONV_ATTRS)
def _conv(node, a, ctx):
    x = ctx.activation(node, 0)
    shape = ctx.shape(node, x)
    if len(shape) != 4:
        ctx.fail(node, f"input of shape {shape}; supported: 2-D convolution over (N, C, H, W)")
    w = ctx.const(node, 1, "W")
    if w.ndim != 4:
        ctx.fail(node, f"weight {node.input[1]!r} has shape {w.shape}; supported: (C_out, C_in/groups, kH, kW)")
    groups = int(a["group"])
    if a["kernel_shape"] is not None and list(a["kernel_shape"]) != list(w.shape[2:]):
        ctx.fail(node, f"kernel_shape={a['kernel_shape']} does not match the weight's shape {w.shape}")
    if groups < 1 or w.shape[1] * groups != shape[1] or w.shape[0] % groups:
        ctx.fail(node, f"weight {node.input[1]!r} of shape {w.shape} with group={groups} does not fit an input "
                       f"of shape {shape} (expected W.shape[1] * group == {shape[1]} channels)")
    strides, dilations = _pair(ctx, node, a, "strides"), _pair(ctx, node, a, "dilations")
    pads = _pad_list(ctx, node, a, shape, w.shape[2:], strides, dilations)
    padding, pad_layer, x_in = pads[:2], None, x
    if pads[:2] != pads[2:]:  # padding="same" with an even kernel, or a ZeroPad2d fused by the exporter
        (pad_layer, x_in), padding = _explicit_pad(ctx, node, x, pads), [0, 0]
    b = ctx.const(node, 2, "B")
    if b is not None and node.input[2] in ctx.producers and not np.any(b):
        b = None  # a zero bias computed in the graph (the unoptimised dynamo export of bias=False) is no weight
    tensors = {"weight": (_f32(w), node.input[1])}
    if b is not None:
        if b.shape != (w.shape[0],):
            ctx.fail(node, f"bias {node.input[2]!r} has shape {b.shape}; expected ({w.shape[0]},)")
        tensors["bias"] = (_f32(b), node.input[2])
    config = {"in_channels": int(shape[1]), "out_channels": int(w.shape[0]), "kernel_size": list(w.shape[2:]),
              "stride": strides, "padding": list(padding), "dilation": dilations, "groups": groups,
              "bias": b is not None}
    conv = ctx.layer(node, nn.Conv2d, config, inputs=[x_in], **tensors)
    return conv if pad_layer is None else [pad_layer, conv]


def _pool_common(node, a, ctx):
    x = ctx.activation(node, 0)
    shape = ctx.shape(node, x)
    if len(shape) != 4:
        ctx.fail(node, f"input of shape {shape}; supported: 2-D pooling over (N, C, H, W)")
    if any(d != 1 for d in (a.get("dilations") or [1, 1])):
        ctx.fail(node, f"dilations={a['dilations']}; supported: 1")
    kernel = _pair(ctx, node, a, "kernel_shape", default=())
    strides = _pair(ctx, node, a, "strides")
    padding = _pads(ctx, node, a, shape, kernel, strides, [1, 1])
    return x, {"kernel_size": kernel, "stride": strides, "padding": list(padding), "ceil_mode": bool(a["ceil_mode"])}


_POOL_ATTRS = {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None, "kernel_shape": None, "pads": None,
               "strides": None}


@converter("MaxPool", attrs={**_POOL_ATTRS, "storage_order": 0})
def _max_pool(node, a, ctx):
    x, config = _pool_common(node, a, ctx)
    return ctx.layer(node, nn.MaxPool2d, config, inputs=[x])


@converter("AveragePool", attrs={**_POOL_ATTRS, "count_include_pad": 0})
def _average_pool(node, a, ctx):
    shape = ctx.graph.shapes.get(node.input[0])
    if shape is not None and len(shape) != 4:  # 1-D, 3-D: a generic node
        return average_pool_nd(node, a, ctx)
    x, config = _pool_common(node, a, ctx)
    return ctx.layer(node, nn.AvgPool2d, {**config, "count_include_pad": bool(a["count_include_pad"])}, inputs=[x])


@converter("GlobalAveragePool", attrs={})
def _global_average_pool(node, a, ctx):
    x = ctx.activation(node, 0, ranks={4})
    return ctx.layer(node, nn.AdaptiveAvgPool2d, {"output_size": [1, 1]}, inputs=[x])


@converter("BatchNormalization", attrs={"epsilon": 1e-5, "momentum": 0.9, "spatial": 1, "training_mode": 0})
def _batch_norm(node, a, ctx):
    x = ctx.activation(node, 0, ranks={2, 3, 4})
    if a["training_mode"] or not a["spatial"]:
        ctx.fail(node, f"training_mode={a['training_mode']}, spatial={a['spatial']}; supported: an inference "
                       "BatchNormalization (training_mode=0, spatial=1)")
    c = ctx.shape(node, x)[1]
    tensors = {}
    for i, (local, what) in enumerate((("weight", "scale"), ("bias", "B"), ("running_mean", "input_mean"),
                                       ("running_var", "input_var")), start=1):
        t = ctx.const(node, i, what)
        if t is None or t.shape != (c,):
            ctx.fail(node, f"{what} {node.input[i] if i < len(node.input) else ''!r} has shape "
                           f"{None if t is None else t.shape}; expected ({c},) for an input of shape "
                           f"{ctx.shape(node, x)}")
        tensors[local] = (_f32(t), node.input[i])
    cls = nn.BatchNorm2d if len(ctx.shape(node, x)) == 4 else nn.BatchNorm1d
    momentum = float(str(np.float32(1.0 - a["momentum"])))  # PyTorch's convention: 1 - ONNX's
    config = {"num_features": int(c), "eps": float(a["epsilon"]), "momentum": momentum}
    return ctx.layer(node, cls, config, inputs=[x], **tensors)


# ------------------------------------------------------------------------------------------------- shapes
@converter("Flatten", attrs={"axis": 1})
def _flatten(node, a, ctx):
    x = ctx.activation(node, 0)
    rank = len(ctx.shape(node, x))
    if a["axis"] % max(rank, 1) != 1:
        ctx.fail(node, f"axis={a['axis']} for a {rank}-D input mixes the batch axis into the features; "
                       "supported: axis=1 (keep the batch axis, flatten the rest)")
    return ctx.layer(node, nn.Flatten, {}, inputs=[x])


def _merged_factor(shape, target):
    """For an input with one dynamic axis (None, the batch N) and a constant Reshape target with one -1: the
    static factor F such that the -1 axis is N * F and holds N whole -- the target's axes before the -1 regroup a
    leading part of the input's axes before N, those after it a trailing part of the axes after N (the dynamo
    exporter's attention: (L, N, 3E) -> [L, -1, 3, E], (L, N, E) -> [L, -1, E / heads], (L, N, H, d) ->
    [-1, E]). None when the target is not of that form."""
    dynamic = [i for i, d in enumerate(shape) if d is None]
    if len(dynamic) != 1 or target.count(-1) != 1:
        return None
    i, j = dynamic[0], target.index(-1)
    t = [shape[k] if v == 0 and k < len(shape) else v for k, v in enumerate(target)]
    if any(v is None or v <= 0 for k, v in enumerate(t) if k != j):
        return None
    pre_in, post_in = int(np.prod(shape[:i])), int(np.prod(shape[i + 1:]))
    pre, post = int(np.prod(t[:j])), int(np.prod(t[j + 1:]))
    return None if pre_in % pre or post_in % post else pre_in // pre * (post_in // post)


def _keeps_fixed_batch(ctx, x, target, allowzero) -> bool:
    """For a graph of one fixed batch: whether Reshape(x, target) keeps axis 0 (the batch) and reshapes each
    sample alone, so that it can be a :class:`~sparkdl.nn.Reshape` layer."""
    shape = ctx.graph.shapes.get(x)
    if shape is None or None in shape or not target or (allowzero and 0 in target):
        return False
    rest = [shape[i] if t == 0 and i < len(shape) else t for i, t in enumerate(target)][1:]
    if target[0] not in (0, shape[0]) or any(t < -1 for t in rest):
        return False
    known, size = int(np.prod([t for t in rest if t != -1])), int(np.prod(shape[1:]))
    return size % known == 0 if -1 in rest else known == size


@converter("Reshape", attrs={"allowzero": 0})
def _reshape(node, a, ctx):
    if ctx.is_const(node.input[0]) or not ctx.is_const(node.input[1]):
        # a constant folds; a target computed from Shape(...) is batch-aware by construction
        return generic(node, ctx, {"allowzero": int(a["allowzero"])})
    x = ctx.activation(node, 0)
    target = [int(t) for t in np.asarray(ctx.const(node, 1, "shape")).reshape(-1)]
    if ctx.graph.batch_size is not None and not _keeps_fixed_batch(ctx, x, target, a["allowzero"]):
        return generic(node, ctx, {"allowzero": int(a["allowzero"])})  # the whole fixed batch, as written
    if not batch_first(ctx, x):  # e.g. (T, N, D, H) -> [0, 0, -1]: every unknown axis must be copied (0)
        shape = ctx.graph.shapes.get(x)
        zero_means_copy = not a["allowzero"] or 0 not in target  # allowzero only matters for a 0 in the target
        factor = None if shape is None or not zero_means_copy else _merged_factor(shape, target)
        if shape is None or not zero_means_copy or (factor is None and any(
                d is None and (i >= len(target) or target[i] != 0) for i, d in enumerate(shape))):
            ctx.fail(node, f"shape {target} for an input of shape {shape} (None = dynamic); supported: a target "
                           "that copies (0) every dynamic axis, or has -1 for an axis holding it whole, or "
                           "a batch-first reshape")
        if factor:
            ctx.merged_batch.add(factor)
        return generic(node, ctx, {"allowzero": 0})
    shape = ctx.shape(node, x)
    if a["allowzero"] and 0 in target:
        ctx.fail(node, f"allowzero=1 with a 0 in the shape {target}; supported: allowzero=0")
    rest = [shape[i] if t == 0 and i < len(shape) else t for i, t in enumerate(target)][1:]
    size = int(np.prod(shape[1:]))
    known = int(np.prod([t for t in rest if t != -1]))
    one_sample = (size % known == 0) if -1 in rest else (known == size)
    batch_kept = bool(target) and (target[0] in (0, -1) or (target[0] > 0 and -1 not in rest))
    static = int(np.prod([t for t in target if t != -1]))
    if target.count(-1) == 1 and static % size == 0 and static // size in ctx.merged_batch - {1}:
        return generic(node, ctx, {"allowzero": 0})  # (N * k, ...) -> (N, k, ...) or (k, N, ...): undoes a merge
    if not (one_sample and batch_kept) or any(t is None or t < -1 for t in rest):
        ctx.fail(node, f"shape {target} for an input of shape {shape} does not keep the batch axis; supported: "
                       "a target (N or -1 or 0, *per_sample) whose per-sample part holds one sample")
    return ctx.layer(node, nn.Reshape, {"shape": rest}, inputs=[x])
