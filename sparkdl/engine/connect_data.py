"""Training data on a Spark Connect session: a cached DataFrame of ``.npy`` blocks keyed by source partition.

Connect has no RDDs, so the data cannot be "one cached block per RDD partition" as in
:class:`~sparkdl.engine.DataBlocks`. Instead every row of the cached DataFrame carries the id of the *source
partition* it belongs to (``part``), its position in that partition (``seq``), its row count (``n``) and the
features and labels as ``.npy`` bytes (``x``, ``y``: float32 features of shape ``(n, *feature_shape)``, labels as
:class:`DataBlocks` has them). A task may see the blocks of several source partitions, or none: the gradient task
groups its input by ``part`` and orders it by ``seq`` (:func:`partition_blocks`), so what Spark's placement does
changes nothing, and source partition ``p`` holds exactly the rows :class:`DataBlocks` partition ``p`` holds for
the same partitioning. Sizes, shapes and label ranges per source partition come from one inspection query (or,
for :meth:`ConnectBlocks.from_numpy`, from the arrays on the client), as for :class:`DataBlocks`.
"""
from __future__ import annotations

import dataclasses
import io
import json
from functools import partial

import numpy as np

from sparkdl.engine.data import PartitionedData, PartitionSummary, _first_bad_label, _raise_problems, _summarize, \
    check_arrays

__all__ = ["ConnectBlocks", "partition_blocks", "npy_bytes", "npy_load", "BLOCKS_SCHEMA"]

#: Schema of the cached frame (and of what :func:`sparkdl.ml.data.to_blocks` produces on Connect).
BLOCKS_SCHEMA = "part int, seq int, n long, x binary, y binary"

_CHUNK_BYTES = 16 << 20  # at most ~16 MB of features per row of the cached frame


