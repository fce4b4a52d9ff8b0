"""The measurements behind ``bench/scale_model.py --calibrate``: one small Spark job (or in-process timing) per
part of the cost model (:class:`scale_cost.Calibration`) that such jobs isolate, each by a difference of two jobs
or a line fit over a few sizes; the transfers fitted jointly on engine runs (:func:`transfer_fit`). Also the engine
runs both ``--calibrate`` and ``--validate`` use: an MLP of a given parameter count trained for a few iterations,
with the driver JVM's timings of each iteration.
"""
from __future__ import annotations

import dataclasses
import math
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from engine import median_ms  # noqa: E402  (bench/engine.py)
from scale_cost import Calibration  # noqa: E402

__all__ = ["calibrate", "driver_task_part", "mlp", "reduce_parts", "transfer_fit", "train_iterations", "warm_up",
           "FEATURES"]

#: Input features of the MLPs (``FEATURES -> hidden -> 10``); the hidden width sets the parameter count.
FEATURES = 1000


def _ship_by_value():
    """Spark's workers cannot import this file: its functions travel inside the tasks (cloudpickle by value)."""
    from pyspark import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _median_s(fn, repeats: int, warmup: int = 1) -> float:
    return median_ms(fn, repeats, warmup) / 1000


def _drain(it):
    for _ in it:
        pass
    return iter(())


def _emit(size, it):
    for _ in it:
        pass
    yield bytes(size)


def warm_up(sc, jobs: int = 5, tasks: int = 64) -> None:
    """Run ``jobs`` empty Python jobs of ``tasks`` tasks: the model predicts a long run's steady state, and on a
    fresh ``local-cluster`` a 100k-parameter model's iteration took 0.10-0.13 s for the first few hundred tasks and
    0.06 s after them (the executors' JVMs and Python workers warming up), whatever the training's own warm-up."""
    from sparkdl.jvm import count_on_jvm
    _ship_by_value()
    rdd = sc.parallelize(range(tasks), tasks).mapPartitions(_drain)
    for _ in range(jobs):
        count_on_jvm(rdd)


def mlp(parameters: int):
    """A ``FEATURES -> h -> 10`` MLP with about ``parameters`` parameters."""
    from sparkdl import nn
    hidden = max(1, round((parameters - 10) / (FEATURES + 11)))
    return nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, 10)).initialize(0)


def launch_parts(sc, repeats: int, task_driver_s: float, iterations: int) -> dict:
    """``task_python_s`` and ``job_s``.

    ``task_python_s``, the executor side of one Python task (the round trip to the driver included): the slope of
    empty Python jobs over 2..64 tasks on ``sc``'s slots, ``t(T) = c + T * task_driver_s + waves(T) *
    task_python_s``. ``job_s``: an iteration of the engine on a tiny model (~1k parameters, nothing else costs)
    less its ``S`` tasks' launch — bare PySpark jobs cost more than the engine's job (raw records, no pickling, no
    closure cleaning), so its own iteration is the floor."""
    from sparkdl.jvm import count_on_jvm
    counts = [2, 16, 64]
    # One Python RDD per size, reused: a new one per job would ship (broadcast) its function every time, which
    # the engine's per-iteration job does not (its gradient RDD is built once per fit).
    rdds = {t: sc.parallelize(range(t), t).mapPartitions(_drain) for t in counts}
    py = [_median_s(lambda t=t: count_on_jvm(rdds[t]), repeats) for t in counts]
    slots = sc.defaultParallelism
    slope_py, _ = np.polyfit(counts, py, 1)
    task_python_s = max(float(slope_py) - task_driver_s, 1e-6) * slots
    tiny = train_iterations(sc, 1, slots, iterations, 2)["seconds"]
    return {"job_s": max(tiny - slots * task_driver_s - task_python_s, 1e-4), "task_python_s": task_python_s}


def driver_task_part(sc, repeats: int) -> dict:
    """``task_driver_s``: the driver's cost per task, from JVM-only jobs of 1..32 trivial tasks on a master with at
    least 32 slots (``local[32]``), so that every task starts in the first wave."""
    from sparkdl.jvm import count_on_jvm
    counts = [1, 8, 32]
    rdds = {t: sc.parallelize(range(t), t) for t in counts}
    jvm = [_median_s(lambda t=t: count_on_jvm(rdds[t]), repeats, 3) for t in counts]
    slope, _ = np.polyfit(counts, jvm, 1)
    return {"task_driver_s": max(float(slope), 1e-6)}


