"""DataFrame -> cached :class:`~sparkdl.engine.DataBlocks` through Arrow, on the executors.

``DataFrame.mapInArrow`` hands each task its rows as Arrow record batches (vector and array features packed into
float32 bytes per row by the JVM bridge when it is loaded, :mod:`sparkdl.ml.packing`); :mod:`sparkdl.ml.arrow` turns
a batch into a float32 feature block and a label block, which leave the task as one ``.npy``-encoded row per
batch (no pickles, no per-row Python objects). :meth:`DataBlocks.from_blocks` then concatenates the blocks of
each partition and caches them. Nothing is collected to the driver.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import pyarrow as pa
from pyspark.sql import functions as F

from sparkdl.engine.data import DataBlocks
from sparkdl.ml.arrow import FeatureSpec, decode_features, decode_labels, npy_bytes, npy_load
from sparkdl.ml.packing import packed_features

__all__ = ["LabelSpec", "to_blocks", "repartition"]


@dataclass(frozen=True)
class LabelSpec:
    """How labels are read and what the loss receives.

    Attributes
    ----------
    kind : {'scalar', 'vector', 'array'}
    size : int
        Values per row.
    shape : tuple
        Per-row label shape handed to the loss, e.g. ``()`` for class indices, ``(1,)`` for one regression
        target next to a ``(N, 1)`` network output.
    dtype : str
        ``'int64'`` (class indices) or ``'float32'``.
    """

    kind: str
    size: int
    shape: tuple
    dtype: str


def _convert(spec: FeatureSpec, label: LabelSpec, batches):
    k = len(spec.columns)
    for batch in batches:
        x, _ = decode_features(spec, batch.columns[:k])
        y = decode_labels(label.kind, batch.column(k), label.size)
        if label.dtype == "int64":
            y = np.where(np.isfinite(y), y, -1).astype(np.int64)
        y = y.astype(label.dtype, copy=False).reshape(len(y), *label.shape)
        yield pa.RecordBatch.from_arrays([pa.array([npy_bytes(x)], pa.binary()), pa.array([npy_bytes(y)], pa.binary())],
                                         names=["x", "y"])


def _decode(row):
    return npy_load(row[0]), npy_load(row[1])


def repartition(df, num_partitions: int):
    """``df`` in ``num_partitions`` partitions that keep its row order: partition p holds a contiguous run of rows.

    Each row gets a stable global index first (``monotonically_increasing_id``: the row's position in ``df``'s
    own partitions), then the rows are range-partitioned and sorted by it. The concatenated partitions are
    therefore ``df``'s rows in ``df``'s order whatever ``num_partitions`` is, and since the engine's batch plan
    depends only on that order (:mod:`sparkdl.engine.plan`), the same seed gives the same training with 1, 3 or
    4 partitions, up to float summation order. (Range partitioning may make fewer partitions than asked when
    there are fewer rows than partitions.) ``df`` is returned as is when it already has ``num_partitions``.
    """
    if df.rdd.getNumPartitions() == num_partitions:
        return df
    index = "__sparkdl_row_index"
    indexed = df.withColumn(index, F.monotonically_increasing_id())
    return indexed.repartitionByRange(num_partitions, index).sortWithinPartitions(index).drop(index)


def to_blocks(df, spec: FeatureSpec, feature_cols: list, label: LabelSpec, label_col) -> DataBlocks:
    """Convert ``df`` (already filtered and partitioned) to cached blocks, one per partition.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
    spec : FeatureSpec
    feature_cols : list of Column
        The feature columns in ``spec.columns`` order (see :func:`sparkdl.ml.validation.feature_exprs`).
    label : LabelSpec
    label_col : Column
        The label column expression.

    Returns
    -------
    DataBlocks
        Cached; features float32 of shape ``(n_p, *spec.sample_shape)``, labels as ``label`` says.

    Raises
    ------
    ValueError
        From :meth:`DataBlocks.from_blocks`, naming partition and row, if a block holds NaN/inf (which the
        SQL checks of :mod:`sparkdl.ml.validation` exclude beforehand).
    """
    spec, feature_cols = packed_features(df.sparkSession.sparkContext, spec, feature_cols, df.schema)
    arrow = df.select(*feature_cols, label_col).mapInArrow(partial(_convert, spec, label), "x binary, y binary")
    return DataBlocks.from_blocks(arrow.rdd.map(_decode, preservesPartitioning=True))
