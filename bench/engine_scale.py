"""The scale parts of bench/engine.py (issue #30): partitions scaling with the driver's fan-in, and large models.

    python bench/engine.py --partitions 2,100,1000          # 0.87M-parameter MLP, default maxResultSize
    python bench/engine.py --sync-sizes 10M,100M            # multi-block sync vs a bare reduceByKey
    python bench/engine.py --large 25M,100M                 # MLPs of ~25M / ~100M parameters, a few iterations

Each option runs only its own part and prints one JSON object last.
"""
from __future__ import annotations

import os
import time

import numpy as np

__all__ = ["parse_sizes", "mlp", "partitions_scaling", "large_models"]


def parse_sizes(text: str) -> list[int]:
    """``"2,100,1000"`` or ``"10M,100M"`` -> ints."""
    out = []
    for part in text.split(","):
        part = part.strip().upper()
        scale = 1_000_000 if part.endswith("M") else 1_000 if part.endswith("K") else 1
        out.append(int(float(part.rstrip("MK")) * scale))
    return out


def mlp(params: int):
    """An MLP ``d -> h -> h -> 10`` with about ``params`` parameters (h = 2d), and its input width d."""
    from sparkdl import nn
    d = max(8, int(round((params / 6) ** 0.5)))  # 2d^2 + 4d^2 parameters dominate
    h = 2 * d
    return nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10)), d


def _driver_bytes(jobs):
    """Per iteration job: bytes of task results the driver received (its last stage's)."""
    return [j["stages"][-1]["result_bytes"] for j in jobs if j["stages"]]


def _fit(sc, model, x, y, partitions, batch_size, iterations, profile=True, hook=None, **kw):
    from sparkdl import nn
    from sparkdl.engine import DataBlocks, DistributedTrainer, MaxIteration
    from sparkdl.jvm import start_profiler, stop_profiler
    from sparkdl.optim import SGD
    data = DataBlocks.from_numpy(sc, x, y, partitions)
    trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=0.01, momentum=0.9), batch_size=batch_size,
                                 end_trigger=MaxIteration(iterations), progress=False, **kw)
    if hook is not None:
        hook(trainer)
    if profile:
        start_profiler(sc)
    t = time.perf_counter()
    try:
        summary = trainer.fit(data)
    finally:
        wall = time.perf_counter() - t
        time.sleep(1.0)  # the listener bus delivers the last events asynchronously
        jobs = stop_profiler(sc) if profile else []
        data.unpersist()
    return summary, wall, jobs


def partitions_scaling(sc, counts, iterations: int) -> dict:
    """0.87M-parameter MLP (one AllReduce block, driver reduce) on ``counts`` partitions: median iteration ms
    after 3, and the driver's received bytes per iteration against 2 x executors x model bytes."""
    from sparkdl import nn
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8192, 784)).astype(np.float32)
    y = rng.integers(0, 10, 8192)
    executors = max(1, len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1)
    out = {}
    for n in counts:
        model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 64), nn.ReLU(), nn.Linear(64, 10))
        model_bytes = 4 * model.num_parameters()
        summary, wall, jobs = _fit(sc, model, x, y, n, 256, iterations)
        secs = [1000 * r["seconds"] for r in summary.iterations[3:]]
        received = _driver_bytes(jobs)[-iterations:]
        out[str(n)] = {"iteration_ms": round(float(np.median(secs)), 1), "first_iteration_ms":
                       round(1000 * summary.iterations[0]["seconds"], 1), "fit_s": round(wall, 2),
                       "driver_bytes_max": max(received), "driver_bytes_first": received[0],
                       "bound_2_x_executors_x_model": 2 * executors * model_bytes,
                       "within_bound": max(received) <= 2 * executors * model_bytes + 32768 * 2 * executors}
        print(f"{n:>5} partitions: {out[str(n)]}")
    base = out[str(counts[0])]["iteration_ms"]
    for n in counts[1:]:
        out[str(n)]["ratio_to_first"] = round(out[str(n)]["iteration_ms"] / base, 3)
    return out


