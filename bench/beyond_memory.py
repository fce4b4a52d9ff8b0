"""Training data beyond the executors' storage memory (issue 30, item 3): same trajectory, and its throughput.

Trains one small network on one data set several times, each in its own SparkContext (one after the other, in
this process) and compares the final weights bit for bit:

* ``ample``: Spark's default memory settings; every cached partition fits in the executors' storage memory;
* ``tight``: ``spark.memory.fraction`` lowered so that the executors' storage memory (Spark's unified memory
  region, which caching may fill) is ``1/--factor`` of the data: most cached partitions spill to disk
  (``MEMORY_AND_DISK``, the default storage level of :class:`~sparkdl.engine.DataBlocks`); iterations after the
  first read the executor-local copies on disk (``local_data_copy=True``, the default);
* ``tight_no_local_copy``: the same, but every iteration reads the cached partitions, most of them from disk;
* ``tight_disk_only``: the data cached with ``StorageLevel.DISK_ONLY`` (no storage memory used at all).

The storage memory is measured, not assumed: the ``ample`` run reads every executor's maximum storage memory
(``SparkContext.getExecutorMemoryStatus``) and scales ``spark.memory.fraction`` from it. Each run reports where
its cached partitions ended up (memory and disk bytes), the first iteration's time and the samples/s of the
later iterations. The last line printed is one JSON object.

    python bench/beyond_memory.py                                   # local[2], 3x of 64 MB storage memory
    python bench/beyond_memory.py --master local-cluster[2,1,1024]  # executors in their own JVMs
    python bench/beyond_memory.py --quick                           # the test's setting (~8 MB, a few s)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Spark's reserved system memory (``RESERVED_SYSTEM_MEMORY_BYTES``) and default ``spark.memory.fraction``.
_DEFAULT_FRACTION = 0.6


def _session(master: str, memory_fraction: float | None):
    from sparkdl.engine import get_or_create_session
    # 2g: on local[...] the driver JVM also holds the parallelized data, the tasks that carry it and the cache
    # (1g ran out of heap in the scheduler's thread); the storage memory is set through the fraction below
    conf = {"spark.ui.enabled": "false", "spark.driver.memory": "2g", "spark.executor.memory": "1g"}
    if memory_fraction is not None:
        conf["spark.memory.fraction"] = f"{memory_fraction:.6f}"
    return get_or_create_session(master, app_name="sparkdl-bench-beyond-memory", conf=conf)


def storage_memory(sc) -> int:
    """The smallest maximum storage memory (bytes) of the session's block managers: on ``local[...]`` the driver's
    (the executor), on ``local-cluster[n,...]`` an executor's (the driver's heap is larger, :func:`_session`).
    Waits until the n executors have registered: measured earlier, the driver's was the only one."""
    wanted = 1 + (int(sc.master.split("[")[1].split(",")[0]) if sc.master.startswith("local-cluster") else 0)
    deadline = time.time() + 120
    while True:
        status = sc._jsc.sc().getExecutorMemoryStatus()  # Map[host:port, (max memory, remaining)]
        values = []
        it = status.iterator()
        while it.hasNext():
            values.append(int(it.next()._2()._1()))
        if len(values) >= wanted or time.time() > deadline:
            return min(values)
        time.sleep(0.5)


def cached_bytes(sc, rdd) -> dict:
    """Where the partitions of the cached ``rdd`` are: bytes in memory and on disk, cached partitions."""
    for info in sc._jsc.sc().getRDDStorageInfo():
        if info.id() == rdd.id():
            return {"memory_bytes": int(info.memSize()), "disk_bytes": int(info.diskSize()),
                    "cached_partitions": int(info.numCachedPartitions()), "partitions": int(info.numPartitions())}
    return {"memory_bytes": 0, "disk_bytes": 0, "cached_partitions": 0, "partitions": rdd.getNumPartitions()}


def make_data(rows: int, features: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, features)).astype(np.float32)
    w = rng.standard_normal((features, 4)).astype(np.float32)
    y = np.argmax(x @ w, axis=1).astype(np.int64)
    return x, y


