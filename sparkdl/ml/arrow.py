"""Arrow columns <-> numpy blocks, vectorised: the executor side of the DataFrame data path.

Spark hands Python code Arrow record batches (``DataFrame.mapInArrow`` for training data, an Arrow UDF for
``transform``); this module turns one batch's feature column(s) into a float32 block of shape
``(n, *input_shape)`` plus a per-row validity mask, and model outputs back into Arrow arrays, without a
per-row Python object anywhere. Supported feature columns (see :class:`FeatureSpec`):

============  ================================================  ==========================================
kind          Spark type                                        one row becomes
============  ================================================  ==========================================
``vector``    ``pyspark.ml.linalg.VectorUDT`` (dense, sparse)   ``(size,)``
``array``     ``array<float|double|int|...>``                   ``(length,)``
``scalar``    one or more numeric columns (``featuresCols``)     ``(number of columns,)``
``image``     Spark's image struct (``spark.read.format("image")``)  ``(nChannels, height, width)``, values
                                                                0-255, channels in the stored (BGR) order
``tokens``    ``array<int|long>`` of any length, for a network   ``(T,)`` ids padded/truncated to T (see
              that starts with ``SequenceLengths``              :mod:`sparkdl.ml.tokens`)
============  ================================================  ==========================================

A VectorUDT arrives in Arrow as its SQL struct ``<type: int8, size: int32, indices: list<int32>,
values: list<double>>`` (``type`` 1 = dense, 0 = sparse). Rows that are null, have the wrong size, or
contain NaN/inf are marked invalid (their block rows are NaN); callers decide what that means.

The fast path (``FeatureSpec.packed``, see :mod:`sparkdl.ml.packing`): the JVM bridge has already turned a vector or
array column into one ``binary`` value per row holding its values as float32 (little endian), null for invalid rows;
a batch of those is one contiguous buffer, viewed here as an ``(n, size)`` float32 array without per-element work.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparkdl.engine.connect_data import npy_bytes, npy_load
from sparkdl.ml.tokens import decode_tokens

__all__ = ["FeatureSpec", "decode_features", "decode_labels", "dense_vectors", "doubles", "npy_bytes", "npy_load",
           "IMAGE_MODES", "VECTOR_TYPE"]

#: OpenCV 8-bit image modes that Spark's image source produces: CV_8UC1, CV_8UC3, CV_8UC4.
IMAGE_MODES = (0, 16, 24)


@dataclass(frozen=True)
class FeatureSpec:
    """How to read the features of one row.

    Attributes
    ----------
    kind : {'vector', 'array', 'scalar', 'image', 'tokens'}
    columns : tuple of str
        One column, or the ``featuresCols`` for kind ``'scalar'``.
    input_shape : tuple of int
        Per-row shape as read: ``(size,)``, or ``(C, H, W)`` for images.
    sample_shape : tuple of int
        Per-row shape the network receives (``featureShape``; same number of elements).
    padding_value, vocab_size, per_batch
        Kind ``'tokens'`` only: the filler of padded positions, the number of valid ids (None: unchecked) and
        whether each batch is padded to its own longest row (at most ``input_shape[0]``).
    packed : bool
        The (vector or array) column arrives packed by the JVM bridge as float32 bytes per row.
    """

    kind: str
    columns: tuple
    input_shape: tuple
    sample_shape: tuple
    padding_value: int = -1
    vocab_size: int | None = None
    per_batch: bool = False
    packed: bool = False

    @property
    def size(self) -> int:
        return int(np.prod(self.input_shape))


def _list_parts(arr: pa.Array):
    """Offsets (absolute into ``values``) and the flat values of a (possibly sliced) list array."""
    offsets = arr.offsets.to_numpy()
    return offsets, arr.values


def _as_float(values: pa.Array, lo: int, hi: int) -> np.ndarray:
    """``values[lo:hi]`` as float64, nulls as NaN."""
    part = values.slice(lo, hi - lo)
    return part.to_numpy(zero_copy_only=False).astype(np.float64, copy=False) if part.null_count else \
        np.asarray(part.to_numpy(zero_copy_only=False), dtype=np.float64)


def _from_lists(n: int, offsets: np.ndarray, flat: np.ndarray, size: int, row_ok: np.ndarray) -> tuple:
    """Rows of equal length ``size`` from list offsets; other rows invalid."""
    lengths = np.diff(offsets)
    ok = row_ok & (lengths == size)
    out = np.full((n, size), np.nan, np.float32)
    if ok.all():
        out[...] = flat.reshape(n, size)
    elif ok.any():
        start = offsets[:-1] - offsets[0]
        idx = start[ok, None] + np.arange(size)
        out[ok] = flat[idx]
    return out, ok


def _vectors(arr: pa.StructArray, size: int) -> tuple:
    n = len(arr)
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)
    type_, size_, indices, values = arr.flatten()
    types = type_.fill_null(1).to_numpy(zero_copy_only=False)
    voff, vvals = _list_parts(values)
    flat = _as_float(vvals, int(voff[0]), int(voff[-1]))
    dense = types == 1
    if dense.all():
        return _from_lists(n, voff, flat, size, valid)
    sizes = size_.fill_null(-1).to_numpy(zero_copy_only=False)
    lengths = np.diff(voff)
    ok = valid & np.where(dense, lengths == size, sizes == size)
    out = np.zeros((n, size), np.float32)
    row = np.repeat(np.arange(n), lengths)
    col = np.arange(len(flat)) - np.repeat(voff[:-1] - voff[0], lengths)
    sparse_val = ~np.repeat(dense, lengths)
    ioff, ivals = _list_parts(indices)
    col[sparse_val] = ivals.slice(int(ioff[0]), int(ioff[-1] - ioff[0])).to_numpy(zero_copy_only=False)
    keep = np.repeat(ok, lengths) & (col >= 0) & (col < size)
    out[row[keep], col[keep]] = flat[keep]
    out[~ok] = np.nan
    return out, ok


def _arrays(arr: pa.ListArray, size: int) -> tuple:
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)
    offsets, values = _list_parts(arr)
    flat = _as_float(values, int(offsets[0]), int(offsets[-1]))
    return _from_lists(len(arr), offsets, flat, size, valid)


def _packed(arr: pa.Array, size: int) -> tuple:
    """Rows packed as float32 bytes (``4 * size`` each; null = invalid) viewed as ``(n, size)`` float32."""
    n = len(arr)
    ok = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool) if arr.null_count else np.ones(n, bool)
    _, offsets_buf, data = arr.buffers()
    width = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    offsets = np.frombuffer(offsets_buf, width, n + 1, arr.offset * np.dtype(width).itemsize)
    lo, hi = int(offsets[0]), int(offsets[-1])
    if hi - lo != 4 * size * int(ok.sum()) or (n and not (np.diff(offsets)[ok] == 4 * size).all()):
        raise ValueError(f"packed feature rows must hold {4 * size} bytes each (float32 x {size})")
    flat = np.frombuffer(data, np.float32, (hi - lo) // 4, lo) if hi > lo else np.zeros(0, np.float32)
    if ok.all():
        return flat.reshape(n, size), ok
    out = np.full((n, size), np.nan, np.float32)
    out[ok] = flat.reshape(-1, size)
    return out, ok


def _scalars(arrays, size: int) -> tuple:
    if len(arrays) != size:
        raise ValueError(f"expected {size} feature columns, got {len(arrays)}")
    out = np.empty((len(arrays[0]), size), np.float32)
    for j, a in enumerate(arrays):
        out[:, j] = a.to_numpy(zero_copy_only=False)
    return out, np.ones(len(out), bool)


def _images(arr: pa.StructArray, shape: tuple) -> tuple:
    c, h, w = shape
    n = len(arr)
    fields = dict(zip([f.name for f in arr.type], arr.flatten()))
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)
    dims = [fields[k].fill_null(-1).to_numpy(zero_copy_only=False) for k in ("nChannels", "height", "width", "mode")]
    data = fields["data"]
    ok = valid & (dims[0] == c) & (dims[1] == h) & (dims[2] == w) & np.isin(dims[3], IMAGE_MODES) \
        & ~np.asarray(data.is_null().to_numpy(zero_copy_only=False), bool)
    offsets = np.frombuffer(data.buffers()[1], np.int32 if pa.types.is_binary(data.type) else np.int64)
    offsets = offsets[data.offset:data.offset + n + 1]
    ok &= np.diff(offsets) == c * h * w
    raw = np.frombuffer(data.buffers()[2], np.uint8) if n else np.zeros(0, np.uint8)
    out = np.full((n, c, h, w), np.nan, np.float32)
    if ok.all():
        out[...] = raw[offsets[0]:offsets[-1]].reshape(n, h, w, c).transpose(0, 3, 1, 2)
    elif ok.any():
        idx = offsets[:-1][ok, None] + np.arange(c * h * w)
        out[ok] = raw[idx].reshape(-1, h, w, c).transpose(0, 3, 1, 2)
    return out.reshape(n, -1), ok


def decode_features(spec: FeatureSpec, arrays) -> tuple[np.ndarray, np.ndarray]:
    """One batch's features as ``(x, valid)``.

    Parameters
    ----------
    spec : FeatureSpec
    arrays : sequence of pyarrow.Array
        The batch's feature columns, in ``spec.columns`` order.

    Returns
    -------
    x : ndarray, float32, shape (n, *spec.sample_shape)
        Invalid rows hold NaN.
    valid : ndarray of bool, shape (n,)
        False for null rows, rows of the wrong size/shape and rows with NaN or infinite values.
    """
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    if spec.packed:
        x, ok = _packed(arrays[0], spec.size)  # the bridge has checked sizes and finiteness
        return x.reshape(len(x), *spec.sample_shape), ok
    if spec.kind == "vector":
        x, ok = _vectors(arrays[0], spec.size)
    elif spec.kind == "array":
        x, ok = _arrays(arrays[0], spec.size)
    elif spec.kind == "scalar":
        x, ok = _scalars(arrays, spec.size)
    elif spec.kind == "image":
        x, ok = _images(arrays[0], spec.input_shape)
    elif spec.kind == "tokens":
        x, ok = decode_tokens(arrays[0], spec.size, spec.padding_value, spec.vocab_size, spec.per_batch)
        return x, ok
    else:
        raise ValueError(f"unknown feature kind {spec.kind!r}")
    finite = np.isfinite(x).all(axis=1)
    ok &= finite
    x[~ok] = np.nan
    return x.reshape(len(x), *spec.sample_shape), ok


def decode_labels(kind: str, array: pa.Array, size: int = 1) -> np.ndarray:
    """A batch's labels as float64: shape (n,) for a scalar column, (n, size) for a vector/array column
    (nulls and malformed rows as NaN)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if kind == "scalar":
        return np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.float64)
    spec = FeatureSpec(kind, ("label",), (size,), (size,))
    return decode_features(spec, [array])[0].astype(np.float64)