def _descendants(pid: int) -> list:
    """Every descendant process of ``pid`` (Linux ``/proc/<pid>/task/<tid>/children``)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except FileNotFoundError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(c) for c in f.read().split()]
            except FileNotFoundError:
                continue
            out += kids
            todo += kids
    return out


def _round(v: float, digits: int = 0):
    """``round(v, digits)``, None for NaN."""
    return None if v != v else round(v, digits) if digits else round(v)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return ""


def large_models(sc, sizes, iterations: int, compress=None) -> dict:
    """MLPs of about each size in ``sizes`` (several AllReduce blocks) for ``iterations`` iterations: iteration ms,
    and the driver JVM's RSS and live heap (after a full collection) before, at iteration 10 and at the end, in MB
    and as growth in model bytes. On ``local[...]`` the driver JVM also runs the executors' tasks; on
    ``local-cluster[...]`` it is the driver alone, and the largest executor JVM's RSS is recorded too (in MB and
    in model bytes). The largest Python worker's RSS is recorded on both."""
    from bench.engine import rss_mb
    jvm = sc._jvm
    jvm_pid = jvm.java.lang.ProcessHandle.current().pid()
    runtime = jvm.java.lang.Runtime.getRuntime()

    def memory():
        jvm.java.lang.System.gc()
        return rss_mb(jvm_pid), (runtime.totalMemory() - runtime.freeMemory()) / 2 ** 20

    def executors():
        """RSS in MB of the largest executor JVM and of the largest Python worker (the driver JVM's descendants:
        on local-cluster the executor JVMs and their Python daemons and workers; on local[...] the workers)."""
        jvms, pythons = [], []
        for pid in _descendants(jvm_pid):
            cmd = _cmdline(pid)
            if "CoarseGrainedExecutorBackend" in cmd:
                jvms.append(rss_mb(pid))
            elif "python" in cmd:
                pythons.append(rss_mb(pid))
        return max(jvms, default=float("nan")), max(pythons, default=float("nan"))

    out = {}
    for p in sizes:
        model, d = mlp(p)
        model.initialize(0)
        model_mb = 4 * model.num_parameters() / 2 ** 20
        rng = np.random.default_rng(0)
        x, y = rng.standard_normal((256, d)).astype(np.float32), rng.integers(0, 10, 256)
        marks, workers = {"before": memory()}, {"before": executors()}

        def hook(trainer):
            record = trainer._record

            def spy(*a):
                record(*a)
                if trainer.state.iteration == min(10, iterations - 1):
                    marks["at_10"] = memory()
                    workers["at_10"] = executors()
            trainer._record = spy
        summary, wall, _ = _fit(sc, model, x, y, 2, 32, iterations, profile=False, compress=compress, hook=hook)
        marks["end"], workers["end"] = memory(), executors()
        secs = [1000 * r["seconds"] for r in summary.iterations]
        r = out[str(p)] = {"params": model.num_parameters(), "model_mb": round(model_mb, 1),
                           "iteration_ms": [round(s) for s in secs[:10]],
                           "median_ms_after_5": round(float(np.median(secs[5:] or secs))), "fit_s": round(wall, 1),
                           "python_driver_rss_mb": round(rss_mb(os.getpid()))}
        for name, (rss, heap) in marks.items():
            r[f"driver_rss_mb_{name}"], r[f"driver_live_heap_mb_{name}"] = round(rss), round(heap)
        for name, (jvm_rss, python_rss) in workers.items():  # None: no such process (yet)
            r[f"executor_jvm_rss_mb_{name}"], r[f"python_worker_rss_mb_{name}"] = _round(jvm_rss), _round(python_rss)
            r[f"executor_jvm_rss_in_models_{name}"] = _round(jvm_rss / model_mb, 2)
            r[f"python_worker_rss_in_models_{name}"] = _round(python_rss / model_mb, 2)
        for name in ("at_10", "end"):
            r[f"rss_growth_in_models_{name}"] = round((marks[name][0] - marks["before"][0]) / model_mb, 2)
            r[f"live_heap_growth_in_models_{name}"] = round((marks[name][1] - marks["before"][1]) / model_mb, 2)
        print(f"P={model.num_parameters():,} ({compress or 'fp32'}): {r}")
    return out