def compute_parts(repeats: int, parameters: int = 1_000_000) -> dict:
    """``row_param_s``, ``partition_param_s``: one partition's gradient (one thread, as a task with
    ``spark.task.cpus=1``) for 4 and 64 rows, in this process: ``t(n) = P * (partition_param_s + n * row_param_s)``."""
    from sparkdl import nn
    from sparkdl.engine.worker import dropout_rng, local_gradient, task_scope
    from sparkdl.step import sum_reduction
    model = mlp(parameters)
    P = model.num_parameters()
    loss = sum_reduction(nn.CrossEntropyLoss())
    rng = np.random.default_rng(0)
    rows = [4, 64]
    times = []
    with task_scope(1):
        for n in rows:
            x = rng.standard_normal((n, FEATURES)).astype(np.float32)
            y = rng.integers(0, 10, n)
            times.append(_median_s(lambda: local_gradient(model, loss, x, y, dropout_rng(0, 0, 0, 0)), repeats, 2))
    slope, intercept = np.polyfit(rows, times, 1)
    return {"row_param_s": max(float(slope), 1e-15) / P, "partition_param_s": max(float(intercept), 1e-6) / P}


def io_parts(sc, repeats: int, size: int = 32 << 20) -> dict:
    """``python_io_bps`` (tasks writing ``size`` bytes each to their JVM, counted there) and ``gather_bps`` (the
    records collected to the driver)."""
    from sparkdl.jvm import count_on_jvm
    slots = sc.defaultParallelism
    src = sc.parallelize(range(slots), slots)
    empty, emitted = src.mapPartitions(_drain), src.mapPartitions(lambda it: _emit(size, it))
    lengths = emitted.map(len)
    python_io = size / max(_median_s(lambda: count_on_jvm(emitted), repeats) -
                           _median_s(lambda: count_on_jvm(empty), repeats), 1e-4)
    gathered = _median_s(emitted.collect, repeats) - _median_s(lengths.collect, repeats)
    gather = slots * size / max(gathered, 1e-4)
    return {"python_io_bps": python_io, "gather_bps": gather}


#: The parts :func:`transfer_fit` fits (throughputs, bytes/s) besides ``stage_s`` (seconds).
TRANSFER_PARTS = ("weights_in_bps", "inline_bps", "broadcast_bps", "fetch_bps", "shuffle_bps")


def transfer_fit(cal: Calibration, runs: list) -> dict:
    """``stage_s`` and the throughputs of :data:`TRANSFER_PARTS`, fitted jointly on engine runs.

    ``runs`` is ``[(cluster, strategy, seconds)]``: :func:`train_iterations` runs of sizes the validation does not
    use, on ``local[2]`` (one JVM: the weights only read by the Python tasks) and on ``local-cluster`` masters
    (weights inside the tasks, broadcast, or fetched after the shuffle reduce). The model is
    linear in ``stage_s`` and in each part's seconds per byte, so what a run costs beyond every other part of
    ``cal`` is fitted by non-negative least squares on relative errors (each run's row divided by its measured
    seconds). Micro-benchmarks priced these paths badly: PySpark's ``partitionBy`` (pickled pairs, a Python map
    stage) put ``stage_s`` at ~0.1 s where the engine's reduce stage costs 0.01-0.05 s, and a cached RDD drained by
    Python gave ``weights_in_bps`` anywhere in 256-605 MB/s between calibrations; one run per part absorbed
    every other part's error into it."""
    from scipy.optimize import nnls

    from scale_cost import predict
    free = dataclasses.replace(cal, stage_s=0.0, **{f: math.inf for f in TRANSFER_PARTS})
    rows, ys = [], []
    for cl, rule, seconds in runs:
        base = predict(free, cl, rule)["total"]
        row = [predict(dataclasses.replace(free, stage_s=1.0), cl, rule)["total"] - base]
        row += [predict(dataclasses.replace(free, **{f: 1.0}), cl, rule)["total"] - base for f in TRANSFER_PARTS]
        rows.append(np.array(row) / seconds)
        ys.append((seconds - base) / seconds)
    a = np.array(rows)
    coef, _ = nnls(a, np.array(ys))
    used = a.any(axis=0)[1:]  # parts some run prices
    unpriced = [f for f, c, u in zip(TRANSFER_PARTS, coef[1:], used) if c == 0 and u]
    if unpriced:
        print(f"warning: transfer_fit: {unpriced} came out free (the other parts already price those runs)",
              file=sys.stderr)
    return {"stage_s": float(coef[0]), **{f: 1 / c if c > 0 else math.inf for f, c in zip(TRANSFER_PARTS, coef[1:])}}


