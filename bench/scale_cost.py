"""The iteration-time cost model of ``bench/scale_model.py``: pure functions of measured parts, no Spark.

One iteration of the JVM-reduce engine after the first (gradient tasks read executor-local data copies) on
``E`` executors of ``C`` cores (``S = E * C`` task slots), ``N`` data partitions, ``P`` float32 parameters, a
global batch of ``B`` rows and ``b`` bytes per gradient value (4, or 2 with ``compress='fp16'``):

* **launch**: ``job_s + task_driver_s * S + task_python_s * waves`` — one Spark job, the driver schedules ``S``
  group tasks, each Python task has a fixed executor-side cost; ``waves = ceil(S / cores that really run)``.
  When the tasks run in the driver's JVM (``local[k]``, no RPC between JVMs) ``one_jvm_launch_s``, measured there.
* **weights**: ``4P`` bytes reach every executor. On the driver path: inside each task up to 512 KB
  (``4P / inline_bps`` per task), else a torrent broadcast pipelined in 4 MB blocks
  (``(4P + ceil(log2(E + 1)) * 4 MB) / bandwidth``); on the shuffle path each executor fetches the ``K`` blocks
  from the executors whose reduce tasks computed them (``4P / fetch_bps``: every executor receives and serves
  about ``4P``, all at once); times ``E / host cores`` when the executors share one host; then each of the ``C``
  Python tasks of an executor reads them from its JVM (``4P / weights_in_bps``).
* **compute**: each group task computes ``N / S`` partitions with ``B / S`` rows in all:
  ``P * (rows * row_param_s + partitions * partition_param_s)`` (the per-partition term includes its share of the
  task's pre-sum), and writes its ``r / S`` records (below; ``record_overhead_bytes + b * P`` each: measured from
  task result sizes, the format's headers are 80 bytes) to its JVM at ``python_io_bps``.
* **reduce**, one of two strategies (:func:`reduce_strategy` picks the engine's). The group tasks send ``r``
  records: one per task when each executor holds aligned runs of partition ids (always in local mode), ``r = S``;
  one per partition when the cache scattered the ids over the executors (``Cluster.scattered``), ``r = N``.
  ``driver`` (one AllReduce block): with ``r <= 2E`` the driver receives the ``r`` records over its link and sums
  them (``driver_sum_fps`` floats/s); beyond, a combine stage (``stage_s``, ``E`` JVM tasks, the records through
  the shuffle) sums them per tree node first and the driver receives and sums ``E``; then the update
  (``update_param_s`` per parameter). This is ``FanIn.java`` in the bridge.
  ``shuffle``: ``K`` AllReduce blocks, each record is cut into ``K`` block records that go through Spark's shuffle
  (write at ``shuffle_bps``, read over the network), ``K`` JVM reduce tasks (a second stage) sum and update a block
  each and keep the new block on their executor; the driver receives ``K`` small results
  (:data:`REDUCE_RESULT_BYTES` each).

Bandwidths that cross machines are capped by ``network_bps`` (an assumption for clusters, not measured here: the
calibration machine has only loopback); on one host (``local``/``local-cluster`` masters) it is infinite.
Compute runs on ``min(S, host_cores)`` cores when the slots outnumber the host's cores (oversubscribed
``local-cluster`` validation).
"""
from __future__ import annotations

import math
import struct
from dataclasses import asdict, dataclass, fields

__all__ = ["Calibration", "Cluster", "Strategy", "reduce_strategy", "predict", "efficiency", "RECORD_HEADER_BYTES",
           "INLINE_WEIGHT_BYTES", "REDUCE_RESULT_BYTES"]

#: A gradient record's header (``Frames.java``; ``sparkdl.engine.jvm_reduce._RECORD``: kind, block, partition,
#: reserved, loss, normalizer, count) — plus one buffers record of the same header per partition.
RECORD_HEADER_BYTES = 2 * struct.calcsize("<iiiiddq")
#: Weights up to this size travel inside the tasks on the driver path (``TrainingLoop.INLINE_WEIGHT_BYTES``).
INLINE_WEIGHT_BYTES = 512 * 1024