def train(sc, x, y, partitions: int, iterations: int, batch_size: int, local_data_copy=True, disk_only=False):
    """One fit; returns the final weights and the run's figures."""
    from pyspark import StorageLevel

    from sparkdl import nn
    from sparkdl.engine import DataBlocks, DistributedTrainer, MaxIteration
    from sparkdl.optim import SGD
    level = StorageLevel.DISK_ONLY if disk_only else StorageLevel.MEMORY_AND_DISK
    t = time.perf_counter()
    data = DataBlocks.from_numpy(sc, x, y, partitions, storage_level=level)
    load_s = time.perf_counter() - t
    where = cached_bytes(sc, data.rdd)
    model = nn.Sequential(nn.Linear(x.shape[1], 16), nn.ReLU(), nn.Linear(16, 4)).initialize(7)
    trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=0.05, momentum=0.9), batch_size=batch_size,
                                 end_trigger=MaxIteration(iterations), progress=False,
                                 local_data_copy=local_data_copy)
    summary = trainer.fit(data)
    data.unpersist()
    secs = [r["seconds"] for r in summary.iterations]
    later = secs[1:] or secs
    return model.flat_parameters.copy(), {
        "load_s": round(load_s, 3), **where, "first_iteration_s": round(secs[0], 3),
        "later_iteration_ms": round(1000 * float(np.median(later)), 2),
        "later_samples_per_s": round(batch_size * len(later) / sum(later), 1),
        "final_loss": float(summary.iterations[-1]["loss"])}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--storage-mb", type=float, default=64.0, help="storage memory per executor in the tight runs")
    ap.add_argument("--factor", type=float, default=3.0, help="data size / storage memory")
    ap.add_argument("--features", type=int, default=256)
    ap.add_argument("--partitions-per-storage", type=int, default=3,
                    help="partitions per storage memory's worth of data (partition = storage / this)")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--quick", action="store_true", help="8 MB storage, 6 iterations (what the test runs)")
    args = ap.parse_args(argv)
    if args.quick:
        args.storage_mb, args.iterations = 8.0, 6
    target = int(args.storage_mb * (1 << 20))
    executors = 1
    if args.master.startswith("local-cluster["):
        executors = int(args.master[len("local-cluster["):].split(",")[0])
    data_bytes = int(args.factor * target * executors)
    rows = data_bytes // (4 * args.features)
    partitions = max(2, int(round(args.factor * args.partitions_per_storage)) * executors)
    x, y = make_data(rows, args.features)
    out = {"master": args.master, "rows": rows, "features": args.features, "partitions": partitions,
           "data_bytes": int(x.nbytes), "iterations": args.iterations, "batch_size": args.batch_size, "runs": {}}
    weights = {}

    spark = _session(args.master, None)
    sc = spark.sparkContext
    ample_storage = storage_memory(sc)
    weights["ample"], out["runs"]["ample"] = train(sc, x, y, partitions, args.iterations, args.batch_size)
    out["runs"]["ample"]["storage_memory_bytes"] = ample_storage
    spark.stop()

    fraction = _DEFAULT_FRACTION * target / ample_storage
    spark = _session(args.master, fraction)
    sc = spark.sparkContext
    out["tight_memory_fraction"] = round(fraction, 6)
    out["tight_storage_memory_bytes"] = storage_memory(sc)
    for name, kwargs in (("tight", {}), ("tight_no_local_copy", {"local_data_copy": False}),
                         ("tight_disk_only", {"disk_only": True})):
        weights[name], out["runs"][name] = train(sc, x, y, partitions, args.iterations, args.batch_size, **kwargs)
    spark.stop()
    out["data_over_storage"] = round(out["data_bytes"] / (out["tight_storage_memory_bytes"] * executors), 2)
    out["identical_to_ample"] = {k: bool(np.array_equal(w, weights["ample"])) for k, w in weights.items()
                                 if k != "ample"}
    for name, r in out["runs"].items():
        print(f"{name:22s} memory {r['memory_bytes'] / 2**20:7.1f} MB  disk {r['disk_bytes'] / 2**20:7.1f} MB  "
              f"first iteration {r['first_iteration_s']:6.2f} s  later {r['later_samples_per_s']:10,.0f} samples/s")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
