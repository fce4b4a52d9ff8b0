"""Model exchange through ONNX: :func:`load` an ONNX file as a sparkdl module, :func:`save` one as ONNX.

Import covers the operators that map onto sparkdl's layers (:func:`supported_ops`; ai.onnx opsets
:data:`MIN_OPSET`..:data:`MAX_OPSET`), as both of PyTorch's exporters write them (``dynamo=True`` and
``dynamo=False``): Gemm, MatMul(+Add), Conv, ConvTranspose, pooling, BatchNormalization,
InstanceNormalization (and PyTorch's GroupNorm pattern), Resize (nearest, bilinear), activations (Clip as
ReLU6/Hardtanh, HardSigmoid, HardSwish, PRelu, Softplus, Sigmoid and SiLU as ``x * Sigmoid(x)``, ...),
Flatten, Reshape, Dropout, Identity, Add, Concat, and the sequence layers -- Gather of a weight table
(Embedding), LSTM, GRU (``linear_before_reset=1``, PyTorch's cell), RNN (tanh/relu), LayerNormalization.
What no layer expresses -- the attention arithmetic of an exported MultiheadAttention or
TransformerEncoderLayer (MatMul of two activations, Transpose, Softmax over any axis, Mul/Div/Add/Sub by
constants, Where, ...), the glue around recurrent nodes and the shape arithmetic of a dynamic batch (Shape,
Gather, Slice, Concat, Unsqueeze, Squeeze, Expand, ConstantOfShape, Cast, CastLike, ...), reductions, Split,
Pad, Sum/Min/Max, Erf, Einsum, LRN -- imports as generic
:class:`~sparkdl.nn.OnnxOp` nodes (numpy on whole arrays, with backward). A chain becomes a
:class:`~sparkdl.nn.Sequential`, anything else a :class:`~sparkdl.nn.Graph`; initializers become parameters
and buffers named like the exporting model's PyTorch ``state_dict``. Graph inputs are float32, or int64/int32
token ids. The imported module is an ordinary sparkdl module: it trains with
:class:`sparkdl.engine.DistributedTrainer` or :class:`sparkdl.ml.DLClassifier` and saves with
:func:`sparkdl.io.save_model`. Every bad file raises :class:`OnnxImportError`.

Export (:func:`save`, opset :data:`EXPORT_OPSET`) writes the module classes of
:data:`sparkdl.onnx.export_ops.EXPORTERS`: the layers above as their native operators (Embedding as Gather,
LSTM/GRU/RNN one node per layer, LayerNorm as LayerNormalization, RNNOutput as Slice/Transpose/Reshape), and
MultiheadAttention and TransformerEncoderLayer as primitives (MatMul, Softmax, ...), and the generic nodes of
imported graphs as the operators they came from, so an imported network exports again after fine-tuning.

Needs the optional dependencies ``pip install 'sparkdl[onnx]'`` (the ``onnx`` package).
"""
from sparkdl.onnx import export_activation as _export_activation  # noqa: F401  (registers the exporters)
from sparkdl.onnx import export_generic as _export_generic  # noqa: F401  (registers the OnnxOp exporter)
from sparkdl.onnx import export_sequence as _export_sequence  # noqa: F401  (registers the sequence exporters)
from sparkdl.onnx import export_spatial as _export_spatial  # noqa: F401  (registers the image-layer exporters)
from sparkdl.onnx.builder import build as _build
from sparkdl.onnx.converters import supported_ops
from sparkdl.onnx.export import EXPORT_OPSET, save
from sparkdl.onnx.reader import (MAX_FILE_BYTES, MAX_FOLDED_ELEMENTS, MAX_OPSET, MIN_OPSET, OnnxImportError,
                                 read_graph)

__all__ = ["load", "save", "supported_ops", "OnnxImportError", "MIN_OPSET", "MAX_OPSET", "EXPORT_OPSET",
           "MAX_FILE_BYTES", "MAX_FOLDED_ELEMENTS"]


def _declares_static_batch(graph) -> bool:
    """Whether the file declares every input's axis 0 with one static size (then its shape arithmetic may be
    folded at that size)."""
    dims = {graph.declared_batch.get(name) for name in graph.inputs}
    return len(dims) == 1 and None not in dims