def train_iterations(sc, parameters: int, partitions: int, iterations: int, warmup: int, batch_size: int = 64,
                     rows: int = 2048) -> dict:
    """Train :func:`mlp` (``parameters``) with SGD + momentum on ``partitions`` partitions for ``warmup +
    iterations`` iterations, one Spark job each (the engine's own reduce choice); the median seconds of the last
    ``iterations``, the reduce the engine ran, the driver JVM's milliseconds per iteration over them and the bytes
    of task results that reached the driver per iteration (Spark's task metrics)."""
    from sparkdl import nn
    from sparkdl.engine import DataBlocks, DistributedTrainer, MaxIteration
    from sparkdl.jvm import start_profiler, stop_profiler
    from sparkdl.optim import SGD
    rng = np.random.default_rng(1)
    x = rng.standard_normal((rows, FEATURES)).astype(np.float32)
    y = rng.integers(0, 10, rows)
    data = DataBlocks.from_numpy(sc, x, y, partitions)
    model = mlp(parameters)
    # One Spark job per iteration, the regime the cost model prices (several iterations per job apply to one-block
    # models on at most 2 tasks per executor only, and this hook times single-iteration steps)
    trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=0.01, momentum=0.9), batch_size=batch_size,
                                 end_trigger=MaxIteration(warmup + iterations), progress=False, iterations_per_job=1)
    seen = {}
    step = trainer._step

    def timed(*a):  # the driver JVM's timings over the measured iterations (the loop is closed after fit)
        if trainer.state.iteration == warmup:
            if trainer._jvm is not None:
                trainer._jvm.loop.take_timings()
            start_profiler(sc)
        step(*a)
        if trainer.state.iteration == warmup + iterations and trainer._jvm is not None:
            seen["jvm"] = trainer._jvm.loop.take_timings()
            seen["strategy"] = "driver" if trainer._jvm.driver_reduce else "shuffle"
            seen["blocks"] = len(trainer._jvm.bounds) - 1
            seen["records"] = trainer._jvm.loop.local_records()  # the group tasks' records per block
    trainer._step = timed
    summary = trainer.fit(data)
    data.unpersist()
    time.sleep(1.0)  # the listener bus delivers the last task metrics asynchronously
    jobs = [j for j in stop_profiler(sc) if j["stages"]]
    result_bytes = sum(st["result_bytes"] for j in jobs for st in j["stages"]) / iterations
    secs = [r["seconds"] for r in summary.iterations[warmup:]]
    jvm = seen.get("jvm") or {}
    per = {k: v / max(1, jvm.get("iterations", 1)) for k, v in jvm.items() if k.endswith("_ms")}
    return {"parameters": model.num_parameters(), "partitions": partitions, "batch_size": batch_size,
            "seconds": float(np.median(secs)), "strategy": seen.get("strategy", "python"),
            "blocks": seen.get("blocks"), "records": seen.get("records"), "jvm_ms": per,
            "driver_bytes": result_bytes}


def reduce_parts(runs: list) -> dict:
    """``driver_sum_fps``, ``update_param_s``, ``record_overhead_bytes`` from :func:`train_iterations` runs of the
    same one-block MLP whose driver received different numbers of records: ``runs`` is ``[(records, run)]``, e.g.
    ``local[1]`` (one group task: 1 record) and ``local[2]`` (2). The driver reduce's time per iteration
    (``TrainingLoop``'s timings) is ``t(r) = r * P / driver_sum_fps + P * update_param_s``; the overhead is the
    task result bytes per record beyond the ``4P`` of its gradient."""
    counts = [r for r, _ in runs]
    secs = [run["jvm_ms"].get("driver_reduce_ms", 0.0) / 1000 for _, run in runs]
    P = runs[0][1]["parameters"]
    slope, intercept = np.polyfit(counts, secs, 1)
    if slope <= 0:
        print(f"warning: the driver reduce took {secs} s with {counts} records: no summation cost measurable "
              "(a loaded machine?); rerun --calibrate", file=sys.stderr)
    records, last = runs[-1]
    overhead = last["driver_bytes"] / records - 4 * P
    return {"driver_sum_fps": P / max(float(slope), P / 1e10), "update_param_s": max(float(intercept), 1e-7) / P,
            "record_overhead_bytes": max(float(overhead), 0.0)}


def calibrate(sc, task_driver_s: float, reduce: dict, repeats: int = 5, iterations: int = 5) -> Calibration:
    """Every part but ``task_driver_s`` (:func:`driver_task_part`), the ``reduce`` parts (:func:`reduce_parts`
    and ``one_jvm_launch_s``, measured on local masters) and the transfers (:func:`transfer_fit`, left free here),
    measured on ``sc``'s master."""
    warm_up(sc)
    parts = {"task_driver_s": task_driver_s}
    parts.update(launch_parts(sc, repeats, task_driver_s, iterations))
    parts.update(compute_parts(repeats))
    parts.update(io_parts(sc, repeats))
    parts.update(reduce)
    parts.update({"stage_s": 0.0, **{f: math.inf for f in TRANSFER_PARTS}})
    parts["host"] = f"{platform.node()} {os.cpu_count()} cores, master {sc.master}"
    return Calibration.from_dict(parts)