def doubles(x: np.ndarray) -> pa.Array:
    """A float64 Arrow array from a 1-D numpy array."""
    return pa.array(np.ascontiguousarray(x, dtype=np.float64))


#: The Arrow type Spark gives a ``VectorUDT`` column (``pyspark.sql.pandas.types.to_arrow_type``).
VECTOR_TYPE = pa.struct([pa.field("type", pa.int8(), nullable=False), pa.field("size", pa.int32()),
                         pa.field("indices", pa.list_(pa.field("element", pa.int32(), nullable=False))),
                         pa.field("values", pa.list_(pa.field("element", pa.float64(), nullable=False)))])


def dense_vectors(m: np.ndarray) -> pa.StructArray:
    """Rows of the 2-D array ``m`` as dense ``VectorUDT`` values, of Spark's own Arrow type for them
    (:data:`VECTOR_TYPE`; an Arrow UDF's result of another type is cast by pyspark, ~0.1 ms per batch of 1,024)."""
    n, d = m.shape
    fields = list(VECTOR_TYPE)
    values = pa.ListArray.from_arrays(pa.array(np.arange(0, n * d + 1, d, dtype=np.int32)),
                                      pa.array(np.ascontiguousarray(m, dtype=np.float64).reshape(-1)),
                                      type=fields[3].type)
    return pa.StructArray.from_arrays(
        [pa.array(np.ones(n, np.int8)), pa.nulls(n, pa.int32()), pa.nulls(n, fields[2].type), values],
        fields=fields)

