"""Reading and validating an ONNX file: bytes -> checked ``ModelProto`` -> :class:`OnnxGraph` (plain data).

Everything here goes through the ``onnx`` package (protobuf parsing, ``onnx.checker``, shape inference,
``numpy_helper``); nothing is hand-parsed. Any failure becomes an :class:`OnnxImportError` that says what is
wrong with the file. Pickles (``torch.save`` files) are recognised by their first bytes and refused before
anything parses them, so no code in a file ever runs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from sparkdl._extras import require_onnx
from sparkdl.io._format import ModelFormatError
from sparkdl.io.safetensors_io import refuse_pickle

__all__ = ["OnnxImportError", "OnnxGraph", "read_graph", "MIN_OPSET", "MAX_OPSET"]

#: Graph input element types (TensorProto codes) -> numpy dtypes: float features or integer token ids.
_INPUT_TYPES = {1: "float32", 7: "int64", 6: "int32"}

#: The ``ai.onnx`` opset versions whose semantics the importer was written against (inclusive).
MIN_OPSET, MAX_OPSET = 9, 22


class OnnxImportError(ModelFormatError):
    """An ONNX file cannot be imported: unreadable, invalid, out of the supported opset range, or using an
    operator, attribute or dynamic shape that sparkdl does not support (the message names the node).

    A subclass of :class:`sparkdl.io.ModelFormatError` (a ``ValueError``): the one exception type that
    :func:`sparkdl.onnx.load` raises for any bad file.
    """


@dataclass
class OnnxGraph:
    """The parts of a checked ONNX model that the converters use (protobuf nodes, numpy constants).

    ``shapes`` maps every value name to its inferred shape, with None for the (dynamic) batch axis or any
    dimension shape inference could not fix; ``inputs``/``outputs`` are the graph's activation inputs
    (initializers excluded) and outputs in order; ``initializers`` the names of the constants that are
    initializers (weights) rather than ``Constant`` nodes; ``input_types`` each input's numpy dtype, ``types``
    every typed value's ONNX element type (TensorProto code).
    """

    nodes: list
    constants: dict
    shapes: dict
    inputs: list
    outputs: list
    opset: int
    initializers: frozenset = frozenset()
    input_types: dict = None
    types: dict = None


def _read_bytes(source) -> tuple[bytes, str]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), "the given bytes"
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"sparkdl.onnx.load: no file at {path}")
        with open(path, "rb") as f:
            return f.read(), path
    raise TypeError(f"sparkdl.onnx.load: path_or_bytes must be a path or bytes, got {type(source).__name__}")


def _parse(data: bytes, what: str):
    onnx = require_onnx()
    if not data:
        raise OnnxImportError(f"{what}: empty file, not an ONNX model")
    refuse_pickle(data, what, OnnxImportError)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as e:  # protobuf DecodeError and friends: any parse failure means a bad file
        raise OnnxImportError(f"{what}: not a valid ONNX file (truncated or corrupted?): {type(e).__name__}: "
                              f"{e}") from None
    if not model.HasField("graph") or not model.graph.node:
        raise OnnxImportError(f"{what}: not an ONNX model (no graph nodes)")
    return model


def _opset(model, what: str) -> int:
    versions = {}
    for imp in model.opset_import:
        versions[imp.domain or "ai.onnx"] = imp.version
    other = sorted(d for d in versions if d != "ai.onnx")
    if other:
        raise OnnxImportError(f"{what}: imports operator domains {other}; sparkdl supports only the default "
                              f"domain ai.onnx, opsets {MIN_OPSET}..{MAX_OPSET}")
    v = versions.get("ai.onnx")
    if v is None or not MIN_OPSET <= v <= MAX_OPSET:
        raise OnnxImportError(f"{what}: ai.onnx opset {v} is outside the supported range {MIN_OPSET}..{MAX_OPSET}; "
                              f"re-export with opset_version in that range (e.g. torch.onnx.export(..., "
                              f"opset_version=17))")
    return int(v)


def _check(model, what: str):
    onnx = require_onnx()
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            raise OnnxImportError(f"{what}: initializer {t.name!r} keeps its data in an external file; sparkdl "
                                  "reads self-contained models only (onnx.load + onnx.save without external data)")
    try:
        onnx.checker.check_model(model)
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except Exception as e:  # checker.ValidationError, shape_inference.InferenceError, protobuf errors
        raise OnnxImportError(f"{what}: invalid ONNX model: {type(e).__name__}: {str(e).strip()[:2000]}") from None


def _declared_initializers(model, what: str) -> None:
    """IR < 4 lists initializers among the graph inputs too: the declared shape must be the data's."""
    dims = {t.name: tuple(t.dims) for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in dims:
            _, declared = _shape(vi)
            if declared is not None and declared != dims[vi.name]:
                raise OnnxImportError(f"{what}: initializer {vi.name!r} has shape {dims[vi.name]} but the graph "
                                      f"declares it as an input of shape {declared}")


def _shape(value_info):
    t = value_info.type
    if t.WhichOneof("value") != "tensor_type" or not t.tensor_type.HasField("shape"):
        return None, None
    dims = tuple(d.dim_value if d.WhichOneof("value") == "dim_value" else None for d in t.tensor_type.shape.dim)
    return t.tensor_type.elem_type, dims


def _constants(model, what: str) -> dict:
    onnx = require_onnx()
    from onnx import numpy_helper
    out = {}
    try:
        for t in model.graph.initializer:
            out[t.name] = numpy_helper.to_array(t)
        for node in model.graph.node:
            if node.op_type == "Constant":
                attrs = {a.name: a for a in node.attribute}
                if set(attrs) != {"value"}:
                    raise OnnxImportError(f"{what}: node {node.name!r} (Constant) uses attributes {sorted(attrs)}; "
                                          "supported: a 'value' tensor")
                out[node.output[0]] = numpy_helper.to_array(onnx.helper.get_attribute_value(attrs["value"]))
    except OnnxImportError:
        raise
    except Exception as e:  # raw data of the wrong length, unknown data types, ...
        raise OnnxImportError(f"{what}: unreadable tensor data: {type(e).__name__}: {e}") from None
    return out


def read_graph(source) -> OnnxGraph:
    """Parse, check and shape-infer an ONNX model from a path or bytes.

    Raises
    ------
    FileNotFoundError
        If a path does not exist.
    TypeError
        If ``source`` is neither a path nor bytes.
    OnnxImportError
        If the bytes are a pickle, not ONNX, invalid per ``onnx.checker``, of an unsupported opset, keep
        data externally, or declare an input that is not float32, int64 or int32 with static per-sample
        dimensions, or an initializer whose declared input shape differs from its data.
    """
    onnx = require_onnx()
    data, what = _read_bytes(source)
    model = _parse(data, what)
    opset = _opset(model, what)
    _declared_initializers(model, what)
    model = _check(model, what)
    g = model.graph
    constants = _constants(model, what)
    shapes, types = {}, {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        types[vi.name], dims = _shape(vi)
        if dims is not None:
            shapes[vi.name] = dims
    for name, arr in constants.items():
        shapes[name] = arr.shape
    inputs, input_types = [], {}
    for vi in g.input:
        elem, dims = _shape(vi)
        if vi.name in constants:  # IR < 4 lists initializers as inputs too (checked in _declared_initializers)
            continue
        if elem not in _INPUT_TYPES:
            raise OnnxImportError(f"{what}: graph input {vi.name!r} has element type "
                                  f"{onnx.TensorProto.DataType.Name(elem) if elem else 'unknown'}; supported: FLOAT, "
                                  "INT64, INT32 (token ids)")
        input_types[vi.name] = _INPUT_TYPES[elem]
        if dims is None or not dims or any(d is None for d in dims[1:]):
            raise OnnxImportError(f"{what}: graph input {vi.name!r} has shape {dims} (None = dynamic); sparkdl "
                                  "supports a dynamic batch axis 0 only: every other dimension must be fixed "
                                  "(export with dynamic_axes={name: {0: 'N'}} only)")
        inputs.append(vi.name)
        shapes[vi.name] = (None,) + dims[1:]
    nodes = []
    for n in g.node:
        if n.op_type == "Identity" and n.input[0] in constants:
            # torch.onnx deduplicates equal initializers into Identity nodes: each copy is its own tensor
            constants[n.output[0]] = constants[n.input[0]].copy()
            shapes[n.output[0]] = constants[n.output[0]].shape
        elif n.op_type != "Constant":
            nodes.append(n)
    return OnnxGraph(nodes=nodes, constants=constants, shapes=shapes, inputs=inputs,
                     outputs=[o.name for o in g.output], opset=opset,
                     initializers=frozenset(t.name for t in g.initializer), input_types=input_types,
                     types=types)
