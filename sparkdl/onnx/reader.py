"""Reading and validating an ONNX file: bytes -> checked ``ModelProto`` -> :class:`OnnxGraph` (plain data).

Everything here goes through the ``onnx`` package (protobuf parsing, ``onnx.checker``, shape inference,
``numpy_helper``); nothing is hand-parsed. Any failure becomes an :class:`OnnxImportError` that says what is
wrong with the file. Pickles (``torch.save`` files) are recognised by their first bytes and refused before
anything parses them, so no code in a file ever runs.

A model file is untrusted input. It opens nothing else unless the caller names the directory that holds its
external data (:mod:`sparkdl.onnx.external`): otherwise a tensor that keeps its data in an external file
(``data_location = EXTERNAL``), wherever it appears -- initializers, sparse initializers, ``Constant`` nodes and
every other tensor-valued node attribute, in the main graph, in subgraphs (``If``/``Loop`` bodies), in local
functions and in training-info graphs -- is refused before ``onnx.checker`` or any value is read (the checker
itself would look for the named file relative to the working directory). Its size is capped: the file at
``max_file_bytes``, and the constants the importer computes (constant folding, copies of initializers) at
``max_folded_elements`` elements in all, checked before each is computed (:meth:`OnnxGraph.reserve`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from sparkdl._extras import require_onnx
from sparkdl.io._format import ModelFormatError
from sparkdl.io.safetensors_io import refuse_pickle
from sparkdl.onnx.external import inline_external_data

__all__ = ["OnnxImportError", "OnnxGraph", "read_graph", "tensor_array", "MIN_OPSET", "MAX_OPSET",
           "MAX_FILE_BYTES", "MAX_FOLDED_ELEMENTS"]

#: Graph input element types (TensorProto codes) -> numpy dtypes: float features or integer token ids.
_INPUT_TYPES = {1: "float32", 7: "int64", 6: "int32"}

#: The ``ai.onnx`` opset versions whose semantics the importer was written against (inclusive).
MIN_OPSET, MAX_OPSET = 9, 22

#: Default cap on the size of a model file, in bytes: 2 GiB - 1, the most one protobuf message can hold.
MAX_FILE_BYTES = (2 << 30) - 1
#: Default cap on the elements of all constants computed at import (constant folding of shape arithmetic,
#: copies of deduplicated initializers): 2**27, 512 MiB of float32. Real exports fold a few small shape vectors.
MAX_FOLDED_ELEMENTS = 1 << 27


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
    every typed value's ONNX element type (TensorProto code); ``batch_size`` the static batch that every input
    keeps when the graph is read with ``fixed_batch=True`` (None: the batch axis is dynamic); ``declared_batch``
    each input's axis 0 as the file declares it (None = dynamic).
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
    max_folded_elements: int = MAX_FOLDED_ELEMENTS
    folded_elements: int = 0
    batch_size: int | None = None
    declared_batch: dict = None

    def reserve(self, elements: int, what: str) -> None:
        """Count ``elements`` more computed-constant elements against ``max_folded_elements`` *before* they
        are allocated; raise :class:`OnnxImportError` naming ``what`` when the total would exceed the cap."""
        if elements > self.max_folded_elements - self.folded_elements:
            raise OnnxImportError(f"{what}: computing this constant at import needs {elements:,} elements, over the "
                                  f"limit of {self.max_folded_elements:,} for all constants computed at import "
                                  f"({self.folded_elements:,} used); a file asking for this much is refused. "
                                  "Raise it with sparkdl.onnx.load(..., max_folded_elements=N) if you trust the file")
        self.folded_elements += int(elements)


def _too_large(what: str, size: int, max_file_bytes: int) -> OnnxImportError:
    return OnnxImportError(f"{what}: {size:,} bytes, over the limit of {max_file_bytes:,} bytes for a model file; "
                           "raise it with sparkdl.onnx.load(..., max_file_bytes=N) if you trust the file")


def _read_bytes(source, max_file_bytes: int) -> tuple[bytes, str]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if len(data) > max_file_bytes:
            raise _too_large("the given bytes", len(data), max_file_bytes)
        return data, "the given bytes"
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"sparkdl.onnx.load: no file at {path}")
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > max_file_bytes:
                raise _too_large(path, size, max_file_bytes)
            return f.read(max_file_bytes + 1), path
    raise TypeError(f"sparkdl.onnx.load: path_or_bytes must be a path or bytes, got {type(source).__name__}")


def _check_limit(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"sparkdl.onnx.load: {name} must be an int >= {minimum}, got {value!r}")
    return value


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


def _is_external(tensor) -> bool:
    return tensor.data_location == 1 or len(tensor.external_data) > 0  # TensorProto.EXTERNAL


def _sparse(sparse, where: str):
    yield sparse.values, where + " (values)"
    yield sparse.indices, where + " (indices)"


def _node_tensors(nodes, where: str):
    """Every tensor in the attributes of ``nodes``, recursing into subgraphs, with where it sits."""
    for node in nodes:
        at = f"{where}node {node.name or node.op_type!r} ({node.op_type})"
        for a in node.attribute:
            here = f"{at}, attribute {a.name!r}"
            if a.HasField("t"):
                yield a.t, here
            for t in a.tensors:
                yield t, here
            if a.HasField("sparse_tensor"):
                yield from _sparse(a.sparse_tensor, here)
            for sp in a.sparse_tensors:
                yield from _sparse(sp, here)
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _graph_tensors(g, f"{here}, subgraph {g.name!r}: ")


def _graph_tensors(graph, where: str = ""):
    for t in graph.initializer:
        yield t, f"{where}initializer {t.name!r}"
    for sp in graph.sparse_initializer:
        yield from _sparse(sp, f"{where}sparse initializer {sp.values.name!r}")
    yield from _node_tensors(graph.node, where)


def _model_tensors(model):
    """Every ``TensorProto`` a model holds: graph, local functions, training-info graphs."""
    yield from _graph_tensors(model.graph)
    for f in model.functions:
        yield from _node_tensors(f.node, f"function {f.name!r}: ")
    for i, info in enumerate(model.training_info):
        for role in ("initialization", "algorithm"):
            if info.HasField(role):
                yield from _graph_tensors(getattr(info, role), f"training_info[{i}].{role}: ")


def _refuse_external_data(model, what: str) -> None:
    """Refuse a model any of whose tensors keeps its data in an external file (before anything reads one)."""
    for tensor, where in _model_tensors(model):
        if _is_external(tensor):
            raise OnnxImportError(f"{what}: {where} keeps its data in an external file; sparkdl opens no other "
                                  "file unless told where: pass sparkdl.onnx.load(..., external_data_dir=DIR) "
                                  "with the directory you trust to hold the data (PyTorch's dynamo exporter "
                                  "writes it beside the .onnx file), or export with external_data=False")


def tensor_array(tensor, what: str):
    """``numpy_helper.to_array`` of a ``TensorProto`` that holds its own data (external data refused)."""
    if _is_external(tensor):
        raise OnnxImportError(f"{what}: tensor {tensor.name!r} keeps its data in an external file; sparkdl "
                              "reads self-contained models only")
    from onnx import numpy_helper
    return numpy_helper.to_array(tensor)


def _check(model, what: str):
    onnx = require_onnx()
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


#: ``Constant`` attributes other than a ``value`` tensor -> the numpy dtype of their value (the dynamo exporter
#: writes shapes and axes as ``value_ints``).
_CONSTANT_LISTS = {"value_float": "float32", "value_floats": "float32", "value_int": "int64", "value_ints": "int64"}


def _constant_value(node, what: str):
    from onnx import helper
    attrs = {a.name: a for a in node.attribute}
    if len(attrs) != 1 or not set(attrs) <= {"value", *_CONSTANT_LISTS}:
        raise OnnxImportError(f"{what}: node {node.name!r} (Constant) uses attributes {sorted(attrs)}; supported: "
                              f"one of 'value' (a tensor), {', '.join(repr(k) for k in _CONSTANT_LISTS)}")
    (name, attr), = attrs.items()
    if name == "value":
        return tensor_array(helper.get_attribute_value(attr), what)
    return np.asarray(helper.get_attribute_value(attr), _CONSTANT_LISTS[name])


def _constants(model, what: str) -> dict:
    out = {}
    try:
        for t in model.graph.initializer:
            out[t.name] = tensor_array(t, what)
        for node in model.graph.node:
            if node.op_type == "Constant":
                out[node.output[0]] = _constant_value(node, what)
    except OnnxImportError:
        raise
    except Exception as e:  # raw data of the wrong length, unknown data types, ...
        raise OnnxImportError(f"{what}: unreadable tensor data: {type(e).__name__}: {e}") from None
    return out


def _static_batch(sizes: dict, what: str) -> int:
    """The one static size of every input's axis 0 (OnnxImportError when they differ or one is dynamic)."""
    if not sizes or None in sizes.values() or len(set(sizes.values())) != 1:
        raise OnnxImportError(f"{what}: the inputs' batch sizes {sizes} (None = dynamic) are not one static size")
    return int(next(iter(sizes.values())))