def load(path_or_bytes, *, max_file_bytes: int = MAX_FILE_BYTES, max_folded_elements: int = MAX_FOLDED_ELEMENTS,
         external_data_dir=None):
    """Import an ONNX model as a float32 sparkdl module (evaluation-ready; train it like any module).

    Parameters
    ----------
    path_or_bytes : str, os.PathLike or bytes
        An ``.onnx`` file or its contents.
    max_file_bytes : int, default :data:`MAX_FILE_BYTES` (2 GiB - 1, protobuf's own limit)
        Larger files are refused before they are read.
    max_folded_elements : int, default :data:`MAX_FOLDED_ELEMENTS` (2**27)
        Cap on the total elements of the constants the importer computes (constant folding of the exporter's
        shape arithmetic, copies of deduplicated initializers); each is checked before it is allocated, so a
        small file cannot ask for gigabytes.
    external_data_dir : str or os.PathLike, optional
        The directory you trust to hold the model's external tensor data (``torch.onnx.export`` with the dynamo
        exporter writes the weights to ``<file>.onnx.data`` beside the model by default): only files inside it
        are read, within ``max_file_bytes`` in all (:mod:`sparkdl.onnx.external`). Without it, such a model is
        refused and no other file is opened.

    Returns
    -------
    sparkdl.nn.Module
        :class:`~sparkdl.nn.Sequential` for a chain whose layers are named 0, 1, ... (a ``torch.nn.Sequential``
        export), else :class:`~sparkdl.nn.Graph` with the file's inputs and outputs. BatchNorm layers carry
        the file's running statistics (momentum ``1 - onnx momentum``).

    Raises
    ------
    FileNotFoundError
        If the path does not exist.
    TypeError
        If ``path_or_bytes`` is neither a path nor bytes.
    ValueError
        If a limit is not a positive int.
    ImportError
        If the ``onnx`` package is missing (``pip install 'sparkdl[onnx]'``).
    OnnxImportError
        For any file that cannot be imported, before anything is built: a pickle (``.pt``/``.pth``, never
        loaded), truncated or invalid bytes, a tensor anywhere in the file that keeps its data in an external file
        without ``external_data_dir`` (no other file is opened) or whose data lie outside that directory, a
        file or computed constants over the limits, running out of memory, an opset outside
        ``MIN_OPSET..MAX_OPSET``, an unsupported
        operator or attribute (each named, with what is supported), a dynamic non-batch dimension, or an
        initializer whose shape does not fit the graph.

    Warns
    -----
    UserWarning
        An initializer used by several nodes (the dynamo exporter's optimizer merges equal tensors, e.g. fresh
        LayerNorm weights; a model with tied weights): each use imports as its own copy, exact in evaluation;
        in training the copies learn independently.

    Notes
    -----
    The batch axis (axis 0 of every input) is dynamic: the module takes any number of rows. A file exported
    with static shapes whose shape arithmetic the exporter folded into constants at its batch size (PyTorch's
    attention reshapes to ``(L, N * heads, d)``) cannot be made batch-free; it imports as a
    :class:`~sparkdl.nn.Graph` with ``batch_size`` set to that size, which evaluates any number of rows in
    chunks of ``batch_size`` but trains on exactly ``batch_size`` rows (export with a dynamic batch axis,
    ``torch.onnx.export(..., dynamic_shapes=...)``, to train at other sizes).

    References
    ----------
    ONNX IR and operator specifications, https://onnx.ai/onnx/; BigDL ``Module.loadTF``/``loadCaffe``.
    """
    limits = dict(max_file_bytes=max_file_bytes, max_folded_elements=max_folded_elements,
                  external_data_dir=external_data_dir)
    try:
        graph = read_graph(path_or_bytes, **limits)
        try:
            return _build(graph)
        except OnnxImportError as dynamic:
            if not _declares_static_batch(graph):
                raise
            try:  # the exporter folded the batch into constants: import the graph at that batch size
                return _build(read_graph(path_or_bytes, fixed_batch=True, **limits))
            except OnnxImportError:
                raise dynamic from None
    except MemoryError:
        raise OnnxImportError("out of memory while importing the model; a file this large needs more memory (or "
                              "lower max_folded_elements to refuse such files early)") from None
