"""Whole-array tensor operators with ONNX semantics: :class:`OnnxOp`, one ONNX operator node evaluated with numpy,
and its operator table :data:`ONNX_OPS`. They are the nodes of imported graphs that no sparkdl layer expresses:
the attention arithmetic, transposes, reshapes and shape computations that ``torch.onnx.export`` writes around
sequence layers (:mod:`sparkdl.onnx` imports them; the outputs of an ONNX recurrent node are
:class:`~sparkdl.nn.RecurrentPart`, beside the recurrent layers).

Unlike the layers, these operate on the whole array: the batch axis may be anywhere (attention exports carry
(L, N, E) and (N * heads, L, d) tensors), and integer shape tensors flow between them. Forward and backward
of each operator sit side by side in :data:`ONNX_OPS`; integer results (``Shape``, comparisons) have no gradient.
:data:`CASTS` maps the ONNX element types that ``Cast`` supports to numpy types.
"""
from __future__ import annotations

import numpy as np

from sparkdl.config import get_num_threads
from sparkdl.kernels.activation import softmax, softmax_backward
from sparkdl.kernels.embedding import embedding_backward
from sparkdl.nn import gemm
from sparkdl.nn.module import Module
from sparkdl.nn.onnx_op_einsum import EINSUM_OPS
from sparkdl.nn.onnx_op_elementwise import ELEMENTWISE_OPS, unbroadcast
from sparkdl.nn.onnx_op_reduce import REDUCE_OPS
from sparkdl.nn.onnx_op_spatial import SPATIAL_OPS

__all__ = ["OnnxOp", "ONNX_OPS", "CASTS"]


def _divide(x, y):
    """ONNX Div: true division for floats, truncation toward zero for integers (shape arithmetic)."""
    if x.dtype.kind in "iu" and y.dtype.kind in "iu":
        q = np.abs(x) // np.abs(y)
        return (np.sign(x) * np.sign(y) * q).astype(np.result_type(x, y))
    return np.divide(x, y)


def _binary(fn, grads):
    def forward(xs, a):
        return fn(xs[0], xs[1]), xs

    def backward(cache, g, a):
        x, y = cache
        return tuple(None if gi is None else unbroadcast(gi, s.shape) for gi, s in zip(grads(x, y, g), (x, y)))
    return forward, backward


def _no_grad(fn):
    return (lambda xs, a: (fn(xs, a), None)), (lambda cache, g, a: None)


def _shaped(fn):
    """Ops that only rearrange the elements of input 0 (other inputs are shapes/axes: no gradient)."""
    def forward(xs, a):
        return fn(xs, a), xs[0].shape
    return forward, (lambda shape, g, a: (g.reshape(shape),))


def _axes(xs, a, index=1):
    if len(xs) > index and xs[index] is not None:
        return [int(v) for v in np.asarray(xs[index]).reshape(-1)]
    return a.get("axes")


def _reshape(xs, a):
    x, target = xs[0], [int(t) for t in np.asarray(xs[1]).reshape(-1)]
    if not a.get("allowzero", 0):
        target = [x.shape[i] if t == 0 else t for i, t in enumerate(target)]
    return x.reshape(target)


def _squeeze(xs, a):
    axes = _axes(xs, a)
    return np.squeeze(xs[0], axis=None if axes is None else tuple(axes))


def _unsqueeze(xs, a):
    x, axes = xs[0], _axes(xs, a)
    rank = x.ndim + len(axes)
    axes = {ax % rank for ax in axes}
    it = iter(x.shape)
    return x.reshape([1 if i in axes else next(it) for i in range(rank)])


def _transpose():
    def forward(xs, a):
        perm = a.get("perm") or list(range(xs[0].ndim))[::-1]
        return np.ascontiguousarray(np.transpose(xs[0], perm)), perm
    return forward, (lambda perm, g, a: (np.ascontiguousarray(np.transpose(g, np.argsort(perm))),))


def _slices(xs):
    x = xs[0]
    starts, ends = (np.asarray(v).reshape(-1) for v in xs[1:3])
    axes = np.asarray(xs[3]).reshape(-1) if len(xs) > 3 and xs[3] is not None else np.arange(len(starts))
    steps = np.asarray(xs[4]).reshape(-1) if len(xs) > 4 and xs[4] is not None else np.ones(len(starts), int)
    index = [slice(None)] * x.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        s, e, st = slice(int(s), int(e), int(st)).indices(x.shape[int(ax) % x.ndim])
        index[int(ax) % x.ndim] = slice(s, None if e < 0 else e, st)  # e == -1: past the start (negative step)
    return tuple(index)


