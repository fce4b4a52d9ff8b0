"""Benchmark of the Spark engine's per-iteration cost, sync cost and scaling (issue: distributed engine).

Measures, in one script and on the same Spark session:
  * the bare PySpark floors: an empty 2-task job and a 2-stage mapPartitions -> reduceByKey -> collect job;
  * a full sparkdl iteration for a tiny model, JVM reduce (default) and Python reduce (ratio to the 2-stage
    floor; target <= 0.35), with a breakdown of one iteration (driver time and py4j calls, per-stage task
    metrics from the bridge's listener);
  * 100 cached partitions vs 2 (target <= 1.5x), and 2,000 iterations of the tiny model (first vs last 100
    iterations, driver RSS);
  * sync time for P = 1M and 10M float32 parameters, fp32 and fp16 gradient blocks, vs a bare
    reduceByKey + collect moving the same bytes (targets <= 1.0 and <= 0.6), and vs a gloo allreduce
    (torch.distributed, 2 processes) of the same size;
  * scaling: LeNet-5 samples/s on local[2] vs local[1] with the same global batch (target >= 1.8),
    local[1] measured in a subprocess.
The last line printed is one JSON object with every figure.

    python bench/engine.py            # full run (a few minutes)
    python bench/engine.py --quick    # fewer repeats, P = 1M only
    python bench/engine.py --partitions 2,100,1000 | --sync-sizes 10M,100M | --large 25M,100M | --long-run 2000
                                      # only that part (bench/engine_scale.py): partitions scaling and driver
                                      # bytes, multi-block sync vs reduceByKey, large-model training
    python bench/engine.py --large 100M --iterations 50 --compress fp32 --master 'local-cluster[2,1,5120]' \
        --driver-memory 1280m --executor-memory 4g   # the driver JVM's memory alone, 50 iterations
    python bench/engine.py --connect  # only: a tiny model's iteration on Spark Connect vs classic (engine_connect.py)
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def median_ms(fn, repeats, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1000 * float(np.median(times))


def _session(master, driver_memory="6g", executor_memory=None, driver_java_options=None):
    from sparkdl.engine import get_or_create_session
    conf = {"spark.ui.enabled": "false", "spark.driver.memory": driver_memory}
    if driver_java_options:  # replaces sparkdl's training default (-XX:TieredStopAtLevel=1): give it again
        conf["spark.driver.extraJavaOptions"] = driver_java_options
    if executor_memory:
        conf["spark.executor.memory"] = executor_memory
    return get_or_create_session(master, app_name="sparkdl-bench-engine", training=True,  # as `sparkdl train`
                                 conf=conf)


def floors(sc, repeats):
    data = sc.parallelize(range(2), 2).map(lambda i: np.ones(10, np.float32)).cache()
    data.count()

    def empty():
        data.mapPartitions(lambda it: [sum(1 for _ in it)]).collect()

    def two_stage():
        data.mapPartitions(lambda it: [(0, sum(float(x.sum()) for x in it))]).reduceByKey(lambda a, b: a + b).collect()
    return median_ms(empty, repeats), median_ms(two_stage, repeats)


def bare_allreduce_ms(sc, p, repeats, dtype=np.float32):
    """reduceByKey + collect of a P-element gradient from each of 2 partitions, cut into 2 blocks."""
    data = sc.parallelize(range(2), 2).cache()
    data.count()
    bounds = np.linspace(0, p, 3).astype(int)

    def emit(it):
        for _ in it:
            pass
        g = np.ones(p, dtype)
        return [(k, g[bounds[k]:bounds[k + 1]]) for k in range(2)]

    def job():
        data.mapPartitions(emit).reduceByKey(lambda a, b: a + b, 2).collect()
    return median_ms(job, repeats)


def sparkdl_iteration_ms(sc, model, x, y, batch_size, iterations, compress=None, partitions=2, jvm_reduce=None,
                         trainer_hook=None):
    from sparkdl import nn
    from sparkdl.engine import DataBlocks, DistributedTrainer, MaxIteration
    from sparkdl.optim import SGD
    data = DataBlocks.from_numpy(sc, x, y, partitions)
    trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=0.01, momentum=0.9), batch_size=batch_size,
                                 end_trigger=MaxIteration(iterations), progress=False, compress=compress,
                                 jvm_reduce=jvm_reduce)
    if trainer_hook is not None:
        trainer_hook(trainer)
    t = time.perf_counter()
    summary = trainer.fit(data)
    wall = time.perf_counter() - t
    data.unpersist()
    secs = [r["seconds"] for r in summary.iterations[3:]]
    return 1000 * float(np.median(secs)), summary, wall


@contextlib.contextmanager
def reduce_in_tasks(on=True):
    """Run the JVM reduce of a one-block model in a JVM task (the second stage) instead of on the driver."""
    from sparkdl.engine import jvm_reduce
    before = jvm_reduce.DRIVER_REDUCE
    jvm_reduce.DRIVER_REDUCE = not on
    try:
        yield
    finally:
        jvm_reduce.DRIVER_REDUCE = before


class Py4JCounter:
    """Counts py4j round trips (every command the Python driver sends to the JVM)."""

    def __init__(self):
        import py4j.clientserver
        import py4j.java_gateway
        self.count = 0
        self._patched = []
        for cls in (py4j.clientserver.ClientServerConnection, py4j.java_gateway.GatewayConnection):
            orig = cls.send_command

            def counted(conn, command, *a, _orig=orig, **k):
                self.count += 1
                return _orig(conn, command, *a, **k)
            cls.send_command = counted
            self._patched.append((cls, orig))

    def close(self):
        for cls, orig in self._patched:
            cls.send_command = orig


def breakdown(sc, model_fn, x, y, batch_size, iterations, jvm_reduce):
    """Per-iteration averages over ``iterations`` (after 3 warm-up iterations): wall, Spark job wall, driver
    time outside the job, py4j calls, and per stage: task count, stage wall, summed task time split into
    deserialization, run, result serialization and scheduling/launch overhead."""
    from sparkdl.jvm import start_profiler, stop_profiler
    calls = []

    def hook(trainer):
        counter = {"c": None}
        step = trainer._step

        def profiled(*a):
            if trainer.state.iteration == 3:
                gc.collect()  # py4j deletes collected Java references with a command each: not this fit's
                start_profiler(sc)
                if trainer._jvm is not None:
                    trainer._jvm.loop.take_timings()
                counter["c"] = Py4JCounter()
                counter["t"] = time.perf_counter()
            step(*a)
            if trainer.state.iteration == 3 + iterations and counter["c"] is not None:
                java = trainer._jvm.loop.take_timings() if trainer._jvm is not None else None
                calls.append((counter["c"].count, time.perf_counter() - counter["t"], java))
                counter["c"].close()
                counter["c"] = None
        trainer._step = profiled
    sparkdl_iteration_ms(sc, model_fn(), x, y, batch_size, iterations + 4, jvm_reduce=jvm_reduce, trainer_hook=hook)
    time.sleep(1.0)  # the listener bus delivers the last events asynchronously
    jobs = stop_profiler(sc)
    py4j_calls, wall, java = calls[0]
    jobs = [j for j in jobs if j["stages"]]
    n = iterations
    per = {"iteration_ms": round(1000 * wall / n, 1), "py4j_calls": round(py4j_calls / n, 1),
           "spark_jobs": round(len(jobs) / n, 2), "job_ms": round(sum(j["ms"] for j in jobs) / n, 1)}
    per["driver_outside_jobs_ms"] = round(per["iteration_ms"] - per["job_ms"], 1)
    if java is not None:  # the driver JVM's side of TrainingLoop.step, per iteration
        per["jvm_driver"] = {k: round(java[k] / n, 2) for k in ("before_job_ms", "job_ms", "driver_reduce_ms",
                                                                       "commit_ms")}
        per["python_and_py4j_ms"] = round(per["iteration_ms"] - sum(per["jvm_driver"].values()), 1)
    stages = {}
    for j in jobs:
        for i, st in enumerate(j["stages"]):
            key = "gradient (Python)" if i == 0 else f"reduce ({'JVM' if jvm_reduce else 'Python'})"
            acc = stages.setdefault(key, {k: 0.0 for k in ("tasks", "wall", "task_duration", "deserialize", "run",
                                                           "result_serialize", "shuffle_write",
                                                           "shuffle_fetch_wait", "start_offset")})
            for k in acc:
                acc[k] += st[k]
    for key, acc in stages.items():
        out = {k: round(v / n, 2) for k, v in acc.items()}
        out["launch_and_scheduling"] = round((acc["task_duration"] - acc["run"] - acc["deserialize"] -
                                              acc["result_serialize"]) / n, 2)
        per[key] = out
    return per


def rss_mb(pid) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def long_run(sc, iterations):
    """Tiny model for ``iterations`` iterations: median of the first and the last 100, driver RSS."""
    from sparkdl import nn
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 10)).astype(np.float32)
    y = rng.integers(0, 2, 4096)
    jvm_pid = sc._jvm.java.lang.ProcessHandle.current().pid()
    runtime = sc._jvm.java.lang.Runtime.getRuntime()
    rss, curve = [], []

    def live_heap_mb():
        """The JVM heap in use after a full collection (RSS alone also counts the heap's lazy growth)."""
        sc._jvm.java.lang.System.gc()
        return (runtime.totalMemory() - runtime.freeMemory()) / 2 ** 20

    def hook(trainer):
        record = trainer._record

        def spy(*a):
            record(*a)
            if trainer.state.iteration in (100, iterations):
                rss.append((rss_mb(os.getpid()), rss_mb(jvm_pid), live_heap_mb()))
            if trainer.state.iteration % 250 == 0:  # the curve, without the full collection (it shrinks the heap)
                curve.append((trainer.state.iteration, round(rss_mb(jvm_pid))))
        trainer._record = spy
    _, summary, _ = sparkdl_iteration_ms(sc, nn.Sequential(nn.Linear(10, 2)), x, y, 64, iterations,
                                         trainer_hook=hook)
    secs = [1000 * r["seconds"] for r in summary.iterations]
    return {"iterations": iterations, "first100_ms": round(float(np.median(secs[:100])), 1),
            "last100_ms": round(float(np.median(secs[-100:])), 1),
            "python_rss_mb_at_100": round(rss[0][0]), "python_rss_mb_at_end": round(rss[1][0]),
            "jvm_rss_mb_at_100": round(rss[0][1]), "jvm_rss_mb_at_end": round(rss[1][1]),
            "jvm_live_heap_mb_at_100": round(rss[0][2]), "jvm_live_heap_mb_at_end": round(rss[1][2]),
            "jvm_rss_mb_every_250": curve}


def gloo_allreduce_ms(p, repeats):
    code = f"""
import os, time, numpy as np, torch, torch.distributed as dist, torch.multiprocessing as mp
def run(rank):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    t = torch.ones({p})
    for _ in range(3): dist.all_reduce(t)
    ts = []
    for _ in range({repeats}):
        dist.barrier(); s = time.perf_counter(); dist.all_reduce(t); ts.append(time.perf_counter() - s)
    if rank == 0: print(1000 * float(np.median(ts)))
    dist.destroy_process_group()
if __name__ == "__main__":
    mp.spawn(run, nprocs=2)
"""
    import tempfile
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(code)  # mp.spawn needs an importable main module, not `python -c`
        out = subprocess.run([sys.executable, f.name], capture_output=True, text=True, timeout=300)
        os.unlink(f.name)
        return float(out.stdout.strip().splitlines()[-1])
    except Exception as e:  # torch missing or gloo unavailable
        print(f"gloo allreduce unavailable: {e}", file=sys.stderr)
        return None


def lenet_samples_per_s(master, iterations, batch_size):
    spark = _session(master)
    from sparkdl.models import lenet5
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8192, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 8192)
    partitions = spark.sparkContext.defaultParallelism
    ms, summary, _ = sparkdl_iteration_ms(spark.sparkContext, lenet5().initialize(0), x, y, batch_size, iterations,
                                          partitions=partitions)
    return batch_size / (ms / 1000)


