"""``bench/engine.py --connect``: a tiny model's iteration on Spark Connect against the classic path.

Starts a Connect server from the installed pyspark (local[2], as the classic session), then trains the same tiny
model on the same data, partitions and seed three ways and reports the median iteration time of each:
the classic session with its default reduce (the JVM reduce when the bridge is loaded), the classic session with
the Python reduce (``jvm_reduce=False``, whose trajectory the Connect transport reproduces bitwise), and the
Connect transport (one ``mapInArrow`` query per iteration, reduce and update on the client). Target (issue 29):
Connect <= 2x the classic path.

Every path first runs ``WARMUP`` unmeasured iterations: a fresh Connect server takes ~100 queries to compile its
query path (a query costs ~105 ms at first and ~60 ms later), and a long-running server is the case users meet.
Spark Connect's own floor is measured on the same server after the same warm-up: ``SELECT 1`` and a Python
``mapInArrow`` that reads the cached training frame and returns one row (no sparkdl code), interleaved.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

__all__ = ["connect_comparison"]


#: Unmeasured iterations before each measured fit.
WARMUP = 150


def _floors_ms(remote, frame, rounds: int = 40) -> dict:
    """Median ms of ``SELECT 1`` and of a no-op ``mapInArrow`` over ``frame``, interleaved round by round."""
    def _noop_task(batches):  # nested, so cloudpickle ships it by value (executors cannot import bench)
        import pyarrow as pa
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"a": [1]})

    times: dict = {"select_1": [], "noop_map_in_arrow": []}
    for _ in range(rounds):
        for name, query in (("select_1", lambda: remote.sql("SELECT 1")),
                            ("noop_map_in_arrow", lambda: frame.mapInArrow(_noop_task, "a long"))):
            t = time.perf_counter()
            query().toArrow()
            times[name].append(time.perf_counter() - t)
    return {k: round(1000 * float(np.median(v)), 1) for k, v in times.items()}


def _median_iteration_ms(data, iterations, jvm_reduce=None, warm=False):
    """Median ms per iteration (after 3) of the tiny model on ``data`` (DataBlocks or ConnectBlocks), after
    :data:`WARMUP` unmeasured iterations (none when ``warm``: the caller ran them)."""
    if not warm:
        _fit(data, WARMUP, jvm_reduce)
    summary = _fit(data, iterations, jvm_reduce)
    data.unpersist()
    return 1000 * float(np.median([r["seconds"] for r in summary.iterations[3:]]))


def _fit(data, iterations, jvm_reduce):
    from sparkdl import nn
    from sparkdl.engine import DistributedTrainer, MaxIteration
    from sparkdl.optim import SGD
    trainer = DistributedTrainer(nn.Sequential(nn.Linear(10, 2)).initialize(0), nn.CrossEntropyLoss(),
                                 SGD(lr=0.01, momentum=0.9), batch_size=64, end_trigger=MaxIteration(iterations),
                                 progress=False, jvm_reduce=jvm_reduce)
    return trainer.fit(data)


def connect_comparison(classic_session, iterations: int) -> dict:
    """Median ms per iteration: classic (default reduce), classic Python reduce, Connect; and the ratios."""
    from pyspark.sql import SparkSession

    from sparkdl.engine.connect_data import ConnectBlocks
    from tests.connect_server import CONNECT_MODE, start_server
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 10)).astype(np.float32)
    y = rng.integers(0, 2, 4096)
    from sparkdl.engine import DataBlocks
    sc = classic_session.sparkContext
    classic_ms = _median_iteration_ms(DataBlocks.from_numpy(sc, x, y, 2), iterations + 3)
    python_ms = _median_iteration_ms(DataBlocks.from_numpy(sc, x, y, 2), iterations + 3, jvm_reduce=False)
    proc, port = start_server(os.path.join(tempfile.mkdtemp(prefix="sparkdl-bench-connect-"), "server.log"))
    try:
        remote = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").create()
        t = time.perf_counter()
        data = ConnectBlocks.from_numpy(remote, x, y, 2)
        load_s = time.perf_counter() - t
        _fit(data, WARMUP, None)
        floors = _floors_ms(remote, data.frame)
        connect_ms = _median_iteration_ms(data, iterations + 3, warm=True)
        remote.stop()
        os.environ.pop(CONNECT_MODE, None)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {"classic_tiny_iteration_ms": round(classic_ms, 1), "classic_python_reduce_ms": round(python_ms, 1),
            "connect_tiny_iteration_ms": round(connect_ms, 1), "connect_data_load_s": round(load_s, 2),
            "ratio_to_classic": round(connect_ms / classic_ms, 3),
            "ratio_to_classic_python_reduce": round(connect_ms / python_ms, 3),
            "connect_select_1_ms": floors["select_1"], "connect_noop_map_in_arrow_ms": floors["noop_map_in_arrow"],
            "select_1_ratio_to_classic": round(floors["select_1"] / classic_ms, 3)}