@dataclass
class Calibration:
    """The measured parts (seconds, bytes/s, floats/s); ``bench/scale_model.py --calibrate`` writes them as JSON."""

    job_s: float  # fixed cost of a one-stage job with Python tasks (py4j call, DAG scheduling, result handling)
    one_jvm_launch_s: float  # launch of an iteration whose tasks run in the driver's JVM (local[k]): measured there
    task_driver_s: float  # driver-side cost per task (scheduling, serialization, launch)
    task_python_s: float  # executor-side fixed cost per Python task (worker hand-off, deserialization)
    stage_s: float  # extra fixed cost of a second (shuffle) stage
    row_param_s: float  # gradient compute per row and parameter (forward + backward, one core)
    partition_param_s: float  # per partition and parameter (gradient buffer, per-partition pass)
    python_io_bps: float  # a Python task's records out to its JVM
    weights_in_bps: float  # a Python task reading bytes its JVM holds (the weights' frames)
    gather_bps: float  # task results reaching the driver JVM (one host: loopback)
    shuffle_bps: float  # shuffle write + read of raw records (one host)
    driver_sum_fps: float  # float32 values summed per second by the JVM reduce (driver or task)
    update_param_s: float  # optimizer update per parameter (JVM)
    record_overhead_bytes: float = RECORD_HEADER_BYTES  # a record's task result bytes beyond its b * P
    inline_bps: float = math.inf  # weights inside a task reaching a Python task in another JVM (fitted last)
    broadcast_bps: float = math.inf  # the driver reduce's weights broadcast reaching an executor (fitted last)
    fetch_bps: float = math.inf  # the shuffle path's weights blocks fetched by an executor (fitted last)
    host: str = ""

    @classmethod
    def from_dict(cls, d: dict) -> "Calibration":
        names = {f.name for f in fields(cls)}
        missing = sorted(names - set(d) - {"host", "record_overhead_bytes", "inline_bps", "broadcast_bps",
                                              "fetch_bps"})
        if missing:
            raise ValueError(f"calibration: missing part(s) {missing}; run bench/scale_model.py --calibrate")
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Cluster:
    """One configuration to predict: executors, cores, partitions, parameters, global batch."""

    executors: int
    cores: int
    partitions: int
    parameters: int
    batch_size: int
    value_bytes: int = 4  # 2 with compress='fp16'
    network_bps: float = math.inf  # between machines; inf on one host
    host_cores: int | None = None  # cores that really run the slots (oversubscribed one-host validation)
    one_jvm: bool = False  # local[k]: the executor is the driver JVM, weights need no broadcast
    scattered: bool = False  # partition ids interleaved over the executors: no pre-sum, one record per partition
    sent_records: int | None = None  # the engine's own count when known (``TrainingLoop.localRecords``)

    @property
    def slots(self) -> int:
        return self.executors * self.cores

    @property
    def records(self) -> int:
        """Gradient records the group tasks send per AllReduce block (``GroupAssignment.records``)."""
        if self.sent_records is not None:
            return self.sent_records
        return self.partitions if self.scattered else min(self.partitions, self.slots)


@dataclass(frozen=True)
class Strategy:
    """A reduce strategy: ``name`` in {'driver', 'shuffle'}, ``blocks`` K."""

    name: str
    blocks: int


