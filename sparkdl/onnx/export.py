"""ONNX export: :func:`save` writes a sparkdl module as a checker-validated ``.onnx`` file, self-contained up to
:data:`EXTERNAL_DATA_BYTES` of weights, with its weights in a second file beside it above that.

The module tree is walked with :data:`sparkdl.onnx.export_ops.EXPORTERS` (one function per module class);
shapes (and the shape tensors an imported graph computes) are found by running each module once on an example
batch of one zero sample. Node names are ``/<module path>/<Op>`` and initializers ``<module path>.<tensor>``
(the ``state_dict`` key), as ``torch.onnx.export`` writes them, so :func:`sparkdl.onnx.load` of an exported
file rebuilds the same parameter names.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

from sparkdl._extras import require_onnx
from sparkdl.chunking import MAX_CHUNK_BYTES
from sparkdl.nn.module import Module

__all__ = ["save", "EXPORT_OPSET", "EXTERNAL_DATA_BYTES"]

#: The ai.onnx opset that :func:`save` writes (20: the first with a native ``Gelu``).
EXPORT_OPSET = 20

#: Weights above this many bytes in all are written to a data file beside the model by default (ONNX's external
#: data): a protobuf message, so an ``.onnx`` file holding its weights, cannot exceed 2 GiB
#: (:data:`MAX_PROTO_BYTES`). The default, 1 GiB, is :data:`sparkdl.chunking.MAX_CHUNK_BYTES`.
EXTERNAL_DATA_BYTES = MAX_CHUNK_BYTES

#: protobuf's limit on one serialized message (2 GiB - 1).
MAX_PROTO_BYTES = (1 << 31) - 1


class Emitter:
    """Collects nodes and initializers while the module tree is walked (plain data until :meth:`model`)."""

    def __init__(self, opset: int):
        self.opset = opset
        self.nodes: list[dict] = []
        self.initializers: dict[str, np.ndarray] = {}
        self.dtypes: dict[str, np.dtype] = {}  # values that are not float (integer graph inputs)
        self.examples: dict[str, np.ndarray] = {}  # module outputs on the example batch (one zero sample)
        self._values: set = set()

    def tensor(self, name: str, array) -> str:
        """Add an initializer (float arrays as float32, integer arrays as int64, booleans as bool); returns its
        name."""
        a = np.asarray(array)
        a = a.astype(np.int64) if a.dtype.kind in "iu" else a if a.dtype.kind == "b" else a.astype(np.float32)
        base, k = name, 1
        while name in self.initializers:
            name, k = f"{base}_{k}", k + 1
        self.initializers[name] = a
        return name

    def node(self, op_type: str, inputs, path: str, num_outputs: int = 1, **attrs):
        """Add a node named ``/<path>/<op_type>``; returns the name of its output value (a list of
        ``num_outputs`` names if that is not 1)."""
        name = f"/{path}/{op_type}" if path else f"/{op_type}"
        base, k = name, 1
        while f"{name}_output_0" in self._values:
            name, k = f"{base}_{k}", k + 1
        outs = [f"{name}_output_{i}" for i in range(num_outputs)]
        self._values.update(outs)
        self.nodes.append({"op_type": op_type, "inputs": list(inputs), "outputs": outs, "name": name,
                           "attrs": attrs})
        return outs[0] if num_outputs == 1 else outs

    def model(self, inputs: list[tuple[str, tuple]], outputs: list[str], output_names: list[str],
              output_shapes: list[tuple], batch: int | None = None):
        """The ``ModelProto``: inputs get a dynamic batch axis ``N`` (or the static ``batch``); output values are
        renamed."""
        onnx = require_onnx()
        from onnx import helper, numpy_helper
        produced = {o for n in self.nodes for o in n["outputs"]}
        n_axis = "N" if batch is None else batch
        renamed = {}
        for value, new in zip(outputs, output_names):
            if value in produced and outputs.count(value) == 1:
                renamed[value] = new
            else:  # an input returned as is, or one value returned twice: a named copy
                self.nodes.append({"op_type": "Identity", "inputs": [value], "outputs": [new],
                                   "name": f"/{new}/Identity", "attrs": {}})
        for n in self.nodes:
            n["inputs"] = [renamed.get(i, i) for i in n["inputs"]]
            n["outputs"] = [renamed.get(o, o) for o in n["outputs"]]
        nodes = [helper.make_node(n["op_type"], n["inputs"], n["outputs"], name=n["name"], **n["attrs"])
                 for n in self.nodes]
        graph = helper.make_graph(
            nodes, "sparkdl",
            [helper.make_tensor_value_info(name, onnx.TensorProto.INT64 if name in self.dtypes else
                                           onnx.TensorProto.FLOAT, [n_axis, *shape]) for name, shape in inputs],
            [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [n_axis, *shape[1:]])
             for name, shape in zip(output_names, output_shapes)],
            [numpy_helper.from_array(a, name) for name, a in self.initializers.items()])
        opsets = [helper.make_opsetid("", self.opset)]
        return helper.make_model(graph, opset_imports=opsets, producer_name="sparkdl",
                                 ir_version=helper.find_min_ir_version_for(opsets))


def _shapes(model, input_shape) -> list[tuple]:
    from sparkdl.nn.graph import Graph
    count = len(model.input_names) if isinstance(model, Graph) else 1
    if isinstance(input_shape, (tuple, list)) and input_shape and all(isinstance(s, (tuple, list))
                                                                      for s in input_shape):
        shapes = [tuple(s) for s in input_shape]
    else:
        shapes = [tuple(input_shape)] if isinstance(input_shape, (tuple, list)) else None
    if shapes is None or len(shapes) != count or not all(
            all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0 for d in s) for s in shapes):
        raise ValueError(f"sparkdl.onnx.save: input_shape must be the per-sample shape (positive ints, no batch "
                         f"axis, e.g. (1, 28, 28)){' per input, as a list of ' + str(count) if count > 1 else ''}, "
                         f"got {input_shape!r}")
    return [tuple(int(d) for d in s) for s in shapes]


def save(model: Module, path, input_shape, *, opset: int = EXPORT_OPSET, external_data: bool | None = None) -> str:
    """Export ``model`` (evaluation mode) to an ONNX file at ``path``.

    Parameters
    ----------
    model : sparkdl.nn.Module
        Built from the exportable classes of :data:`sparkdl.onnx.export_ops.EXPORTERS` (every layer and
        container of :mod:`sparkdl.nn`; Dropout is exported as an inference Dropout, BatchNorm with its
        running statistics). float64 models are written as float32.
    path : str or os.PathLike
        Target file (written atomically: a temp file next to it, then renamed).
    input_shape : tuple of int, or list of tuples for a multi-input Graph
        Per-sample input shape without the batch axis, e.g. ``(1, 28, 28)``; the batch axis is dynamic (``N``),
        or static for a :class:`~sparkdl.nn.Graph` with a ``batch_size`` (an import of a static-shape export).
        An input read by an :class:`~sparkdl.nn.Embedding` is int64 token ids (e.g. ``(T,)``), any other
        float32.
    opset : int, default :data:`EXPORT_OPSET`
        ai.onnx opset written; 13 or higher (``GELU`` needs 20, ``LayerNorm`` 17).
    external_data : bool or None, default None
        Write the weights (every initializer of 1 KiB or more) to ``<file name>.data`` beside the model, as ONNX
        external data, instead of inside the ``.onnx`` file. None: when they exceed :data:`EXTERNAL_DATA_BYTES`
        in all. Read such a file back with ``sparkdl.onnx.load(path, external_data_dir=<its directory>)``;
        onnxruntime and ``onnx.load`` find the data file by themselves.

    Returns
    -------
    str
        The path written.

    Raises
    ------
    TypeError
        If ``model`` is not a Module, or contains a module class without an exporter (named, with its path).
    ValueError
        A malformed ``input_shape``, a shape the model does not accept, an opset out of range, a layer
        setting ONNX cannot express (named), a model that returns a recurrent layer's (output, state)
        pair instead of one array, ``external_data=False`` for weights over :data:`MAX_PROTO_BYTES`, or one
        weight tensor over :data:`MAX_PROTO_BYTES` (ONNX holds a tensor in one protobuf field before it is
        moved out).
    ImportError
        If the ``onnx`` package is missing (``pip install 'sparkdl[onnx]'``).

    Notes
    -----
    The file passes ``onnx.checker.check_model(full_check=True)``; onnxruntime reproduces ``model(x)`` to
    float32 rounding (tests check 1e-5). With external data both files are written under temporary names in the
    target directory and renamed into place, the data file first.
    """
    from sparkdl.nn.graph import Graph
    from sparkdl.onnx.export_ops import check_exportable, export_module, integer_inputs
    from sparkdl.onnx.reader import MAX_OPSET
    onnx = require_onnx()
    if not isinstance(model, Module):
        raise TypeError(f"sparkdl.onnx.save: model must be a sparkdl.nn.Module, got {type(model).__name__}")
    if isinstance(opset, bool) or not isinstance(opset, int) or not 13 <= opset <= MAX_OPSET:
        raise ValueError(f"sparkdl.onnx.save: opset must be an int in 13..{MAX_OPSET}, got {opset!r}")
    check_exportable(model)
    shapes = _shapes(model, input_shape)
    em = Emitter(opset)
    names = list(model.input_names) if isinstance(model, Graph) else ["input"]
    em.dtypes.update({n: np.dtype(np.int64) for n in integer_inputs(model, names)})
    batch = model.batch_size if isinstance(model, Graph) else None  # a graph of one fixed batch keeps it
    outs, out_shapes = export_module(model, "", names, [(batch or 1, *s) for s in shapes], em)
    if not all(isinstance(o, str) for o in outs):
        raise ValueError("sparkdl.onnx.save: the model returns a recurrent layer's (output, state) pair; end it "
                         "with nn.RNNOutput('last') or nn.RNNOutput('output') to export one array")
    out_names = (list(model.output_names) if isinstance(model, Graph) and len(model.output_names) > 1
                 else ["output"])
    if len(set(out_names)) != len(out_names) or set(out_names) & set(names):
        out_names = [f"output_{i}" for i in range(len(outs))]
    weight_bytes = sum(int(a.nbytes) for a in em.initializers.values())
    largest = max((int(a.nbytes) for a in em.initializers.values()), default=0)
    if largest > MAX_PROTO_BYTES:
        name = max(em.initializers, key=lambda k: em.initializers[k].nbytes)
        raise ValueError(f"sparkdl.onnx.save: the weight {name!r} holds {largest} bytes; ONNX builds every tensor as "
                         f"one protobuf field of at most {MAX_PROTO_BYTES} bytes")
    inline_limit = MAX_PROTO_BYTES - (1 << 20)  # room for the graph itself
    if external_data is None:
        external_data = weight_bytes > min(EXTERNAL_DATA_BYTES, inline_limit)
    elif not external_data and weight_bytes > inline_limit:
        raise ValueError(f"sparkdl.onnx.save: the weights hold {weight_bytes} bytes, over protobuf's {MAX_PROTO_BYTES}"
                         "-byte limit for one .onnx file; pass external_data=True (or None) to write them beside it")
    proto = em.model(list(zip(names, shapes)), outs, out_names, out_shapes, batch)
    path = os.fspath(path)
    if external_data:
        return _save_external(onnx, proto, path)
    onnx.checker.check_model(proto, full_check=True)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".onnx-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(proto.SerializeToString())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def _save_external(onnx, proto, path: str) -> str:
    """Write ``proto`` to ``path`` with its initializers in ``<file name>.data`` beside it (ONNX external data,
    :func:`onnx.save_model`), checked by ``onnx.checker`` from the files; both are written in a temporary
    directory next to ``path`` and renamed into place, the data first (the model file names it)."""
    directory = os.path.dirname(os.path.abspath(path))
    name = os.path.basename(path)
    data_name = name + ".data"
    tmpdir = tempfile.mkdtemp(prefix=".onnx-", dir=directory)
    try:
        tmp_model = os.path.join(tmpdir, name)
        onnx.save_model(proto, tmp_model, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=data_name, size_threshold=1024)
        onnx.checker.check_model(tmp_model, full_check=True)
        for f in (data_name, name):
            with open(os.path.join(tmpdir, f), "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(os.path.join(tmpdir, data_name), os.path.join(directory, data_name))
        os.replace(tmp_model, os.path.join(directory, name))
    finally:
        for f in os.listdir(tmpdir):
            os.remove(os.path.join(tmpdir, f))
        os.rmdir(tmpdir)
    return path
