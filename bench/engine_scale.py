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


def _fit(sc, model, x, y, partitions, batch_size, iterations, profile=True, **kw):
    from sparkdl import nn
    from sparkdl.engine import DataBlocks, DistributedTrainer, MaxIteration
    from sparkdl.jvm import start_profiler, stop_profiler
    from sparkdl.optim import SGD
    data = DataBlocks.from_numpy(sc, x, y, partitions)
    trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=0.01, momentum=0.9), batch_size=batch_size,
                                 end_trigger=MaxIteration(iterations), progress=False, **kw)
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


def large_models(sc, sizes, iterations: int, compress=None) -> dict:
    """MLPs of about each size in ``sizes`` (several AllReduce blocks): iteration ms, driver JVM RSS before,
    after the first iteration and at the end (MB and in model bytes)."""
    from bench.engine import rss_mb
    jvm_pid = sc._jvm.java.lang.ProcessHandle.current().pid()
    out = {}
    for p in sizes:
        model, d = mlp(p)
        model.initialize(0)
        model_mb = 4 * model.num_parameters() / 2 ** 20
        rng = np.random.default_rng(0)
        x, y = rng.standard_normal((256, d)).astype(np.float32), rng.integers(0, 10, 256)
        rss0 = rss_mb(jvm_pid)
        summary, wall, _ = _fit(sc, model, x, y, 2, 32, iterations, profile=False, compress=compress)
        rss1 = rss_mb(jvm_pid)
        secs = [1000 * r["seconds"] for r in summary.iterations]
        out[str(p)] = {"params": model.num_parameters(), "model_mb": round(model_mb, 1),
                       "iteration_ms": [round(s) for s in secs], "fit_s": round(wall, 1),
                       "driver_rss_mb_before": round(rss0), "driver_rss_mb_after": round(rss1),
                       "driver_rss_growth_in_models": round((rss1 - rss0) / model_mb, 2),
                       "python_driver_rss_mb": round(rss_mb(os.getpid()))}
        print(f"P={model.num_parameters():,}: {out[str(p)]}")
    return out
