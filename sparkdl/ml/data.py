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

from sparkdl.engine.connect_data import BLOCKS_SCHEMA, ConnectBlocks
from sparkdl.engine.connect_session import is_connect
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


def _convert_keyed(spec: FeatureSpec, label: LabelSpec, batches):
    """:func:`_convert` for Spark Connect: each block row also names its source partition (this task's partition
    id), its position and its row count (:data:`sparkdl.engine.connect_data.BLOCKS_SCHEMA`); an empty partition
    gives one empty block, so every source partition is known."""
    from pyspark import TaskContext
    part = TaskContext.get().partitionId()
    seq = -1
    for seq, block in enumerate(_convert(spec, label, batches)):
        n = len(npy_load(block.column(1)[0].as_py()))
        yield pa.RecordBatch.from_arrays([pa.array([part], pa.int32()), pa.array([seq], pa.int32()),
                                          pa.array([n], pa.int64()), block.column(0), block.column(1)],
                                         names=["part", "seq", "n", "x", "y"])
    if seq < 0:
        empty = (np.zeros((0, *spec.sample_shape), np.float32), np.zeros((0, *label.shape), label.dtype))
        yield pa.RecordBatch.from_arrays([pa.array([part], pa.int32()), pa.array([0], pa.int32()),
                                          pa.array([0], pa.int64())] +
                                         [pa.array([npy_bytes(a)], pa.binary()) for a in empty],
                                         names=["part", "seq", "n", "x", "y"])


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
    if not is_connect(df.sparkSession) and df.rdd.getNumPartitions() == num_partitions:
        return df  # (Spark Connect has no RDDs: there the rows are always range-partitioned)
    index = "__sparkdl_row_index"
    indexed = df.withColumn(index, F.monotonically_increasing_id())
    return indexed.repartitionByRange(num_partitions, index).sortWithinPartitions(index).drop(index)


def to_blocks(df, spec: FeatureSpec, feature_cols: list, label: LabelSpec, label_col,
              num_partitions: int | None = None) -> DataBlocks | ConnectBlocks:
    """Convert ``df`` (already filtered and partitioned) to cached blocks, one per partition (on Spark Connect:
    :class:`~sparkdl.engine.connect_data.ConnectBlocks`, source partition ``p`` being ``df``'s partition ``p``,
    which needs ``num_partitions``; vector and array columns take the plain Arrow path there, as the JVM bridge
    cannot be reached).

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
    if is_connect(df.sparkSession):
        frame = df.select(*feature_cols, label_col).mapInArrow(partial(_convert_keyed, spec, label), BLOCKS_SCHEMA)
        return ConnectBlocks.from_frame(frame, num_partitions)
    spec, feature_cols = packed_features(df.sparkSession.sparkContext, spec, feature_cols, df.schema)
    arrow = df.select(*feature_cols, label_col).mapInArrow(partial(_convert, spec, label), "x binary, y binary")
    return DataBlocks.from_blocks(arrow.rdd.map(_decode, preservesPartitioning=True))
