"""``bench/engine.py --connect``: a tiny model's iteration on Spark Connect against the classic path.

Starts a Connect server from the installed pyspark (local[2], as the classic session), then trains the same tiny
model on the same data, partitions and seed three ways and reports the median iteration time of each:
the classic session with its default reduce (the JVM reduce when the bridge is loaded), the classic session with
the Python reduce (``jvm_reduce=False``, whose trajectory the Connect transport reproduces bitwise), and the
Connect transport (one ``mapInArrow`` query per iteration, reduce and update on the client). Target (issue 29):
Connect <= 2x the classic path.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

__all__ = ["connect_comparison"]


def _median_iteration_ms(data, iterations, jvm_reduce=None):
    """Median ms per iteration (after 3) of the tiny model on ``data`` (DataBlocks or ConnectBlocks)."""
    from sparkdl import nn
    from sparkdl.engine import DistributedTrainer, MaxIteration
    from sparkdl.optim import SGD
    trainer = DistributedTrainer(nn.Sequential(nn.Linear(10, 2)).initialize(0), nn.CrossEntropyLoss(),
                                 SGD(lr=0.01, momentum=0.9), batch_size=64, end_trigger=MaxIteration(iterations),
                                 progress=False, jvm_reduce=jvm_reduce)
    summary = trainer.fit(data)
    data.unpersist()
    return 1000 * float(np.median([r["seconds"] for r in summary.iterations[3:]]))


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
        connect_ms = _median_iteration_ms(data, iterations + 3)
        remote.stop()
        os.environ.pop(CONNECT_MODE, None)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {"classic_tiny_iteration_ms": round(classic_ms, 1), "classic_python_reduce_ms": round(python_ms, 1),
            "connect_tiny_iteration_ms": round(connect_ms, 1), "connect_data_load_s": round(load_s, 2),
            "ratio_to_classic": round(connect_ms / classic_ms, 3),
            "ratio_to_classic_python_reduce": round(connect_ms / python_ms, 3)}
