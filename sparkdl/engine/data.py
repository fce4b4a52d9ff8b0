"""Training data on executors: one columnar ``(features, labels)`` numpy block per cached partition.

Samples arrive as an RDD of ``(features, label)`` pairs (:meth:`DataBlocks.from_samples`) or an RDD of
``(features_block, labels_block)`` numpy pairs (:meth:`DataBlocks.from_blocks`; the DataFrame/Arrow path
of :mod:`sparkdl.ml` produces these). Each partition is converted once into float32 features of shape
``(n_p, *feature_shape)`` and a label array, cached (a cached partition costs about its raw size, as the
pickled numpy block is stored as bytes), and inspected by one small job that returns per-partition sizes,
shapes and label ranges, so bad data is reported — naming partition and row — before training starts.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import warnings
import weakref
from dataclasses import dataclass

import numpy as np
from pyspark import StorageLevel

from sparkdl.jvm import count_on_jvm, jvm_log_level

__all__ = ["DataBlocks", "PartitionedData", "PartitionSummary", "check_arrays", "MAX_PARTITION_BYTES"]

#: Largest raw size (bytes, features and labels) of one partition: a cached partition is one serialized record,
#: i.e. one JVM byte array (under 2 GiB), and the pickle framing needs a little room.
MAX_PARTITION_BYTES = (1 << 31) - (1 << 24)


@dataclass
class PartitionSummary:
    """What the inspection job learned about one partition."""

    partition: int
    count: int
    feature_shape: tuple | None
    label_shape: tuple | None
    label_kind: str | None  # numpy dtype kind: 'i' or 'f'
    label_min: float | None
    label_max: float | None
    problem: str | None  # first problem found, naming the row


def _too_large(partition: int, x: np.ndarray, y: np.ndarray) -> str | None:
    size = x.nbytes + y.nbytes
    if size <= MAX_PARTITION_BYTES:
        return None
    return (f"partition {partition} holds {size / 2**30:.2f} GiB, but one cached partition is one serialized "
            f"record, which must stay under {MAX_PARTITION_BYTES / 2**30:.2f} GiB (a Java byte array): "
            f"repartition the data into more partitions (rdd.repartition(n))")


def _stack_samples(partition: int, rows) -> tuple[np.ndarray, np.ndarray] | str:
    feats, labels = [], []
    first_shape = None
    for r, row in enumerate(rows):
        try:
            f, lab = row
        except (TypeError, ValueError):
            return f"partition {partition}, row {r}: expected a (features, label) pair, got {type(row).__name__}"
        f = np.asarray(f)
        if f.dtype.kind not in "fiub":
            return f"partition {partition}, row {r}: features must be numeric, got dtype {f.dtype}"
        if first_shape is None:
            first_shape = f.shape
        elif f.shape != first_shape:
            return (f"partition {partition}, row {r}: features have shape {f.shape}, but row 0 of this "
                    f"partition has shape {first_shape}")
        feats.append(f)
        labels.append(lab)
    if not feats:
        return np.zeros((0,), np.float32), np.zeros((0,), np.int64)
    x = np.stack(feats).astype(np.float32, copy=False)
    y = np.asarray(labels)
    if y.dtype.kind not in "fiub":
        return f"partition {partition}: labels must be numeric, got dtype {y.dtype}"
    return _too_large(partition, x, y) or (x, y)


def _normalize_block(partition: int, blocks) -> tuple[np.ndarray, np.ndarray] | str:
    xs, ys = [], []
    for b, pair in enumerate(blocks):
        try:
            x, y = pair
        except (TypeError, ValueError):
            return f"partition {partition}, block {b}: expected a (features, labels) pair of arrays"
        x, y = np.asarray(x), np.asarray(y)
        if x.ndim < 1 or len(x) != len(y):
            return (f"partition {partition}, block {b}: features have {len(x) if x.ndim else 0} rows "
                    f"but labels have {len(y)}")
        xs.append(x)
        ys.append(y)
    if not xs:
        return np.zeros((0,), np.float32), np.zeros((0,), np.int64)
    shapes = {x.shape[1:] for x in xs}
    if len(shapes) > 1:
        return f"partition {partition}: blocks have different feature shapes {sorted(shapes)}"
    x, y = np.concatenate(xs).astype(np.float32, copy=False), np.concatenate(ys)
    return _too_large(partition, x, y) or (x, y)


def _normalized(rdd):
    """One ``(x, y)`` block (or a problem string) per partition of an RDD of numpy block pairs."""
    return rdd.mapPartitionsWithIndex(lambda p, it: [_normalize_block(p, it)], preservesPartitioning=True)


def _summarize(partition: int, block) -> PartitionSummary:
    if isinstance(block, str):
        return PartitionSummary(partition, 0, None, None, None, None, None, block)
    x, y = block
    n = len(x)
    problem = None
    if n:
        bad = ~np.isfinite(x.reshape(n, -1)).all(axis=1)
        if bad.any():
            problem = f"partition {partition}, row {int(np.argmax(bad))}: features contain NaN or infinity"
        elif y.dtype.kind == "f" and not np.isfinite(y).all():
            row = int(np.argmax(~np.isfinite(y.reshape(n, -1)).all(axis=1)))
            problem = f"partition {partition}, row {row}: label is NaN or infinity"
    return PartitionSummary(
        partition, n, tuple(x.shape[1:]) if n else None, tuple(y.shape[1:]) if n else None,
        y.dtype.kind if n else None, float(y.min()) if n else None, float(y.max()) if n else None, problem)


class PartitionedData:
    """What the engine knows of cached training data before a fit: one :class:`PartitionSummary` per partition.

    Attributes
    ----------
    sizes : list of int
        ``n_p`` per partition.
    feature_shape : tuple
        Per-sample feature shape (identical across partitions).
    label_kind : {'i', 'f', None}
        ``'f'`` if any partition has float labels.
    """

    def __init__(self, summaries: list[PartitionSummary]):
        self.summaries = summaries
        self.sizes = [s.count for s in summaries]
        shapes = {s.feature_shape for s in summaries if s.count}
        self.feature_shape = next(iter(shapes)) if shapes else None
        kinds = {s.label_kind for s in summaries if s.count}
        self.label_kind = "f" if "f" in kinds else ("i" if kinds else None)

    @property
    def num_samples(self) -> int:
        return int(sum(self.sizes))

    @property
    def num_partitions(self) -> int:
        return len(self.sizes)


def check_arrays(where: str, x, y, num_partitions) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` as arrays, checked before any Spark job: equal lengths, ``num_partitions`` an int >= 1, numeric.

    Raises
    ------
    ValueError
        Naming ``where`` and the argument.
    """
    x, y = np.asarray(x), np.asarray(y)
    if len(x) != len(y):
        raise ValueError(f"{where}: x has {len(x)} rows but y has {len(y)}")
    n = num_partitions
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{where}: num_partitions must be an int >= 1, got {n!r}")
    for name, a in (("x", x), ("y", y)):
        if a.dtype.kind not in "fiub":
            raise ValueError(f"{where}: {name} must be numeric, got dtype {a.dtype}")
    return x, y


