"""Benchmark of ``DLClassificationModel.transform`` against the raw forward pass (issue: Spark ML stages).

The same model and the same data in one process:
  * raw: ``forward_in_batches`` over a float32 array on the driver, with 1 thread and with N threads (N = cores
    of the ``local[N]`` master); the faster of the two is the baseline;
  * transform: a cached DataFrame with a Vector ``features`` column (2N partitions) through
    ``model.transform`` and a ``noop`` write, so every output column (rawPrediction, probability, prediction)
    is computed and nothing is collected; N tasks of one thread each;
  * floor: the same DataFrame through an Arrow UDF that only returns zeros -- what Spark itself costs to move
    the vectors to Python and back (an upper bound for any transform).
Both use ``inferenceBatchSize`` rows per forward call. The figure is rows/s of transform divided by rows/s of
the raw forward pass (target >= 0.8). The last line printed is one JSON object.

    python bench/transform.py                  # LeNet-5 and the MLP on 10,000 MNIST-shaped rows
    python bench/transform.py --models mlp --rows 20000 --repeats 5
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Iterator

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _data(rows: int) -> np.ndarray:
    """MNIST test images scaled to [0, 1] when the dataset is cached, else uniform noise of the same shape."""
    try:
        from sparkdl.datasets import fetch_mnist
        _, (x, _) = fetch_mnist(download=False)
        x = np.resize(x.reshape(len(x), -1), (rows, 784))
        return (x / 255.0).astype(np.float32)
    except Exception:
        return np.random.default_rng(0).random((rows, 784), dtype=np.float32)


def _model(name: str):
    from sparkdl import models
    if name == "lenet5":
        return models.lenet5().initialize(0), [1, 28, 28]
    return models.mlp(in_features=784, hidden=(512, 256), num_classes=10).initialize(0), [784]


def _best_rate(fn, rows: int, repeats: int) -> tuple[float, list]:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return rows / min(times), [round(rows / t, 1) for t in times]


def bench_model(spark, name: str, x: np.ndarray, batch: int, repeats: int, cores: int) -> dict:
    from pyspark.ml.linalg import Vectors, VectorUDT
    from pyspark.sql.types import LongType, StructField, StructType

    from sparkdl.config import set_num_threads
    from sparkdl.engine.inference import forward_in_batches
    from sparkdl.ml import DLClassificationModel

    net, shape = _model(name)
    rows = len(x)
    xs = x.reshape(rows, *shape)
    forward_in_batches(net, xs[:batch], batch)  # compile
    raw_by_threads = {}
    for threads in sorted({1, cores}):
        set_num_threads(threads)
        raw_by_threads[threads] = _best_rate(lambda: forward_in_batches(net, xs, batch), rows, repeats)[0]
    set_num_threads(cores)
    best_threads = max(raw_by_threads, key=raw_by_threads.get)
    raw = raw_by_threads[best_threads]

    schema = StructType([StructField("id", LongType()), StructField("features", VectorUDT())])
    df = spark.createDataFrame([(i, Vectors.dense(r)) for i, r in enumerate(x.astype(np.float64))], schema)
    df = df.repartition(2 * cores).cache()
    df.count()
    model = DLClassificationModel(net).setFeatureShape(shape).setInferenceBatchSize(batch)

    def run():
        model.transform(df).write.format("noop").mode("overwrite").save()
    run()  # warm-up: Python workers, numba compilation in the workers, the broadcast
    spark_rate, spark_all = _best_rate(run, rows, repeats)
    floor = _floor_rate(df, rows, repeats)
    df.unpersist()
    return {"model": name, "rows": rows, "inference_batch_size": batch, "raw_rows_per_s": round(raw, 1),
            "raw_threads": best_threads, "raw_rows_per_s_by_threads": {str(k): round(v, 1) for k, v in
                                                                       raw_by_threads.items()},
            "transform_rows_per_s": round(spark_rate, 1), "ratio": round(spark_rate / raw, 3),
            "spark_floor_rows_per_s": round(floor, 1), "transform_runs": spark_all}


def _zeros(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
    for a in batches:
        yield pa.array(np.zeros(len(a)))


def _floor_rate(df, rows: int, repeats: int) -> float:
    """rows/s of an Arrow UDF that ignores its Vector input: Spark's own cost of the data path."""
    from pyspark.sql.functions import arrow_udf
    udf = arrow_udf(_zeros, "double")

    def run():
        df.withColumn("zero", udf("features")).write.format("noop").mode("overwrite").save()
    run()
    return _best_rate(run, rows, repeats)[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["lenet5", "mlp"], choices=["lenet5", "mlp"])
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--batch", type=int, default=1024, help="inferenceBatchSize (rows per forward call)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)

    from sparkdl.engine import get_or_create_session
    spark = get_or_create_session(args.master, app_name="sparkdl-bench-transform",
                                  conf={"spark.ui.enabled": "false", "spark.driver.memory": "4g"})
    cores = spark.sparkContext.defaultParallelism
    x = _data(args.rows)
    results = []
    for name in args.models:
        r = bench_model(spark, name, x, args.batch, args.repeats, cores)
        print(f"{name}: raw forward {r['raw_rows_per_s']:,.0f} rows/s ({r['raw_threads']} thread(s)), transform "
              f"{r['transform_rows_per_s']:,.0f} rows/s, ratio {r['ratio']:.2f} (target >= 0.8); Spark's floor "
              f"(Arrow UDF doing nothing) {r['spark_floor_rows_per_s']:,.0f} rows/s", flush=True)
        results.append(r)
    print(json.dumps({"benchmark": "transform", "master": args.master, "cores": cores, "results": results,
                      "target_ratio": 0.8, "meets_target": all(r["ratio"] >= 0.8 for r in results)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