def sync(sc, nn, p, repeats, iters, rng) -> dict:
    """One Linear(w, w) of ~p parameters: a sparkdl iteration (fp32, fp16) vs a bare reduceByKey + collect of the
    same bytes and a gloo allreduce."""
    width = int(round(p ** 0.5))
    p_real = width * width + width
    bare = bare_allreduce_ms(sc, p_real, max(3, repeats // 3))
    xs = rng.standard_normal((64, width)).astype(np.float32)
    ys = rng.integers(0, width, 64)
    it32, _, _ = sparkdl_iteration_ms(sc, nn.Sequential(nn.Linear(width, width)), xs, ys, 4, max(8, iters // 3))
    it16, _, _ = sparkdl_iteration_ms(sc, nn.Sequential(nn.Linear(width, width)), xs, ys, 4, max(8, iters // 3),
                                      compress="fp16")
    gloo = gloo_allreduce_ms(p_real, repeats)
    print(f"P={p_real:>10,}: bare reduceByKey+collect {bare:8.1f} ms | sparkdl fp32 {it32:8.1f} ms "
          f"({it32 / bare:.2f}x, target <= 1.0) | fp16 {it16:8.1f} ms ({it16 / bare:.2f}x, target <= 0.6) | "
          f"gloo {gloo if gloo is None else round(gloo, 1)} ms")
    return {"params": p_real, "bare_reduceByKey_collect_ms": round(bare, 1),
            "sparkdl_fp32_ms": round(it32, 1), "sparkdl_fp16_ms": round(it16, 1),
            "ratio_fp32": round(it32 / bare, 3), "ratio_fp16": round(it16 / bare, 3),
            "gloo_allreduce_ms": None if gloo is None else round(gloo, 2),
            "ratio_fp32_to_gloo": None if gloo is None else round(it32 / gloo, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--connect", action="store_true", help="only the Spark Connect vs classic iteration comparison")
    ap.add_argument("--scaling-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--partitions", default=None, help="only: iteration ms and driver bytes at these partitions")
    ap.add_argument("--sync-sizes", default=None, help="only: sync of these parameter counts (e.g. 10M,100M)")
    ap.add_argument("--large", default=None, help="only: train MLPs of these sizes (e.g. 25M,100M) a few iterations")
    ap.add_argument("--long-run", type=int, default=None, help="only: the tiny model for this many iterations "
                    "(the full run does 2,000)")
    ap.add_argument("--iterations", type=int, default=5, help="--large: iterations per model (default 5)")
    ap.add_argument("--compress", default="fp32,fp16", help="--large: gradient encodings to run (default fp32,fp16)")
    ap.add_argument("--master", default="local[2]", help="--partitions/--large/--sync-sizes: Spark master, e.g. "
                    "local-cluster[2,1,4096] (driver JVM separate from the executors')")
    ap.add_argument("--driver-memory", default="6g", help="spark.driver.memory (default 6g)")
    ap.add_argument("--executor-memory", default=None, help="spark.executor.memory (local-cluster masters)")
    ap.add_argument("--driver-java-options", default=None, help="spark.driver.extraJavaOptions (replaces "
                    "sparkdl's -XX:TieredStopAtLevel=1 for local training sessions)")
    args = ap.parse_args()
    repeats = 5 if args.quick else 15
    iters = 15 if args.quick else 40
    if args.connect:
        from bench.engine_connect import connect_comparison
        res = connect_comparison(_session("local[2]"), iters)
        print(f"tiny model iteration: classic {res['classic_tiny_iteration_ms']:.1f} ms (Python reduce "
              f"{res['classic_python_reduce_ms']:.1f} ms), Spark Connect {res['connect_tiny_iteration_ms']:.1f} ms: "
              f"{res['ratio_to_classic']:.2f}x classic (target <= 2); Spark Connect's floor on the same server: "
              f"SELECT 1 {res['connect_select_1_ms']:.1f} ms ({res['select_1_ratio_to_classic']:.2f}x classic), "
              f"a no-op mapInArrow over the cached frame {res['connect_noop_map_in_arrow_ms']:.1f} ms")
        print(json.dumps({"connect": res}))
        return
    if args.scaling_worker:
        print(json.dumps({"samples_per_s": lenet_samples_per_s(args.scaling_worker, iters, 512)}))
        return
    from sparkdl import nn
    spark = _session(args.master, args.driver_memory, args.executor_memory, args.driver_java_options)
    sc = spark.sparkContext
    res = {}
    if args.long_run:
        res["long_run"] = long_run(sc, args.long_run)
        print(json.dumps(res))
        return
    if args.partitions or args.large or args.sync_sizes:
        from bench import engine_scale
        if args.partitions:
            res["partitions"] = engine_scale.partitions_scaling(sc, engine_scale.parse_sizes(args.partitions),
                                                                max(6, iters // 4))
        if args.large:
            for compress in args.compress.split(","):
                res[f"large_{compress}"] = engine_scale.large_models(
                    sc, engine_scale.parse_sizes(args.large), args.iterations, None if compress == "fp32" else compress)
        if args.sync_sizes:
            res["sync"] = {p: sync(sc, nn, p, repeats, iters, rng=np.random.default_rng(0))
                           for p in engine_scale.parse_sizes(args.sync_sizes)}
        print(json.dumps(res))
        return
    empty_ms, floor_ms = floors(sc, repeats)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 10)).astype(np.float32)
    y = rng.integers(0, 2, 4096)
    tiny = lambda: nn.Sequential(nn.Linear(10, 2))  # noqa: E731
    tiny_ms, _, _ = sparkdl_iteration_ms(sc, tiny(), x, y, 64, iters + 3)
    with reduce_in_tasks():
        tiny_task_ms, _, _ = sparkdl_iteration_ms(sc, tiny(), x, y, 64, iters + 3)
    tiny_py_ms, _, _ = sparkdl_iteration_ms(sc, tiny(), x, y, 64, iters + 3, jvm_reduce=False)
    res["floor"] = {"empty_job_ms": round(empty_ms, 1), "two_stage_job_ms": round(floor_ms, 1),
                    "sparkdl_tiny_iteration_ms": round(tiny_ms, 1), "ratio": round(tiny_ms / floor_ms, 3),
                    "jvm_task_reduce_tiny_iteration_ms": round(tiny_task_ms, 1),
                    "jvm_task_reduce_ratio": round(tiny_task_ms / floor_ms, 3),
                    "python_reduce_tiny_iteration_ms": round(tiny_py_ms, 1),
                    "python_reduce_ratio": round(tiny_py_ms / floor_ms, 3)}
    print(f"bare empty 2-task job          {empty_ms:8.1f} ms")
    print(f"bare 2-stage job (floor)       {floor_ms:8.1f} ms")
    print(f"sparkdl iteration, tiny model  {tiny_ms:8.1f} ms   ratio to floor {tiny_ms / floor_ms:.2f} (target <= 0.35)")
    print(f"  JVM reduce in a task         {tiny_task_ms:8.1f} ms   ratio to floor {tiny_task_ms / floor_ms:.2f}")
    print(f"  with the Python reduce       {tiny_py_ms:8.1f} ms   ratio to floor {tiny_py_ms / floor_ms:.2f}")
    res["breakdown"] = {}
    for name, jvm_reduce, in_tasks in (("jvm_driver_reduce", True, False), ("jvm_task_reduce", True, True),
                                       ("python_reduce", False, False)):
        with reduce_in_tasks(in_tasks):
            res["breakdown"][name] = b = breakdown(sc, tiny, x, y, 64, max(10, iters // 2), jvm_reduce)
        print(f"breakdown, tiny model, {name}: {json.dumps(b)}")
    p100_ms, _, _ = sparkdl_iteration_ms(sc, tiny(), x, y, 64, iters + 3, partitions=100)
    res["partitions"] = {"p2_ms": round(tiny_ms, 1), "p100_ms": round(p100_ms, 1),
                         "ratio": round(p100_ms / tiny_ms, 3)}
    print(f"100 partitions: {p100_ms:.1f} ms per iteration, {p100_ms / tiny_ms:.2f}x 2 partitions (target <= 1.5)")
    res["long_run"] = long_run(sc, 300 if args.quick else 2000)
    print(f"long run: {json.dumps(res['long_run'])}")
    sizes = [1_000_000] if args.quick else [1_000_000, 10_000_000]
    res["sync"] = {}
    for p in sizes:
        res["sync"][str(p)] = sync(sc, nn, p, repeats, iters, rng)
    spark.stop()
    two = lenet_samples_per_s("local[2]", iters, 512)
    _session("local[2]").stop()
    out = subprocess.run([sys.executable, __file__, "--scaling-worker", "local[1]"] + (["--quick"] if args.quick else []),
                         capture_output=True, text=True)
    one = json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]
    res["scaling"] = {"lenet5_local1_samples_per_s": round(one, 1), "lenet5_local2_samples_per_s": round(two, 1),
                      "speedup": round(two / one, 3)}
    print(f"LeNet-5 batch 512: local[1] {one:,.0f} samples/s, local[2] {two:,.0f} samples/s, "
          f"speedup {two / one:.2f} (target >= 1.6)")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