def reduce_strategy(parameters: int, partitions: int, executors: int, cores: int, block_parameters: int,
                    driver_reduce: bool = True, max_block_bytes: int = 16 << 20) -> Strategy:
    """The reduce the engine runs for this configuration.

    Mirrors ``sparkdl/engine/loop.py`` (``K = max(min(partitions, ceil(P / BLOCK_PARAMETERS)),
    ceil(4P / MAX_BLOCK_BYTES))``) and
    ``sparkdl/engine/jvm_reduce.py`` (one block and ``DRIVER_REDUCE``: the driver reduce, with the bridge's fan-in
    bound; otherwise K JVM reduce tasks after a shuffle). ``executors`` and ``cores`` do not change the choice:
    the fan-in bound (``FanIn.java``) is part of the driver strategy's cost (:func:`predict`).
    """
    blocks = max(min(partitions, -(-parameters // block_parameters)), -(-4 * parameters // max_block_bytes))
    if blocks == 1 and driver_reduce:
        return Strategy("driver", 1)
    return Strategy("shuffle", max(1, blocks))


#: Records per executor the driver collects directly (``FanIn.PER_EXECUTOR``); beyond, a combine stage runs first.
FAN_IN_PER_EXECUTOR = 2
#: Bytes of one JVM reduce task's result reaching the driver (Spark's envelope and the block's loss, counts and
#: buffer sums; no weights): 2.4-3.6 KB measured by ``--validate`` for 4 blocks of a 10M-parameter MLP.
REDUCE_RESULT_BYTES = 3500

#: ``spark.broadcast.blockSize`` (default 4 MB): a torrent broadcast is pipelined in blocks of this size.
TORRENT_BLOCK_BYTES = 4 << 20


def _shuffle_read(cal: Calibration, cl: Cluster, nbytes: float) -> float:
    """Seconds for one reduce task to read ``nbytes`` of shuffle blocks: its executor's share locally, the rest
    (``(E - 1) / E``) over the network."""
    E = cl.executors
    remote = (E - 1) / E if E > 1 else 0.0
    return nbytes * (1 - remote) / cal.shuffle_bps + nbytes * remote / min(cal.shuffle_bps, cl.network_bps)


def _combine_stage(cal: Calibration, cl: Cluster, r: int, record: float, run: int, over: float) -> float:
    """``FanIn``'s combine stage: the group tasks write their ``r`` records to the shuffle, ``E`` JVM tasks read
    (mostly remote) and sum ``r / E`` each in the tree's order."""
    E, S = cl.executors, cl.slots
    write = (r / S) * record / cal.shuffle_bps * over
    read = _shuffle_read(cal, cl, (r / E) * record)
    waves = math.ceil(E / run)
    return cal.stage_s + cal.task_driver_s * E + write + waves * (read + (r / E) * cl.parameters / cal.driver_sum_fps)


def _rounds(executors: int) -> int:
    return max(1, math.ceil(math.log2(executors + 1)))


def predict(cal: Calibration, cl: Cluster, strategy: Strategy) -> dict:
    """Predicted seconds of one iteration by part (``launch``, ``weights``, ``compute``, ``gather``,
    ``shuffle``, ``reduce``) and ``total``; also ``driver_bytes``, what reaches the driver per iteration."""
    S, E, N, P = cl.slots, cl.executors, cl.partitions, cl.parameters
    run = min(S, cl.host_cores or S)  # slots that really run at once
    over = S / run  # > 1: tasks share cores
    net = cl.network_bps
    record = cal.record_overhead_bytes + cl.value_bytes * P
    weight_bytes = 4 * P
    waves = math.ceil(S / run)
    out = {"launch": cal.one_jvm_launch_s if cl.one_jvm else cal.job_s + cal.task_driver_s * S
           + cal.task_python_s * waves}
    # Weights: a broadcast unless small enough to ride in the tasks; each Python task then reads them. On one
    # host the executors share its cores to receive a broadcast; across hosts each has its own link.
    inline = strategy.name != "shuffle" and weight_bytes <= INLINE_WEIGHT_BYTES
    share = max(1.0, E / cl.host_cores) if cl.host_cores else 1.0
    if cl.one_jvm:
        ship = 0.0
    elif inline:
        ship = over * weight_bytes / min(cal.inline_bps, net)  # each task's copy
    elif strategy.name == "shuffle":  # fetched from the executors that hold the blocks, no torrent rounds
        ship = share * weight_bytes / min(cal.fetch_bps, net)
    else:
        bw = min(cal.broadcast_bps, net)
        ship = share * (weight_bytes + _rounds(E) * min(weight_bytes, TORRENT_BLOCK_BYTES)) / bw
    out["weights"] = ship + weight_bytes / cal.weights_in_bps * over
    parts_per_task, rows_per_task = N / S, cl.batch_size / S
    r = cl.records
    out["compute"] = over * (P * (rows_per_task * cal.row_param_s + parts_per_task * cal.partition_param_s)
                             + (r / S) * record / cal.python_io_bps)
    gather = min(cal.gather_bps, net)
    update = P * cal.update_param_s
    if strategy.name == "driver":
        direct = r <= FAN_IN_PER_EXECUTOR * E
        received = r if direct else min(r, E)
        out["shuffle"] = 0.0 if direct else _combine_stage(cal, cl, r, record, run, over)
        out["gather"] = received * record / gather
        out["reduce"] = received * P / cal.driver_sum_fps + update
        out["driver_bytes"] = received * record
    elif strategy.name == "shuffle":
        K = strategy.blocks
        total = r * (RECORD_HEADER_BYTES * K + cl.value_bytes * P)  # every record is cut into K block records
        write = total / S / cal.shuffle_bps * over  # each task writes its share
        read = _shuffle_read(cal, cl, total / K)
        reduce_waves = math.ceil(K / run)
        out["shuffle"] = cal.stage_s + cal.task_driver_s * K + write + reduce_waves * read
        out["reduce"] = reduce_waves * (r * P / K / cal.driver_sum_fps + update / K)
        out["driver_bytes"] = K * REDUCE_RESULT_BYTES  # the reduce tasks' results: no weights
        out["gather"] = out["driver_bytes"] / gather
    else:
        raise ValueError(f"predict: strategy.name must be 'driver' or 'shuffle', got {strategy.name!r}")
    out["total"] = sum(out[k] for k in ("launch", "weights", "compute", "gather", "shuffle", "reduce"))
    return out


def efficiency(cal: Calibration, cl: Cluster, strategy: Strategy, base: Cluster, base_strategy: Strategy) -> float:
    """Weak-scaling efficiency: samples/s of ``cl`` over (samples/s of ``base`` times the ratio of slots)."""
    rate = cl.batch_size / predict(cal, cl, strategy)["total"]
    base_rate = base.batch_size / predict(cal, base, base_strategy)["total"]
    return rate / (base_rate * cl.slots / base.slots)