def npy_bytes(a: np.ndarray) -> bytes:
    """``a`` in ``.npy`` format (no pickle)."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def npy_load(b: bytes) -> np.ndarray:
    """Inverse of :func:`npy_bytes` (never unpickles)."""
    return np.load(io.BytesIO(b), allow_pickle=False)


def partition_blocks(batches) -> dict:
    """``{part: (x, y)}`` from Arrow batches of the cached frame: each source partition's blocks concatenated in
    ``seq`` order (``x`` float32)."""
    pieces: dict = {}
    for batch in batches:
        parts = batch.column("part").to_numpy()
        seqs = batch.column("seq").to_numpy()
        xs, ys = batch.column("x").to_pylist(), batch.column("y").to_pylist()
        for p, s, xb, yb in zip(parts, seqs, xs, ys):
            pieces.setdefault(int(p), []).append((int(s), xb, yb))
    out = {}
    for p, items in pieces.items():
        items.sort(key=lambda item: item[0])
        xs = [npy_load(xb) for _, xb, _ in items]
        ys = [npy_load(yb) for _, _, yb in items]
        out[p] = (np.concatenate(xs).astype(np.float32, copy=False), np.concatenate(ys))
    return out


def _summaries_task(batches):
    import pyarrow as pa  # here, not at import: pyarrow starts a thread, and the daemon forks after importing the engine
    for p, block in partition_blocks(batches).items():
        yield pa.RecordBatch.from_pydict({"part": [p], "summary": [json.dumps(dataclasses.asdict(
            _summarize(p, block)))]}, schema=pa.schema([("part", pa.int32()), ("summary", pa.string())]))


def _bad_label_task(part, num_classes, batches):
    import pyarrow as pa  # here, not at import: pyarrow starts a thread, and the daemon forks after importing the engine
    for p, (_, y) in partition_blocks(batches).items():
        if p == part:
            r, v = _first_bad_label(y, num_classes)
            yield pa.RecordBatch.from_pydict({"row": [r], "value": [None if v is None else float(v)]},
                                             schema=pa.schema([("row", pa.int64()), ("value", pa.float64())]))


def _summary(d: dict) -> PartitionSummary:
    for key in ("feature_shape", "label_shape"):
        if d[key] is not None:
            d[key] = tuple(d[key])
    return PartitionSummary(**d)


class ConnectBlocks(PartitionedData):
    """The training (or validation) data of a fit on a Spark Connect session.

    Attributes
    ----------
    frame : pyspark.sql.connect.dataframe.DataFrame
        Cached, with columns :data:`BLOCKS_SCHEMA`.
    sizes, feature_shape, label_kind
        Of source partitions ``0 .. num_partitions - 1`` (see :class:`~sparkdl.engine.data.PartitionedData`).
    """

    def __init__(self, frame, summaries: list[PartitionSummary]):
        self.frame = frame
        super().__init__(summaries)

    @property
    def session(self):
        return self.frame.sparkSession

    @classmethod
    def from_numpy(cls, spark, x: np.ndarray, y: np.ndarray, num_partitions: int) -> "ConnectBlocks":
        """Send client-side arrays as ``num_partitions`` contiguous source partitions (row ``i`` of partition
        ``p`` is row ``offset_p + i``, the split of :meth:`DataBlocks.from_numpy`) and cache them.

        Raises
        ------
        ValueError
            Before any query, as :meth:`DataBlocks.from_numpy` does (lengths, ``num_partitions``, dtypes, NaN or
            infinite rows naming partition and row).
        """
        x, y = check_arrays("ConnectBlocks.from_numpy", x, y, num_partitions)
        n = num_partitions
        rows = np.linspace(0, len(x), n + 1).round().astype(int)
        summaries = [_summarize(p, (x[a:b].astype(np.float32, copy=False), y[a:b]))
                     for p, (a, b) in enumerate(zip(rows[:-1], rows[1:]))]
        _raise_problems(summaries)
        records = {"part": [], "seq": [], "n": [], "x": [], "y": []}
        per_chunk = max(1, _CHUNK_BYTES // max(1, x[:1].nbytes))
        for p, (a, b) in enumerate(zip(rows[:-1], rows[1:])):
            starts = range(a, b, per_chunk) if b > a else [a]
            for s, lo in enumerate(starts):
                hi = min(b, lo + per_chunk)
                xb = npy_bytes(x[lo:hi].astype(np.float32, copy=False))
                for key, value in (("part", p), ("seq", s), ("n", hi - lo), ("x", xb), ("y", npy_bytes(y[lo:hi]))):
                    records[key].append(value)
        import pyarrow as pa  # see _summaries_task
        table = pa.table(records, schema=pa.schema([("part", pa.int32()), ("seq", pa.int32()), ("n", pa.int64()),
                                                    ("x", pa.binary()), ("y", pa.binary())]))
        frame = spark.createDataFrame(table).repartitionByRange(n, "part").cache()
        frame.count()  # materialize the cache
        return cls(frame, summaries)

    @classmethod
    def from_frame(cls, frame, num_partitions: int) -> "ConnectBlocks":
        """Cache ``frame`` (columns :data:`BLOCKS_SCHEMA`, source partitions ``0 .. num_partitions - 1``) and inspect
        it in one query.

        Raises
        ------
        ValueError
            Naming the source partition and row, for NaN/inf values or feature shapes that differ between
            partitions.
        """
        frame = frame.cache()
        rows = frame.mapInArrow(_summaries_task, "part int, summary string").collect()
        found = {int(r["part"]): _summary(json.loads(r["summary"])) for r in rows}
        summaries = [found.get(p, PartitionSummary(p, 0, None, None, None, None, None, None))
                     for p in range(max([num_partitions, *(q + 1 for q in found)]))]
        try:
            _raise_problems(summaries)
        except ValueError:
            frame.unpersist()
            raise
        return cls(frame, summaries)

    def check_labels(self, num_classes: int | None) -> None:
        """As :meth:`DataBlocks.check_labels`: labels must be integral and in ``[0, num_classes)``."""
        if num_classes is None:
            return
        for s in self.summaries:
            if s.count and (s.label_min < 0 or s.label_max >= num_classes or s.label_kind == "f"):
                found = self.frame.mapInArrow(partial(_bad_label_task, s.partition, num_classes),
                                              "row long, value double").collect()
                if not found or found[0]["row"] is None:
                    continue  # float labels that are all integral class indices
                raise ValueError(f"invalid label in partition {s.partition}, row {found[0]['row']}: "
                                 f"{found[0]['value']!r}; expected an integer class index in [0, {num_classes - 1}]")

    def unpersist(self) -> None:
        self.frame.unpersist()
