"""One ONNX exporter per sparkdl module class, in :data:`EXPORTERS`.

An exporter is ``fn(module, path, x, shape, em) -> value`` for a single-input module: ``x`` is the ONNX value
name of its input, ``shape`` the input shape (batch of one), ``em`` the :class:`~sparkdl.onnx.export.Emitter`.
Containers recurse through :func:`export_module`; multi-input modules (merge layers, Graphs) take lists.
"""
from __future__ import annotations

import numpy as np

from sparkdl import nn

__all__ = ["EXPORTERS", "export_module", "check_exportable"]


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _param(em, module, path, local):
    return em.tensor(_join(path, local), getattr(module, local))


def _out_shape(module, shape):
    return module(np.zeros(shape, module.dtype)).shape


# --------------------------------------------------------------------------------------------- leaves
def _dense(em, path, x, weight, bias, name):
    """``x @ weight.T + bias`` for an input of any rank (MatMul with the transposed weight, as torch writes it)."""
    y = em.node("MatMul", [x, em.tensor(_join(path, name + "_t"), np.ascontiguousarray(weight.T))], path)
    bias_name = name[:-len("weight")] + "bias" if name.endswith("weight") else name + "_bias"
    return y if bias is None else em.node("Add", [y, em.tensor(_join(path, bias_name), bias)], path)


def _linear(m, path, x, shape, em):
    if len(shape) > 2:  # (N, *, D_in): Gemm takes matrices only
        return _dense(em, path, x, m.weight, m.bias if m.use_bias else None, "weight")
    args = [x, _param(em, m, path, "weight")] + ([_param(em, m, path, "bias")] if m.use_bias else [])
    return em.node("Gemm", args, path, transB=1)


def _conv2d(m, path, x, shape, em):
    args = [x, _param(em, m, path, "weight")] + ([_param(em, m, path, "bias")] if m.use_bias else [])
    (ph, pw) = m.padding
    return em.node("Conv", args, path, kernel_shape=list(m.kernel_size), strides=list(m.stride),
                   pads=[ph, pw, ph, pw], dilations=list(m.dilation), group=m.groups)


def _pool_attrs(m):
    (ph, pw) = m.padding
    return {"kernel_shape": list(m.kernel_size), "strides": list(m.stride), "pads": [ph, pw, ph, pw],
            "ceil_mode": int(m.ceil_mode)}


def _max_pool(m, path, x, shape, em):
    return em.node("MaxPool", [x], path, **_pool_attrs(m))


def _avg_pool(m, path, x, shape, em):
    return em.node("AveragePool", [x], path, **_pool_attrs(m), count_include_pad=int(m.count_include_pad))