class DataBlocks(PartitionedData):
    """A cached RDD with exactly one ``(features, labels)`` block per partition, plus its summary.

    Attributes
    ----------
    rdd : pyspark.RDD
        Cached; partition p holds ``(x_p, y_p)`` with ``x_p`` float32 of shape ``(n_p, *feature_shape)``.
    sizes, feature_shape, label_kind
        See :class:`PartitionedData`.
    """

    def __init__(self, rdd, summaries: list[PartitionSummary]):
        self.rdd = rdd
        super().__init__(summaries)

    @classmethod
    def from_samples(cls, rdd, storage_level=StorageLevel.MEMORY_AND_DISK) -> "DataBlocks":
        """Cache an RDD of ``(features, label)`` samples as columnar blocks and inspect it.

        Raises
        ------
        ValueError
            Naming the partition and row, for non-numeric or ragged features, NaN/inf values, or
            feature shapes that differ between partitions.
        """
        blocks = rdd.mapPartitionsWithIndex(lambda p, it: [_stack_samples(p, it)], preservesPartitioning=True)
        return cls._cache_and_inspect(blocks, storage_level)

    @classmethod
    def from_numpy(cls, sc, x: np.ndarray, y: np.ndarray, num_partitions: int | None = None,
                   storage_level=StorageLevel.MEMORY_AND_DISK) -> "DataBlocks":
        """Distribute driver-side arrays as ``num_partitions`` contiguous blocks (default
        ``sc.defaultParallelism``) and cache them.

        So that training tasks do not carry the arrays: with a local master (``local[*]``, ``local-cluster``)
        the driver writes each partition's block to a temporary ``.npy`` file that the executors read (removed
        when the RDD is garbage collected or at exit); on a cluster the cached RDD is also checkpointed once
        (to ``sc.getCheckpointDir()``); see the README's cluster section.

        Raises
        ------
        ValueError
            Before any Spark job: if ``x`` and ``y`` have different lengths, ``num_partitions < 1``, an array is
            not numeric, a row has NaN or infinite features (or float labels), naming its partition and row, or
            a partition would exceed :data:`MAX_PARTITION_BYTES` (naming the number of partitions needed).
        """
        n = num_partitions or sc.defaultParallelism
        x, y = check_arrays("DataBlocks.from_numpy", x, y, n)
        per_part = max(1, -(-len(x) // n))
        largest = per_part * (4 * max(1, x[:1].size) + y[:1].nbytes)  # features become float32
        if largest > MAX_PARTITION_BYTES:
            need = -(-len(x) * largest // per_part // MAX_PARTITION_BYTES)
            raise ValueError(f"DataBlocks.from_numpy: with num_partitions={n} a partition holds up to "
                             f"{largest / 2**30:.2f} GiB, but one cached partition is one serialized record, which "
                             f"must stay under {MAX_PARTITION_BYTES / 2**30:.2f} GiB (a Java byte array): use "
                             f"num_partitions >= {need}")
        # On a cluster several chunks of <= ~16 MB per partition keep each serialized record small for the JVM;
        # parallelize() gives partition p the p-th run of `pieces` chunks, so row order is kept.
        pieces = max(1, -(-per_part * max(1, x[:1].nbytes) // (16 << 20)))
        bounds = np.linspace(0, len(x), n * pieces + 1).round().astype(int)
        rows = bounds[::pieces]
        # The partitions are inspected here, before any Spark job: a bad row fails fast, and no Python pass
        # over the cached data is needed for it.
        summaries = [_summarize(p, (x[a:b].astype(np.float32, copy=False), y[a:b]))
                     for p, (a, b) in enumerate(zip(rows[:-1], rows[1:]))]
        _raise_problems(summaries)
        if sc.master.startswith("local"):  # executors on this machine: they read the blocks from local files
            blocks = _local_blocks(sc, x, y, rows).persist(storage_level)
            count_on_jvm(blocks)  # caches every partition without reading it back in Python
            return cls(blocks, summaries)
        chunks = [(x[bounds[i]:bounds[i + 1]], y[bounds[i]:bounds[i + 1]]) for i in range(n * pieces)]
        blocks = _normalized(sc.parallelize(chunks, n)).persist(storage_level)
        _checkpoint_driver_data(blocks)
        # The arrays ride inside the tasks of this first job only (then the checkpoint replaces them): Spark's
        # "task of very large size" warning is expected here and would only alarm the user.
        with jvm_log_level(sc, "org.apache.spark.scheduler.TaskSetManager", "ERROR"):
            count_on_jvm(blocks)  # caches and checkpoints every partition without reading it back in Python
        return cls(blocks, summaries)

    @classmethod
    def from_blocks(cls, rdd, storage_level=StorageLevel.MEMORY_AND_DISK) -> "DataBlocks":
        """Cache an RDD whose elements are ``(features_block, labels_block)`` numpy pairs (several per
        partition are concatenated)."""
        return cls._cache_and_inspect(_normalized(rdd), storage_level)

    @classmethod
    def _cache_and_inspect(cls, blocks, storage_level) -> "DataBlocks":
        blocks = blocks.persist(storage_level)
        summaries = blocks.mapPartitionsWithIndex(
            lambda p, it: [_summarize(p, _only(it))]).collect()
        try:
            _raise_problems(summaries)
        except ValueError:
            blocks.unpersist()
            raise
        return cls(blocks, summaries)

    def check_labels(self, num_classes: int | None) -> None:
        """For classification: labels must be integral and in ``[0, num_classes)``.

        Raises
        ------
        ValueError
            Naming the first partition whose label range is out of bounds (the row is found by a
            small job over that partition only).
        """
        if num_classes is None:
            return
        for s in self.summaries:
            if s.count and (s.label_min < 0 or s.label_max >= num_classes or s.label_kind == "f"):
                p = s.partition
                rows = self.rdd.mapPartitionsWithIndex(
                    lambda i, it, p=p: [_first_bad_label(_only(it)[1], num_classes)] if i == p else _drained(it)).collect()
                r, v = rows[0]
                if r is None:
                    continue  # float labels that are all integral class indices
                raise ValueError(f"invalid label in partition {p}, row {r}: {v!r}; expected an integer class "
                                 f"index in [0, {num_classes - 1}]")

    def unpersist(self) -> None:
        self.rdd.unpersist()


def _raise_problems(summaries: list[PartitionSummary]) -> None:
    """ValueError naming the first partition (and row) with a problem, or differing feature shapes."""
    problems = [s.problem for s in summaries if s.problem]
    shapes = {s.feature_shape for s in summaries if s.count}
    if not problems and len(shapes) > 1:
        by_shape = {}
        for s in summaries:
            if s.count:
                by_shape.setdefault(s.feature_shape, s.partition)
        problems.append("feature shapes differ between partitions: " +
                        ", ".join(f"partition {p} has {sh}" for sh, p in by_shape.items()))
    if problems:
        raise ValueError("invalid training data: " + problems[0] +
                         (f" (and {len(problems) - 1} more partitions with problems)" if len(problems) > 1 else ""))


def _local_blocks(sc, x, y, rows):
    """An RDD whose partition ``p`` is rows ``rows[p]:rows[p + 1]`` of ``x`` (as float32) and ``y``, read from two
    ``.npy`` files the driver writes into a new temporary directory: for local masters (``local[*]``,
    ``local-cluster``), whose executors share the driver's file system. Tasks carry only the partition index, a
    lost partition is recomputed from its files, and no checkpoint is needed. The directory is removed when the
    RDD object is garbage collected or the driver exits. The blocks are those :func:`_normalize_block` makes of
    the same rows (float32 features, labels of ``y``'s dtype, both C-contiguous)."""
    directory = tempfile.mkdtemp(prefix="sparkdl-data-")
    try:
        for p, (a, b) in enumerate(zip(rows[:-1], rows[1:])):
            np.save(os.path.join(directory, f"x-{p}.npy"), np.ascontiguousarray(x[a:b], dtype=np.float32))
            np.save(os.path.join(directory, f"y-{p}.npy"), np.ascontiguousarray(y[a:b]))
    except BaseException:
        shutil.rmtree(directory, True)
        raise
    rdd = sc.parallelize(range(len(rows) - 1), len(rows) - 1).mapPartitionsWithIndex(
        lambda p, it: [_read_local_block(directory, p, it)], preservesPartitioning=True)
    weakref.finalize(rdd, shutil.rmtree, directory, True)  # also runs at exit
    return rdd


def _read_local_block(directory: str, partition: int, records) -> tuple[np.ndarray, np.ndarray]:
    _drained(records)
    return (np.load(os.path.join(directory, f"x-{partition}.npy")),
            np.load(os.path.join(directory, f"y-{partition}.npy")))


def _checkpoint_driver_data(rdd) -> None:
    """Mark ``rdd`` (derived from ``sc.parallelize`` of driver arrays) for a reliable checkpoint.

    Without it, every task over the data — each training iteration — would carry its partition's
    arrays inside the serialized task (Spark keeps parallelized data in the partition objects), even
    though the partition is cached. The checkpoint replaces that lineage by files, so tasks stay small
    and lost partitions can still be recomputed. Uses the SparkContext's checkpoint directory; with
    none set and a local master, sets one in a temporary directory removed at exit. On a cluster
    without a checkpoint directory the data stay in the lineage (a warning says how to fix that)."""
    sc = rdd.context
    if sc.getCheckpointDir() is None:
        if not sc.master.startswith("local"):
            warnings.warn("DataBlocks.from_numpy: no checkpoint directory is set, so every training task "
                          "carries its partition's data; call sc.setCheckpointDir(<a path all executors can "
                          "read, e.g. on HDFS>) first", RuntimeWarning, stacklevel=3)
            return
        directory = tempfile.mkdtemp(prefix="sparkdl-checkpoint-")
        atexit.register(shutil.rmtree, directory, True)
        sc.setCheckpointDir(directory)
    rdd.checkpoint()


def _only(records):
    """The one block of a partition, draining the iterator (a Python worker that leaves input unread is not
    reused: the next task would pay for a new worker and its imports)."""
    items = list(records)
    return items[0]


def _drained(records) -> list:
    for _ in records:
        pass
    return []


def _first_bad_label(y: np.ndarray, num_classes: int):
    bad = (y < 0) | (y >= num_classes) | (y != np.floor(y))
    if not bad.any():
        return None, None
    r = int(np.argmax(bad))
    return r, y[r].item()
