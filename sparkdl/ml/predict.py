"""Batched inference as an Arrow UDF: the executor side of ``transform``, and the same computation on numpy arrays.

Spark evaluates the UDF next to the rows it belongs to, so every input column is preserved and every row gets
its own prediction whatever the partitioning or caching of the input, in batch and in streaming queries. Each
Python worker deserializes the broadcast network once and keeps it across tasks and ``transform`` calls
(:class:`sparkdl.engine.broadcast.CloudBroadcast`); the forward pass runs in float32 over whole Arrow batches
(``spark.sql.execution.arrow.maxRecordsPerBatch`` rows, 1,024 in sessions sparkdl creates, in chunks of
``inferenceBatchSize``; a forward pass never spans two Arrow batches), while a background thread reads the next
batch (:func:`sparkdl.engine.worker.read_ahead`; unless pyspark 4.3's own ``spark.python.udf.pipelined.enabled``
does, for every UDF of the session). Vector and array features arrive packed as float32 bytes by the
JVM bridge when it is loaded (:mod:`sparkdl.ml.packing`).
"""
from typing import Iterator, Tuple

import numpy as np
import pyarrow as pa

from sparkdl.ml.arrow import FeatureSpec, decode_features, dense_vectors, doubles

__all__ = ["predict_column", "predict_batches", "predict_arrays", "encode_outputs", "invalid_row_message"]


def invalid_row_message(stage, spec: FeatureSpec, row: str) -> str:
    """The error for an invalid feature row (``row`` describes it; the JVM bridge fills in ``{row}``)."""
    need = (f"{spec.input_shape[0]}x{spec.input_shape[1]}x{spec.input_shape[2]} (CxHxW) 8-bit images"
            if spec.kind == "image" else f"{spec.size} finite values per row")
    if spec.kind == "tokens":
        need = f"token ids in [0, {spec.vocab_size})" if spec.vocab_size else "token ids >= 0"
    return (f"{stage}: invalid features in column(s) {list(spec.columns)}: null, NaN/infinite, or not {need}; "
            f"row {row}. Set handleInvalid='skip' to drop such rows or 'keep' to output NaN for them.")


def _shown(spec: FeatureSpec, arrays, row: int) -> str:
    r = repr({c: a[row].as_py() for c, a in zip(spec.columns, arrays)})
    return r if len(r) <= 300 else r[:296] + "...}"


def _width(model, sample_shape) -> int:
    return int(np.prod(model(np.zeros((1, *sample_shape), model.dtype)).shape[1:]))


def predict_arrays(model, x: np.ndarray, ok: np.ndarray, batch_size: int, post, fields) -> list:
    """Outputs ``post(out, fields)`` for the rows of ``x`` (shape ``(n, *sample_shape)``); rows where ``ok`` is
    False get NaN network outputs. Returns numpy arrays, one per field ((n,) or (n, k), float64)."""
    from sparkdl.engine.inference import forward_in_batches
    n = len(x)
    if ok.all() and n:
        out = forward_in_batches(model, x, batch_size).reshape(n, -1).astype(np.float64)
    else:
        width = _width(model, x.shape[1:])
        out = np.full((n, width), np.nan, np.float64)
        if ok.any():
            out[ok] = forward_in_batches(model, np.ascontiguousarray(x[ok]), batch_size).reshape(-1, width)
    return post(out, fields)


def encode_outputs(outputs, fields) -> pa.StructArray:
    """The UDF's result for one batch: a struct of ``fields``, a double per (n,) output and a dense Vector per
    (n, k) output."""
    return pa.StructArray.from_arrays([doubles(o) if o.ndim == 1 else dense_vectors(o) for o in outputs],
                                      names=list(fields))


def predict_batches(model, spec: FeatureSpec, batch_size: int, handle: str, fields, post, stage: str, batches):
    """Yield one struct array of outputs per Arrow batch (``batches`` yields arrays or tuples of arrays).

    Invalid rows raise ``ValueError`` (``handle`` 'error' or 'skip'; 'skip' has filtered them in SQL already)
    or get NaN outputs ('keep').
    """
    for arrays in batches:
        if not isinstance(arrays, (tuple, list)):
            arrays = (arrays,)
        x, ok = decode_features(spec, arrays)
        if not ok.all() and handle != "keep":
            bad = int(np.argmin(ok))
            shown = "null" if spec.packed else _shown(spec, arrays, bad)
            raise ValueError(invalid_row_message(stage, spec, shown))
        yield encode_outputs(predict_arrays(model, x, ok, batch_size, post, fields), fields)


def _run(bc, spec, batch_size, handle, fields, post, stage, batches):
    from sparkdl.engine.worker import freeze_worker_heap, read_ahead, task_scope
    with task_scope():  # threads and allocator settings for this task only
        model = bc.value
        freeze_worker_heap()  # pyspark collects garbage after every task: keep that cheap
        yield from predict_batches(model, spec, batch_size, handle, fields, post, stage, read_ahead(batches))


def predict_column(bc, spec: FeatureSpec, batch_size: int, handle: str, fields, post, return_type, stage: str):
    """An Arrow UDF (scalar iterator) computing ``return_type`` (a struct of ``fields``) from the feature
    column(s) of ``spec``, with the network taken from the broadcast ``bc``."""
    from pyspark.sql.functions import arrow_udf
    fields = list(fields)
    if len(spec.columns) == 1:
        def predict(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
            return _run(bc, spec, batch_size, handle, fields, post, stage, batches)
    else:
        def predict(batches: Iterator[Tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
            return _run(bc, spec, batch_size, handle, fields, post, stage, batches)
    return arrow_udf(predict, return_type)