def _adaptive_avg_pool(m, path, x, shape, em):
    (h, w), (oh, ow) = shape[2:], m.output_size
    if (oh, ow) == (1, 1):
        return em.node("GlobalAveragePool", [x], path)
    if h % oh or w % ow:
        raise ValueError(f"sparkdl.onnx.save: {path} (AdaptiveAvgPool2d {m.output_size}) on a {h}x{w} input has "
                         "unequal windows, which ONNX cannot express; use sizes that divide the input")
    return em.node("AveragePool", [x], path, kernel_shape=[h // oh, w // ow], strides=[h // oh, w // ow])


def _batch_norm(m, path, x, shape, em):
    if not m.track_running_stats:
        raise ValueError(f"sparkdl.onnx.save: {path} ({type(m).__name__}) has track_running_stats=False; an "
                         "inference graph needs running statistics")
    c = m.num_features
    scale = _param(em, m, path, "weight") if m.affine else em.tensor(_join(path, "weight"), np.ones(c))
    bias = _param(em, m, path, "bias") if m.affine else em.tensor(_join(path, "bias"), np.zeros(c))
    mean, var = _param(em, m, path, "running_mean"), _param(em, m, path, "running_var")
    momentum = 0.9 if m.momentum is None else 1.0 - m.momentum
    return em.node("BatchNormalization", [x, scale, bias, mean, var], path, epsilon=m.eps, momentum=momentum)


def _op(op_type, **attrs):
    return lambda m, path, x, shape, em: em.node(op_type, [x], path, **{k: f(m) for k, f in attrs.items()})


def _gelu(m, path, x, shape, em):
    if em.opset < 20:
        raise ValueError(f"sparkdl.onnx.save: {path} (GELU) needs opset >= 20 (the Gelu operator), got {em.opset}")
    return em.node("Gelu", [x], path, approximate=m.approximate)


def _dropout(m, path, x, shape, em):
    return em.node("Dropout", [x, em.tensor(_join(path, "ratio"), np.float32(m.p))], path)


def _reshape(m, path, x, shape, em):
    out = _out_shape(m, shape)
    if isinstance(m, nn.Flatten) and len(out) == 2 and len(shape) >= 2:
        return em.node("Flatten", [x], path, axis=1)
    return em.node("Reshape", [x, em.tensor(_join(path, "shape"), np.array([-1, *out[1:]]))], path)


# --------------------------------------------------------------------------------------------- containers
def _sequential(m, path, x, shape, em):
    for name, child in m._modules.items():
        (x,), (shape,) = export_module(child, _join(path, name), [x], [shape], em)
    return x


def _residual(m, path, x, shape, em):
    (y,), _ = export_module(m.body, _join(path, "body"), [x], [shape], em)
    s = export_module(m.shortcut, _join(path, "shortcut"), [x], [shape], em)[0][0] \
        if "shortcut" in m._modules else x
    return em.node("Add", [y, s], path)


def _concat(m, path, x, shape, em):
    ys = [export_module(child, _join(path, name), [x], [shape], em)[0][0] for name, child in m._modules.items()]
    return em.node("Concat", ys, path, axis=m.dim)


def _add(m, path, xs, shapes, em):
    y = xs[0]
    for x in xs[1:]:
        y = em.node("Add", [y, x], path)
    return y


def _concatenate(m, path, xs, shapes, em):
    return em.node("Concat", xs, path, axis=m.dim)


def _graph(m, path, xs, shapes, em):
    values = dict(zip(m.input_names, xs))
    shape_of = dict(zip(m.input_names, shapes))
    for name, child in m._modules.items():
        args = m.node_inputs[name]
        (values[name],), (shape_of[name],) = export_module(child, _join(path, name), [values[a] for a in args],
                                                           [shape_of[a] for a in args], em)
    return [values[o] for o in m.output_names], [shape_of[o] for o in m.output_names]


#: Module class -> exporter. Multi-input classes are listed in ``_MULTI``.
EXPORTERS = {
    nn.Linear: _linear, nn.Conv2d: _conv2d, nn.MaxPool2d: _max_pool, nn.AvgPool2d: _avg_pool,
    nn.AdaptiveAvgPool2d: _adaptive_avg_pool, nn.BatchNorm1d: _batch_norm, nn.BatchNorm2d: _batch_norm,
    nn.ReLU: _op("Relu"), nn.Tanh: _op("Tanh"), nn.Sigmoid: _op("Sigmoid"), nn.Identity: _op("Identity"),
    nn.LeakyReLU: _op("LeakyRelu", alpha=lambda m: m.negative_slope), nn.ELU: _op("Elu", alpha=lambda m: m.alpha),
    nn.GELU: _gelu, nn.Softmax: _op("Softmax", axis=lambda m: m.dim),
    nn.LogSoftmax: _op("LogSoftmax", axis=lambda m: m.dim), nn.Dropout: _dropout,
    nn.Flatten: _reshape, nn.Reshape: _reshape,
    nn.Sequential: _sequential, nn.Residual: _residual, nn.Concat: _concat,
    nn.Add: _add, nn.Concatenate: _concatenate, nn.Graph: _graph,
}
_MULTI = (nn.Add, nn.Concatenate, nn.Graph, nn.OnnxOp)


def check_exportable(model) -> None:
    """Raise TypeError naming the first module (by path) whose class has no exporter."""
    for path, m in model.named_modules():
        if type(m) not in EXPORTERS:
            raise TypeError(f"sparkdl.onnx.save: {path or 'the model'} is a {type(m).__name__}, which has no ONNX "
                            f"exporter (subclasses are not assumed to export like their base); exportable: "
                            f"{sorted(c.__name__ for c in EXPORTERS)}")


def _example(em, x, shape, dtype):
    """The example value of ONNX value(s) ``x`` (a name, or nested tuple of names for (output, state)): what
    the module that produced it computed on the example batch, else zeros of ``shape``."""
    if isinstance(x, str):
        return em.examples[x] if x in em.examples else np.zeros(shape, em.dtypes.get(x, dtype))
    return tuple(_example(em, xi, si, dtype) for xi, si in zip(x, shape))


def _record(em, names, value):
    if isinstance(names, str):
        em.examples[names] = value
    else:
        for n, v in zip(names, value):
            _record(em, n, v)


def _shape_of(y):
    return tuple(_shape_of(v) for v in y) if isinstance(y, tuple) else y.shape


def _first_leaf(module):
    while isinstance(module, (nn.Sequential, nn.Residual)) and module._modules:
        module = next(iter(module._modules.values()))
    return module


#: Generic operators whose computed input has the type of their constant input (ONNX's type constraint T).
_SAME_TYPE_OPS = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Add", "Sub", "Mul", "Div",
                            "Mod"})


def _reads_integers(m) -> bool:
    """Whether module ``m`` reads its computed input as integers: an Embedding, or a generic comparison or
    arithmetic node against an integer constant (an imported attention mask's ``Equal(mask, 0)``)."""
    leaf = _first_leaf(m)
    if isinstance(leaf, nn.Embedding):
        return True
    return isinstance(leaf, nn.OnnxOp) and leaf.op_type in _SAME_TYPE_OPS and any(
        isinstance(e, dict) and "dtype" in e and np.issubdtype(np.dtype(e["dtype"]), np.integer)
        for e in leaf.inputs)


def integer_inputs(model, names: list) -> list:
    """The inputs of ``model`` read as integers (int64 in the exported file): token ids read by an Embedding,
    masks compared with integer constants."""
    if isinstance(model, nn.Graph):
        return [n for n in names if any(n in model.node_inputs[c] and _reads_integers(m)
                                        for c, m in model._modules.items())]
    return list(names) if isinstance(_first_leaf(model), nn.Embedding) else []


def export_module(module, path: str, xs: list, shapes: list, em) -> tuple[list, list]:
    """Emit ``module`` applied to values ``xs`` of ``shapes``; returns its output values and shapes.

    ``module`` must have passed :func:`check_exportable`.

    Raises
    ------
    ValueError
        If the module rejects the input shapes.
    """
    fn = EXPORTERS[type(module)]
    if isinstance(module, nn.Graph):
        return fn(module, path, xs, shapes, em)
    examples = [_example(em, x, s, module.dtype) for x, s in zip(xs, shapes)]
    try:
        out = module(examples[0] if len(examples) == 1 else tuple(examples))
    except (TypeError, ValueError) as e:
        raise ValueError(f"sparkdl.onnx.save: {path or 'the model'} ({type(module).__name__}) does not accept "
                         f"inputs of shape {[s[1:] for s in shapes]} (per sample): {e}") from e
    y = fn(module, path, xs, shapes, em) if isinstance(module, _MULTI) else fn(module, path, xs[0], shapes[0], em)
    _record(em, y, out)
    return [y], [_shape_of(out)]
