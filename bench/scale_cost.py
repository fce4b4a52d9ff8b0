"""The iteration-time cost model of ``bench/scale_model.py``: pure functions of measured parts, no Spark.

One iteration of the JVM-reduce engine after the first (gradient tasks read executor-local data copies) on
``E`` executors of ``C`` cores (``S = E * C`` task slots), ``N`` data partitions, ``P`` float32 parameters, a
global batch of ``B`` rows and ``b`` bytes per gradient value (4, or 2 with ``compress='fp16'``):

* **launch**: ``job_s + task_driver_s * S + task_python_s * waves`` — one Spark job, the driver schedules ``S``
  group tasks, each Python task has a fixed executor-side cost; ``waves = ceil(S / cores that really run)``.
* **weights**: ``4P`` bytes reach every executor (inside the tasks up to 512 KB on the driver path, else a torrent
  broadcast, pipelined in 4 MB blocks: ``(4P + ceil(log2(E + 1)) * 4 MB) / bandwidth``), then each of the ``C``
  Python tasks of an executor reads them from its JVM.
* **compute**: each group task computes ``N / S`` partitions with ``B / S`` rows in all:
  ``P * (rows * row_param_s + partitions * partition_param_s)``, and writes one record per partition
  (``record_overhead_bytes + b * P``: measured from task result sizes; the format's headers are 80 bytes) to its
  JVM at ``python_io_bps``.
* **reduce**, one of three strategies (:func:`reduce_strategy` picks the engine's):
  ``driver``: every partition's record is a task result, the driver receives ``N`` records over its link and sums
  them (``driver_sum_fps`` floats/s) then updates (``update_param_s`` per parameter);
  ``driver-presum``: each executor first sums its own partitions' records, the driver receives ``E`` records;
  ``shuffle``: ``K`` AllReduce blocks, the records go through Spark's shuffle (write at ``shuffle_bps``, read over
  the network), ``K`` JVM reduce tasks (a second stage: ``stage_s``) sum and update a block each, and the new
  shards (``4P`` bytes) come back to the driver.

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
           "INLINE_WEIGHT_BYTES"]

#: A gradient record's header (``Frames.java``; ``sparkdl.engine.jvm_reduce._RECORD``: kind, block, partition,
#: reserved, loss, normalizer, count) — plus one buffers record of the same header per partition.
RECORD_HEADER_BYTES = 2 * struct.calcsize("<iiiiddq")
#: Weights up to this size travel inside the tasks on the driver path (``TrainingLoop.INLINE_WEIGHT_BYTES``).
INLINE_WEIGHT_BYTES = 512 * 1024


@dataclass
class Calibration:
    """The measured parts (seconds, bytes/s, floats/s); ``bench/scale_model.py --calibrate`` writes them as JSON."""

    job_s: float  # fixed cost of a one-stage job with Python tasks (py4j call, DAG scheduling, result handling)
    task_driver_s: float  # driver-side cost per task (scheduling, serialization, launch)
    task_python_s: float  # executor-side fixed cost per Python task (worker hand-off, deserialization)
    stage_s: float  # extra fixed cost of a second (shuffle) stage
    row_param_s: float  # gradient compute per row and parameter (forward + backward, one core)
    partition_param_s: float  # per partition and parameter (gradient buffer, per-partition pass)
    python_io_bps: float  # Python task <-> its JVM (records out, weights in)
    gather_bps: float  # task results reaching the driver JVM (one host: loopback)
    broadcast_bps: float  # a JVM broadcast reaching another executor (one host: loopback)
    shuffle_bps: float  # shuffle write + read of raw records (one host)
    driver_sum_fps: float  # float32 values summed per second by the JVM reduce (driver or task)
    update_param_s: float  # optimizer update per parameter (JVM)
    record_overhead_bytes: float = RECORD_HEADER_BYTES  # a partition's task result bytes beyond its b * P
    host: str = ""

    @classmethod
    def from_dict(cls, d: dict) -> "Calibration":
        names = {f.name for f in fields(cls)}
        missing = sorted(names - set(d) - {"host", "record_overhead_bytes"})
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

    @property
    def slots(self) -> int:
        return self.executors * self.cores


@dataclass(frozen=True)
class Strategy:
    """A reduce strategy: ``name`` in {'driver', 'driver-presum', 'shuffle'}, ``blocks`` K."""

    name: str
    blocks: int


def reduce_strategy(parameters: int, partitions: int, executors: int, cores: int, block_parameters: int,
                    driver_reduce: bool = True) -> Strategy:
    """The reduce the engine runs for this configuration — THE RULE TO ALIGN WITH THE ENGINE AT MERGE.

    Mirrors ``sparkdl/engine/loop.py`` (``K = min(partitions, ceil(P / BLOCK_PARAMETERS))``) and
    ``sparkdl/engine/jvm_reduce.py`` (one block and ``DRIVER_REDUCE``: the driver sums every partition's record;
    otherwise K JVM reduce tasks after a shuffle). ``executors`` and ``cores`` are unused by today's rule; a
    fan-in rule (``driver-presum`` when the driver would receive more than executors x model bytes) decides
    with them.
    """
    blocks = min(partitions, -(-parameters // block_parameters))
    if blocks == 1 and driver_reduce:
        return Strategy("driver", 1)
    return Strategy("shuffle", max(1, blocks))


#: ``spark.broadcast.blockSize`` (default 4 MB): a torrent broadcast is pipelined in blocks of this size.
TORRENT_BLOCK_BYTES = 4 << 20


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
    out = {"launch": cal.job_s + cal.task_driver_s * S + cal.task_python_s * waves}
    # Weights: a broadcast unless small enough to ride in the tasks; each Python task then reads them.
    inline = strategy.name != "shuffle" and weight_bytes <= INLINE_WEIGHT_BYTES
    bw = min(cal.broadcast_bps, net)
    bcast = 0.0 if inline or cl.one_jvm else (weight_bytes + _rounds(E) * min(weight_bytes, TORRENT_BLOCK_BYTES)) / bw
    out["weights"] = bcast + weight_bytes / cal.python_io_bps * over
    parts_per_task, rows_per_task = N / S, cl.batch_size / S
    out["compute"] = over * (P * (rows_per_task * cal.row_param_s + parts_per_task * cal.partition_param_s)
                             + parts_per_task * record / cal.python_io_bps)
    gather = min(cal.gather_bps, net)
    update = P * cal.update_param_s
    if strategy.name == "driver":
        out["gather"], out["shuffle"] = N * record / gather, 0.0
        out["reduce"] = N * P / cal.driver_sum_fps + update
        out["driver_bytes"] = N * record
    elif strategy.name == "driver-presum":
        presum = (N / E) * P / cal.driver_sum_fps  # on each executor, in parallel
        out["gather"], out["shuffle"] = E * record / gather, 0.0
        out["reduce"] = presum + E * P / cal.driver_sum_fps + update
        out["driver_bytes"] = E * record
    elif strategy.name == "shuffle":
        K = strategy.blocks
        total = N * (RECORD_HEADER_BYTES * K + cl.value_bytes * P)  # every partition writes K block records
        write = parts_per_task * (total / N) / cal.shuffle_bps * over
        remote = (E - 1) / E if E > 1 else 0.0  # share of a reduce task's input on other executors
        per_reduce = total / K
        read = per_reduce * (1 - remote) / cal.shuffle_bps + per_reduce * remote / min(cal.shuffle_bps, net)
        reduce_waves = math.ceil(K / run)
        out["shuffle"] = cal.stage_s + cal.task_driver_s * K + write + reduce_waves * read
        out["reduce"] = reduce_waves * (N * P / K / cal.driver_sum_fps + update / K)
        out["gather"] = weight_bytes / gather  # the new shards
        out["driver_bytes"] = weight_bytes + K * RECORD_HEADER_BYTES
    else:
        raise ValueError("predict: strategy.name must be 'driver', 'driver-presum' or 'shuffle', "
                         f"got {strategy.name!r}")
    out["total"] = sum(out[k] for k in ("launch", "weights", "compute", "gather", "shuffle", "reduce"))
    return out


def efficiency(cal: Calibration, cl: Cluster, strategy: Strategy, base: Cluster, base_strategy: Strategy) -> float:
    """Weak-scaling efficiency: samples/s of ``cl`` over (samples/s of ``base`` times the ratio of slots)."""
    rate = cl.batch_size / predict(cal, cl, strategy)["total"]
    base_rate = base.batch_size / predict(cal, base, base_strategy)["total"]
    return rate / (base_rate * cl.slots / base.slots)