def read_graph(source, *, max_file_bytes: int = MAX_FILE_BYTES,
               max_folded_elements: int = MAX_FOLDED_ELEMENTS, external_data_dir=None,
               fixed_batch: bool = False) -> OnnxGraph:
    """Parse, check and shape-infer an ONNX model from a path or bytes.

    Parameters
    ----------
    source : str, os.PathLike or bytes
    max_file_bytes : int, default :data:`MAX_FILE_BYTES`
        Larger files are refused before they are read.
    max_folded_elements : int, default :data:`MAX_FOLDED_ELEMENTS`
        Cap on the elements of all constants computed at import (kept in the returned graph).
    external_data_dir : str or os.PathLike, optional
        The directory trusted to hold external tensor data (:mod:`sparkdl.onnx.external`); without it, a
        tensor with external data is refused.
    fixed_batch : bool, default False
        Keep the inputs' axis 0 as the file declares it (every input the same static size, stored as
        ``batch_size``) instead of making it the dynamic batch axis: for exports whose shape arithmetic was
        folded into constants at one batch size.

    Raises
    ------
    FileNotFoundError
        If a path does not exist.
    TypeError
        If ``source`` is neither a path nor bytes.
    ValueError
        If a limit is not a positive int.
    OnnxImportError
        If the file is over ``max_file_bytes``, the bytes are a pickle, not ONNX, invalid per ``onnx.checker``,
        of an unsupported opset, keep any tensor's data externally, or declare an input that is not float32, int64 or int32 with static per-sample
        dimensions, or an initializer whose declared input shape differs from its data.
    """
    onnx = require_onnx()
    _check_limit("max_file_bytes", max_file_bytes, 1)
    _check_limit("max_folded_elements", max_folded_elements, 0)
    data, what = _read_bytes(source, max_file_bytes)
    model = _parse(data, what)
    if external_data_dir is not None:
        inline_external_data(_model_tensors(model), external_data_dir, max_file_bytes - len(data), what,
                             OnnxImportError)
    _refuse_external_data(model, what)
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
    inputs, input_types, declared = [], {}, {}
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
        declared[vi.name] = dims[0]
        shapes[vi.name] = dims if fixed_batch else (None,) + dims[1:]
    batch_size = _static_batch(declared, what) if fixed_batch else None
    graph = OnnxGraph(nodes=[], constants=constants, shapes=shapes, inputs=inputs,
                      outputs=[o.name for o in g.output], opset=opset,
                      initializers=frozenset(t.name for t in g.initializer), input_types=input_types,
                      types=types, max_folded_elements=max_folded_elements, batch_size=batch_size,
                      declared_batch=declared)
    for n in g.node:
        if n.op_type == "Identity" and n.input[0] in constants:
            # torch.onnx deduplicates equal initializers into Identity nodes: each copy is its own tensor
            graph.reserve(constants[n.input[0]].size, f"{what}: node {n.name!r} (Identity)")
            constants[n.output[0]] = constants[n.input[0]].copy()
            shapes[n.output[0]] = constants[n.output[0]].shape
        elif n.op_type != "Constant":
            graph.nodes.append(n)
    return graph
