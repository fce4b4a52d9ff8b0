"""Where ``transform`` spends its CPU: CPU time per row of the Spark JVM and its Python workers together, for
``transform`` and for cheaper jobs over the same cached DataFrame that each leave out one part, against the CPU
time per row of the raw forward pass in one process.

Wall-clock rows/s move with whatever else runs on the machine; CPU time (``utime + stime`` from ``/proc`` of the
driver JVM -- in local mode also the executor -- and of every process under it: pyspark's daemon and workers)
moves much less, so this script can be run on a shared machine. Each job is a ``noop`` write of ``--rows`` rows
(a cached DataFrame of MNIST-shaped rows, a Vector ``features`` column), best of ``--repeats`` after a warm run:

  scan            the cached rows written to ``noop`` (no UDF)
  pack            the same plus the bridge's packing of ``features`` into float32 bytes (no Python)
  floor_vector    an Arrow UDF over the Vector column returning a constant double (Spark's own cost of a UDF)
  floor_packed    the same over the bridge's packed float32 column (adds the packing UDF, removes the struct)
  floor_outputs   packed input, returns constant rawPrediction/probability Vectors and prediction (the JVM cost
                  of reading the output struct back)
  transform       ``DLClassificationModel.transform`` with its three output columns
  transform_pred  the same with only ``predictionCol`` (rawPredictionCol = probabilityCol = "")

and in this process: the raw forward pass (one BLAS thread) alone and next to the ``pack`` job running over and
over (on ``local[1]``, the JVM scanning and packing rows on the other core, as it does beside transform's Python
worker), and per Arrow batch the packed-column view, the forward pass, the classification outputs and their Arrow
encoding; on ``local[1]``, also the most ``local[2]`` can gain over it on two cores given transform's
CPU per row (``_scaling_bounds``). The last line printed is one JSON object.

    python bench/transform_cpu.py --model mlp            # 20,000 rows, local[1]
    python bench/transform_cpu.py --quick                # a small check that it runs
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from transform import _arrow_table, _data, _model, _noop  # noqa: E402  (bench/transform.py: same data and networks)

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple:
    """``(ppid, comm, CPU seconds incl. reaped children)`` of one process from ``/proc/<pid>/stat``."""
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    comm = s[s.index("(") + 1:s.rindex(")")]
    rest = s[s.rindex(")") + 2:].split()
    return int(rest[1]), comm, sum(int(v) for v in rest[11:15]) / TICK


def tree_cpu(root: int) -> dict:
    """``{pid: (is_jvm, CPU seconds incl. reaped children)}`` of the process tree at ``root``."""
    stats = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stats[int(d)] = _stat(int(d))
            except (OSError, ValueError, IndexError):
                continue
    children = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            out[pid] = (stats[pid][1] == "java", stats[pid][2])
        todo += children.get(pid, [])
    return out


def _delta(before: dict, after: dict) -> tuple[float, float]:
    """JVM and Python CPU seconds between two :func:`tree_cpu` snapshots (processes that ended in between count
    through their parent's reaped-children time)."""
    jvm = py = 0.0
    for pid, (is_jvm, cpu) in after.items():
        d = cpu - before.get(pid, (is_jvm, 0.0))[1]
        if is_jvm:
            jvm += d
        else:
            py += d
    return jvm, py


def _cpu_per_row(root: int, job, rows: int, repeats: int) -> dict:
    job()  # warm: JIT, Python workers, broadcast
    best = None
    for _ in range(repeats):
        before = tree_cpu(root)
        d0 = time.process_time()
        t0 = time.perf_counter()
        job()
        wall = time.perf_counter() - t0
        jvm, py = _delta(before, tree_cpu(root))
        m = {"jvm": jvm / rows * 1e6, "python": py / rows * 1e6,
             "driver": (time.process_time() - d0) / rows * 1e6, "wall": wall / rows * 1e6}
        m["total"] = m["jvm"] + m["python"]
        if best is None or m["total"] < best["total"]:
            best = m
    return {k: round(v, 2) for k, v in best.items()}


def _const_udf(n_out: int | None):
    """An Arrow UDF over one column returning zeros: a double (``n_out`` None) or the classifier's output struct
    with ``n_out`` classes (built once per batch length)."""
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql.functions import arrow_udf
    from pyspark.sql.types import DoubleType, StructField, StructType

    from sparkdl.ml.arrow import dense_vectors, doubles
    if n_out is None:
        def zeros(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
            return (pa.array(np.zeros(len(b))) for b in batches)
        return arrow_udf(zeros, DoubleType())
    made = {}

    def outputs(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
        for b in batches:
            n = len(b)
            if n not in made:
                z = np.zeros((n, n_out))
                made[n] = pa.StructArray.from_arrays([dense_vectors(z), dense_vectors(z), doubles(z[:, 0])],
                                                     names=["rawPrediction", "probability", "prediction"])
            yield made[n]
    return arrow_udf(outputs, StructType([StructField("rawPrediction", VectorUDT()),
                                          StructField("probability", VectorUDT()),
                                          StructField("prediction", DoubleType())]))


def _python_parts(net, shape, x: np.ndarray, batch: int, rows: int) -> dict:
    """CPU µs/row, in this process, of the executor-side steps of transform over Arrow batches of ``batch`` rows."""

    from sparkdl.config import set_num_threads
    from sparkdl.engine.inference import forward_in_batches
    from sparkdl.ml.arrow import FeatureSpec, decode_features
    from sparkdl.ml.classifier import classification_outputs
    from sparkdl.ml.predict import encode_outputs
    set_num_threads(1)
    spec = FeatureSpec("vector", ("features",), (784,), tuple(shape), packed=True)
    packed = [pa.array([r.tobytes() for r in x[lo:lo + batch]], pa.binary()) for lo in range(0, rows, batch)]
    fields = ["rawPrediction", "probability", "prediction"]
    steps = {"view": lambda a: decode_features(spec, [a])[0],
             "forward": lambda a: forward_in_batches(net, decode_features(spec, [a])[0], batch),
             "outputs": None, "encode": None}
    out = [forward_in_batches(net, decode_features(spec, [a])[0], batch) for a in packed]
    post = [classification_outputs(o, fields) for o in out]
    res = {}
    for name, fn in steps.items():
        best = float("inf")
        for _ in range(3):
            t = time.process_time()
            if name == "outputs":
                for o in out:
                    classification_outputs(o, fields)
            elif name == "encode":
                for p in post:
                    encode_outputs(p, fields)
            else:
                for a in packed:
                    fn(a)
            best = min(best, time.process_time() - t)
        res[name] = round(best / rows * 1e6, 2)
    return res


def _forward_cpu(net, xs: np.ndarray, batch: int, repeats: int, busy=None) -> float:
    """CPU µs per row of the raw forward pass in this thread (1 BLAS thread), best of ``repeats``.

    With ``busy`` (a function running one Spark job), that job runs over and over in another thread meanwhile: on
    ``local[1]`` the JVM then works on the other core, as it does next to the Python worker in ``transform``
    (between jobs it plans the next one, so the load is a little lighter than a continuous scan). An exception in
    ``busy`` is raised here.
    """
    import threading

    from sparkdl.engine.inference import forward_in_batches
    stop, thread, failed = threading.Event(), None, []
    if busy is not None:
        def loop():
            try:
                while not stop.is_set():
                    busy()
            except BaseException as e:  # noqa: BLE001  (re-raised in the caller)
                failed.append(e)
        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        time.sleep(1.0)  # the first job past its planning, the JVM scanning
    try:
        best = float("inf")
        for _ in range(repeats):
            t = time.thread_time()
            forward_in_batches(net, xs, batch)
            best = min(best, time.thread_time() - t)
    finally:
        stop.set()
        if thread is not None:
            thread.join()
    if failed:
        raise failed[0]
    return round(best / len(xs) * 1e6, 2)


def _scaling_bounds(spark_cpu: dict) -> dict:
    """The most ``local[2]`` can gain over ``local[1]`` on a 2-core machine, from CPU and wall time per row.

    Two cores give 2 s of CPU per second and a row costs P + J (its Python and JVM CPU), so ``local[2]`` scores at
    most 2 / (P + J) rows per µs; ``local[1]`` (this run, ``--master local[1]``) took W µs of wall time per row, its
    JVM and Python worker on different cores. The gain is at most 2 W / (P + J): below 2 when ``local[1]`` already
    overlaps its JVM and Python work on the two cores (W < P + J). ``transform``: with transform's own
    P and J; ``scan only``: with J of just scanning the cached rows, the least any Spark query over them costs.
    """
    t = spark_cpu.get("transform")
    if not t:
        return {}
    p, w = t["python"], t["wall"]
    out = {"transform": 2 * w / (p + t["jvm"])}
    if "scan" in spark_cpu:
        out["scan only"] = 2 * w / (p + spark_cpu["scan"]["jvm"])
    return {k: round(v, 3) for k, v in out.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="mlp", choices=["lenet5", "mlp"])
    parser.add_argument("--master", default="local[1]")
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=1024, help="inferenceBatchSize")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", nargs="+", help="only these Spark jobs (default: all)")
    parser.add_argument("--quick", action="store_true", help="2,000 rows, one run each: checks that it runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.repeats = 2000, 1

    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F

    from sparkdl import jvm
    from sparkdl.config import set_num_threads
    from sparkdl.engine import get_or_create_session
    from sparkdl.engine.inference import forward_in_batches
    from sparkdl.allocator import retain_freed_memory
    from sparkdl.ml import DLClassificationModel

    spark = get_or_create_session(args.master, app_name="sparkdl-bench-transform-cpu",
                                  conf={"spark.ui.enabled": "false", "spark.driver.memory": "4g"})
    sc = spark.sparkContext
    root = sc._gateway.proc.pid
    cores = sc.defaultParallelism
    x = _data(args.rows)
    base = spark.createDataFrame(_arrow_table(x))
    df = base.select("id", array_to_vector("pixels").alias("features")).repartition(2 * cores).cache()
    df.count()
    net, shape = _model(args.model)
    n_out = int(np.prod(net(np.zeros((1, *shape), np.float32)).shape[1:]))
    model = DLClassificationModel(net).setFeatureShape(shape).setInferenceBatchSize(args.batch)
    packed = jvm.float_rows(sc, F.col("features"), 784, None, "vector").alias("features")
    const, outs = _const_udf(None), _const_udf(n_out)
    jobs = {
        "scan": lambda: df,
        "pack": lambda: df.withColumn("y", packed),
        "floor_vector": lambda: df.withColumn("y", const("features")),
        "floor_packed": lambda: df.withColumn("y", const(packed)),
        "floor_outputs": lambda: df.withColumn("t", outs(packed)).withColumns(
            {f: F.col("t")[f] for f in ("rawPrediction", "probability", "prediction")}).drop("t"),
        "transform": lambda: model.transform(df),
        "transform_pred": lambda: model.copy().setRawPredictionCol("").setProbabilityCol("").transform(df),
    }
    spark_cpu = {}
    for name, make in jobs.items():
        if args.jobs and name not in args.jobs:
            continue
        spark_cpu[name] = _cpu_per_row(root, lambda make=make: _noop(make()), args.rows, args.repeats)
        print(f"{name:15s} " + "  ".join(f"{k} {v:7.2f}" for k, v in spark_cpu[name].items()) + "  (µs/row)",
              flush=True)
    xs = x.reshape(len(x), *shape)
    set_num_threads(1)
    retain_freed_memory()  # as sparkdl's Python workers do
    forward_in_batches(net, xs[:args.batch], args.batch)
    raw = _forward_cpu(net, xs, args.batch, args.repeats)
    # The forward pass next to the JVM alone scanning and packing the rows (the pack job, no Python): how much the
    # JVM's work on the other core slows the forward pass down, as it does in transform's Python worker
    beside = _forward_cpu(net, xs, args.batch, args.repeats, busy=lambda: _noop(jobs["pack"]()))
    spark.stop()
    parts = _python_parts(net, shape, x, min(args.rows, 10000), args.rows)
    print(f"raw forward (1 thread, one process) {raw:.2f} µs/row, {beside:.2f} next to the JVM's pack job "
          f"({beside / raw:.2f}x); in-process per-batch steps {parts}", flush=True)
    bounds = _scaling_bounds(spark_cpu) if args.master == "local[1]" else None
    if bounds:
        print("local[2] / local[1] on 2 cores at most: " + ", ".join(f"{k} {v:.2f}" for k, v in bounds.items()),
              flush=True)
    print(json.dumps({"benchmark": "transform_cpu", "model": args.model, "master": args.master, "rows": args.rows,
                      "unit": "CPU microseconds per row", "spark": spark_cpu, "raw_forward": raw,
                      "raw_forward_next_to_pack": beside,
                      "python_steps": parts,
                      "scaling_bounds_2_cores": bounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
