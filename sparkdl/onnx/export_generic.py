"""ONNX exporter of the generic nodes of imported graphs, :class:`~sparkdl.nn.OnnxOp`, registered into
:data:`sparkdl.onnx.export_ops.EXPORTERS`: each is written back as the operator it holds, so a fine-tuned
imported network exports again.

Attributes that an opset turned into inputs move to the form of the opset written: ``axes`` of
Squeeze/Unsqueeze/ReduceSum (inputs from opset 13) and ReduceMean/ReduceMax/ReduceMin (18), ``pads`` and
``value`` of Pad and ``min``/``max`` of Clip (11, always below the exported opsets) -- in both directions for
constant axes, so a file read at opset 18 exports at 17.
"""
from __future__ import annotations

import numpy as np

from sparkdl import nn
from sparkdl.onnx.export_ops import EXPORTERS, _join

__all__: list[str] = []  # the exporter registers itself

#: op_type -> first opset whose ``axes`` is input 1 rather than an attribute.
_AXES_INPUT_FROM = {"Squeeze": 13, "Unsqueeze": 13, "ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18,
                    "ReduceMin": 18}
#: op_type -> attributes of opsets < 11 that are inputs (index, dtype) since (the exported opsets are >= 13).
_INPUTS_SINCE_11 = {"Pad": {"pads": (1, "int64"), "value": (2, "float32")},
                    "Clip": {"min": (1, "float32"), "max": (2, "float32")}}
#: Attribute defaults dropped on export (valid at every opset >= 13).
_DEFAULTS = {"saturate": 1, "noop_with_empty_axes": 0, "start": 0}


def _arguments(m, path, xs, em) -> tuple[list, list]:
    """The node's input names, and for each its constant value (None for computed or absent inputs)."""
    given, args, values = iter(xs), [], []
    for entry in m.inputs:
        value = None
        if entry == "x":
            args.append(next(given))
        elif entry is None:
            args.append("")
        elif "tensor" in entry:
            t, name = m._tensors, entry["tensor"]
            args.append(em.tensor(_join(path, name), t["parameters"].get(name, t["buffers"].get(name))))
        else:
            value = np.asarray(entry["value"], entry["dtype"])
            args.append(em.tensor(_join(path, "value"), value))
        values.append(value)
    return args, values


def _set_input(args, index, name):
    args.extend([""] * (index + 1 - len(args)))
    args[index] = name


def _onnx_op(m, path, xs, shapes, em):
    from onnx import helper
    args, values = _arguments(m, path, xs, em)
    attrs = {k: v for k, v in m.attrs.items() if _DEFAULTS.get(k, object()) != v}
    first = _AXES_INPUT_FROM.get(m.op_type)
    if first is not None and em.opset >= first and "axes" in attrs:
        _set_input(args, 1, em.tensor(_join(path, "axes"), np.array(attrs.pop("axes"), np.int64)))
    elif first is not None and em.opset < first and len(values) > 1 and values[1] is not None:
        attrs["axes"] = [int(v) for v in values[1].reshape(-1)]
        args[1] = ""
    for name, (index, dtype) in _INPUTS_SINCE_11.get(m.op_type, {}).items():
        if name in attrs:
            _set_input(args, index, em.tensor(_join(path, name), np.asarray(attrs.pop(name), dtype)))
    if m.op_type == "ConstantOfShape":
        dtype = np.dtype(attrs.pop("dtype", "float32"))
        attrs["value"] = helper.make_tensor("value", helper.np_dtype_to_tensor_dtype(dtype), [1],
                                            [attrs.pop("value", 0)])
    while args and args[-1] == "":
        args.pop()
    return em.node(m.op_type, args, path, **attrs)


EXPORTERS.update({nn.OnnxOp: _onnx_op})