def _slice():
    def forward(xs, a):
        index = _slices(xs)
        return xs[0][index].copy(), (xs[0].shape, index)

    def backward(cache, g, a):
        shape, index = cache
        gx = np.zeros(shape, g.dtype)
        gx[index] = g
        return (gx,)
    return forward, backward


def _gather():
    def forward(xs, a):
        x, idx = xs[0], np.asarray(xs[1]).astype(np.int64)
        axis = a.get("axis", 0) % x.ndim
        idx = np.where(idx < 0, idx + x.shape[axis], idx)
        return np.take(x, idx, axis=axis), (x.shape, idx, axis)

    def backward(cache, g, a):
        shape, idx, axis = cache
        gx = np.zeros(shape, g.dtype)
        moved = np.moveaxis(gx, axis, 0)  # a view: (shape[axis], *other axes)
        block = list(range(axis, axis + idx.ndim))
        gi = np.moveaxis(g, block, list(range(idx.ndim))).reshape(idx.size, *moved.shape[1:])
        if axis == 0 and gx.ndim > 1:  # an embedding table's rows: the numba scatter, in the same order (same bits)
            embedding_backward(idx.reshape(-1), np.ascontiguousarray(gi).reshape(idx.size, -1),
                               gx.reshape(shape[0], -1))
        else:
            np.add.at(moved, idx.reshape(-1), gi)
        return (gx, None)
    return forward, backward


def _concat():
    def forward(xs, a):
        axis = a["axis"] % xs[0].ndim
        return np.concatenate(xs, axis=axis), (axis, [x.shape[axis] for x in xs])

    def backward(cache, g, a):
        axis, sizes = cache
        return tuple(np.ascontiguousarray(p) for p in np.split(g, np.cumsum(sizes)[:-1], axis=axis))
    return forward, backward


def _rows(x, axis: int) -> np.ndarray:
    """``x`` as (outer, D, inner) around ``axis``, contiguous, for the row kernels."""
    axis %= x.ndim
    return np.ascontiguousarray(x).reshape(int(np.prod(x.shape[:axis])), x.shape[axis], -1)


def _softmax():
    """ONNX Softmax (opset >= 13: along one axis) with sparkdl's row kernels (:mod:`sparkdl.kernels.activation`,
    parallel over rows, the maximum subtracted, float64 sums)."""
    def forward(xs, a):
        x = xs[0]
        y = softmax(_rows(x, a.get("axis", -1))).reshape(x.shape) if x.size else x.copy()
        return y, y

    def backward(y, g, a):
        if not y.size:
            return (g.copy(),)
        axis = a.get("axis", -1)
        return (softmax_backward(_rows(y, axis), _rows(g.astype(y.dtype, copy=False), axis)).reshape(y.shape),)
    return forward, backward


def _reduce_mean():
    def forward(xs, a):
        axes = _axes(xs, a)
        axes = tuple(range(xs[0].ndim)) if not axes else tuple(ax % xs[0].ndim for ax in axes)
        keep = bool(a.get("keepdims", 1))
        return xs[0].mean(axis=axes, keepdims=keep), (xs[0].shape, axes, keep)

    def backward(cache, g, a):
        shape, axes, keep = cache
        g = g if keep else np.expand_dims(g, axes)
        count = int(np.prod([shape[ax] for ax in axes]))
        return (np.broadcast_to(g / g.dtype.type(count), shape).copy(), None)
    return forward, backward


def _batched_matmul(a, b):
    """``np.matmul(a, b)``; with several numba threads, a stack of products with the same leading axes (attention's
    (N, heads, L, d) @ (N, heads, d, L)) is cut across them (:func:`sparkdl.nn.gemm.matmul`: bitwise the same)."""
    if get_num_threads() < 2 or a.ndim < 3 or a.shape[:-2] != b.shape[:-2]:
        return np.matmul(a, b)
    lead = a.shape[:-2]
    out = gemm.matmul(a.reshape((-1,) + a.shape[-2:]), b.reshape((-1,) + b.shape[-2:]))
    return out.reshape(lead + out.shape[-2:])


def _matmul():
    def forward(xs, a):
        return _batched_matmul(xs[0], xs[1]), xs

    def backward(cache, g, a):
        x, y = cache
        gx = _batched_matmul(g, np.swapaxes(y, -1, -2))
        gy = _batched_matmul(np.swapaxes(x, -1, -2), g)
        return unbroadcast(gx, x.shape), unbroadcast(gy, y.shape)
    return forward, backward


