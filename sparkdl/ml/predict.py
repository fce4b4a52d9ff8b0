"""Batched inference as an Arrow UDF: the executor side of ``transform``.

Spark evaluates the UDF next to the rows it belongs to, so every input column is preserved and every row gets
its own prediction whatever the partitioning or caching of the input. Each Python worker deserializes the
broadcast network once (:class:`sparkdl.engine.broadcast.CloudBroadcast`) and runs the forward pass over whole
Arrow batches (``spark.sql.execution.arrow.maxRecordsPerBatch`` rows, in chunks of ``inferenceBatchSize``).
"""
from typing import Iterator, Tuple

import numpy as np
import pyarrow as pa

from sparkdl.ml.arrow import FeatureSpec, decode_features

__all__ = ["predict_column", "predict_batches"]


def _invalid_row_message(stage, spec: FeatureSpec, arrays, row: int) -> str:
    value = {c: a[row].as_py() for c, a in zip(spec.columns, arrays)}
    r = repr(value)
    r = r if len(r) <= 300 else r[:296] + "...}"
    need = (f"{spec.input_shape[0]}x{spec.input_shape[1]}x{spec.input_shape[2]} (CxHxW) 8-bit images"
            if spec.kind == "image" else f"{spec.size} finite values per row")
    if spec.kind == "tokens":
        need = f"token ids in [0, {spec.vocab_size})" if spec.vocab_size else "token ids >= 0"
    return (f"{stage}: invalid features in column(s) {list(spec.columns)}: null, NaN/infinite, or not {need}; "
            f"row {r}. Set handleInvalid='skip' to drop such rows or 'keep' to output NaN for them.")


def predict_batches(model, spec: FeatureSpec, batch_size: int, handle: str, fields, post, stage: str, batches):
    """Yield one struct array of outputs per Arrow batch (``batches`` yields arrays or tuples of arrays).

    Invalid rows raise ``ValueError`` (``handle`` 'error' or 'skip'; 'skip' has filtered them in SQL already)
    or get NaN outputs ('keep').
    """
    from sparkdl.engine.inference import forward_in_batches
    width = None
    for arrays in batches:
        if not isinstance(arrays, (tuple, list)):
            arrays = (arrays,)
        x, ok = decode_features(spec, arrays)
        n = len(x)
        if not ok.all() and handle != "keep":
            raise ValueError(_invalid_row_message(stage, spec, arrays, int(np.argmin(ok))))
        if width is None:
            width = int(np.prod(model(np.zeros((1, *spec.sample_shape), model.dtype)).shape[1:]))
        out = np.full((n, width), np.nan, np.float64)
        if ok.all() and n:
            out[...] = forward_in_batches(model, x, batch_size).reshape(n, width)
        elif ok.any():
            out[ok] = forward_in_batches(model, np.ascontiguousarray(x[ok]), batch_size).reshape(-1, width)
        yield pa.StructArray.from_arrays(post(out, fields), names=list(fields))


def _run(bc, spec, batch_size, handle, fields, post, stage, batches):
    from sparkdl.engine.worker import set_task_threads
    set_task_threads()
    yield from predict_batches(bc.value, spec, batch_size, handle, fields, post, stage, batches)


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