def _expand():
    def forward(xs, a):
        shape = np.broadcast_shapes(xs[0].shape, tuple(int(s) for s in np.asarray(xs[1]).reshape(-1)))
        return np.broadcast_to(xs[0], shape).copy(), xs[0].shape
    return forward, (lambda shape, g, a: (unbroadcast(g, shape), None))


def _where():
    def forward(xs, a):
        c = xs[0].astype(bool)
        return np.where(c, xs[1], xs[2]), (c, xs[1].shape, xs[2].shape)

    def backward(cache, g, a):
        c, sx, sy = cache
        zero = np.zeros((), g.dtype)
        return None, unbroadcast(np.where(c, g, zero), sx), unbroadcast(np.where(c, zero, g), sy)
    return forward, backward


def _unary(fn, grad):
    def forward(xs, a):
        y = fn(xs[0])
        return y, (xs[0], y)
    return forward, (lambda c, g, a: (grad(c[0], c[1], g),))


#: ONNX ``TensorProto`` element type -> numpy type, for ``Cast``: FLOAT, INT32, INT64, BOOL, DOUBLE.
CASTS = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}


def _cast():
    def forward(xs, a):
        to = CASTS[a["to"]]
        return xs[0].astype(to), (xs[0].dtype, np.dtype(to).kind == "f" and xs[0].dtype.kind == "f")
    return forward, (lambda c, g, a: (g.astype(c[0]) if c[1] else None,))


#: ONNX op_type -> (forward(inputs, attrs) -> (y, cache), backward(cache, grad_y, attrs) -> grads per input).
ONNX_OPS = {
    "Add": _binary(np.add, lambda x, y, g: (g, g)),
    "Sub": _binary(np.subtract, lambda x, y, g: (g, -g)),
    "Mul": _binary(np.multiply, lambda x, y, g: (g * y, g * x)),
    "Div": _binary(_divide, lambda x, y, g: (g / y, -g * x / (y * y))),
    "Pow": _binary(np.power, lambda x, y, g: (g * y * np.power(x, y - 1), None)),
    "MatMul": _matmul(),
    "Transpose": _transpose(),
    "Reshape": _shaped(_reshape),
    "Squeeze": _shaped(_squeeze),
    "Unsqueeze": _shaped(_unsqueeze),
    "Identity": _shaped(lambda xs, a: xs[0].copy()),
    "Slice": _slice(),
    "Gather": _gather(),
    "Concat": _concat(),
    "Softmax": _softmax(),
    "ReduceMean": _reduce_mean(),
    "Expand": _expand(),
    "Where": _where(),
    "Cast": _cast(),
    "Sqrt": _unary(np.sqrt, lambda x, y, g: g / (2 * y)),
    "Neg": _unary(np.negative, lambda x, y, g: -g),
    "Exp": _unary(np.exp, lambda x, y, g: g * y),
    "Reciprocal": _unary(np.reciprocal, lambda x, y, g: -g * y * y),
    "Shape": _no_grad(lambda xs, a: np.array(xs[0].shape[a.get("start", 0):a.get("end")], np.int64)),
    "ConstantOfShape": _no_grad(lambda xs, a: np.full([int(s) for s in np.asarray(xs[0]).reshape(-1)],
                                                      a.get("value", 0.0), np.dtype(a.get("dtype", "float32")))),
    "Equal": _no_grad(lambda xs, a: np.equal(xs[0], xs[1])),
    "Less": _no_grad(lambda xs, a: np.less(xs[0], xs[1])),
    "Greater": _no_grad(lambda xs, a: np.greater(xs[0], xs[1])),
    "Not": _no_grad(lambda xs, a: np.logical_not(xs[0])),
    "IsNaN": _no_grad(lambda xs, a: np.isnan(xs[0])),
    "Mod": _no_grad(lambda xs, a: (np.fmod if a.get("fmod") else np.mod)(xs[0], xs[1])),
    **ELEMENTWISE_OPS,
    **REDUCE_OPS,
    **SPATIAL_OPS,
    **EINSUM_OPS,
}


def _value(entry):
    return np.asarray(entry["value"], np.dtype(entry.get("dtype", "int64")))


class OnnxOp(Module):
    """One ONNX operator node evaluated with numpy on whole arrays (imported graphs; see the module docstring).

    Parameters
    ----------
    op_type : str
        An operator of :data:`ONNX_OPS` (elementwise arithmetic with broadcasting, ``MatMul``, ``Transpose``,
        ``Reshape``, ``Squeeze``/``Unsqueeze``, ``Slice``, ``Gather``, ``Concat``, ``Softmax``, ``ReduceMean``,
        ``Expand``, ``Where``, ``Cast``, ``Sqrt``/``Neg``/``Exp``/``Reciprocal``, ``Shape``,
        ``ConstantOfShape``, comparisons, ``IsNaN``, ``Mod``; and from the modules ``onnx_op_elementwise``,
        ``onnx_op_reduce``, ``onnx_op_spatial``, ``onnx_op_einsum``: ``Clip``, ``HardSigmoid``, ``PRelu``,
        ``Erf``, ``ReduceSum``/``ReduceMax``/``ReduceMin``, variadic ``Sum``/``Mean``/``Max``/``Min``, ``Pad``,
        ``LRN``, ``Einsum``).
    attrs : dict, optional
        The node's attributes as plain values (ONNX names and semantics).
    inputs : list, optional
        One entry per ONNX input, in order: ``"x"`` for a value computed in the graph (the module's inputs,
        in this order), ``None`` for an absent optional input, ``{"tensor": name}`` for one of this module's
        ``parameters``/``buffers``, or ``{"value": nested list, "dtype": "int64"}`` for a small constant
        (shapes, axes, indices). Default: one computed input.
    parameters, buffers : dict, optional
        Local tensor name -> shape: float constants of the node; parameters are learned (the exporting
        model's weights), buffers are not (constants such as a 1/sqrt(d) scale or a mask).

    Shapes
    ------
    As the ONNX operator: any rank, the batch axis wherever the graph keeps it. ``forward`` takes one array
    or, with k > 1 computed inputs, a k-tuple; ``backward`` returns one gradient per computed input (None
    for integer inputs such as shapes and indices).

    Raises
    ------
    ValueError
        An operator not in :data:`ONNX_OPS` or a malformed ``inputs`` list.

    References
    ----------
    ONNX operator specifications, https://onnx.ai/onnx/operators/.
    """

    def __init__(self, op_type: str, attrs=None, inputs=("x",), parameters=None, buffers=None):
        super().__init__()
        if op_type not in ONNX_OPS:
            raise ValueError(f"OnnxOp: op_type must be one of {sorted(ONNX_OPS)}, got {op_type!r}")
        self.op_type, self.attrs = op_type, dict(attrs or {})
        self.inputs = [i if isinstance(i, (str, type(None))) else dict(i) for i in inputs]
        self.parameters, self.buffers = dict(parameters or {}), dict(buffers or {})
        for i, entry in enumerate(self.inputs):
            ok = entry in ("x", None) or (isinstance(entry, dict) and (
                entry.get("tensor") in {**self.parameters, **self.buffers} or "value" in entry))
            if not ok:
                raise ValueError(f"OnnxOp({op_type}): inputs[{i}] = {entry!r} must be 'x', None, "
                                 "{'tensor': <a parameter or buffer name>} or {'value': ..., 'dtype': ...}")
        self.num_inputs = sum(entry == "x" for entry in self.inputs)
        for name, shape in self.parameters.items():
            self.add_parameter(name, tuple(shape))
        for name, shape in self.buffers.items():
            self.add_buffer(name, np.zeros(tuple(shape)))

    def _arguments(self, x):
        given = iter((x,) if self.num_inputs == 1 else tuple(x))
        args = []
        for entry in self.inputs:
            if entry == "x":
                args.append(next(given))
            elif entry is None:
                args.append(None)
            elif "tensor" in entry:
                t = self._tensors
                args.append(t["parameters"].get(entry["tensor"], t["buffers"].get(entry["tensor"])))
            else:
                args.append(_value(entry))
        return args

    def forward(self, x, *, training=False, rng=None):
        if self.num_inputs > 1 and not (isinstance(x, (tuple, list)) and len(x) == self.num_inputs):
            raise TypeError(f"OnnxOp({self.op_type}): input must be a tuple of {self.num_inputs} arrays")
        y, cache = ONNX_OPS[self.op_type][0](self._arguments(x), self.attrs)
        return y, cache

    def backward(self, cache, grad_y, grad_params):
        grads = ONNX_OPS[self.op_type][1](cache, grad_y, self.attrs)
        grads = tuple(grads or ()) + (None,) * (len(self.inputs) - len(grads or ()))
        views = self.grad_views(grad_params)
        out = []
        for entry, g in zip(self.inputs, grads):
            if entry == "x":
                out.append(g)
            elif isinstance(entry, dict) and entry.get("tensor") in views:
                views[entry["tensor"]][...] = 0 if g is None else g
        return out[0] if self.num_inputs == 1 else tuple(out)

    def get_config(self):
        return {"op_type": self.op_type, "attrs": self.attrs, "inputs": self.inputs,
                "parameters": {k: list(v) for k, v in self.parameters.items()},
                "buffers": {k: list(v) for k, v in self.buffers.items()}}
