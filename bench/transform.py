"""Benchmark of distributed inference: sparkdl ``transform`` against the raw forward pass and against Spark's own
``predict_batch_udf`` serving the same weights in PyTorch, on the same DataFrame and cores, for 1, 2 and 2 separate
workers.

For every master (default ``local[1]``, ``local[2]``, ``local-cluster[2,1,2048]``) and model (LeNet-5, the MLP), in
a process and Spark session of its own (so each starts cold):
  * raw: ``forward_in_batches`` over a float32 array with the allocator setting sparkdl's workers use
    (``sparkdl.allocator.retain_freed_memory``), no Spark, three ways on the master's cores:
    "one process" (``raw_one_process``): numba threads = cores and BLAS free to use the cores (BLAS threads =
    cores); "per core" (``raw_per_core``): the rows split over one process per core, one numba and one BLAS thread
    each (its core), all at once, as Spark's workers run; and, secondary, "one process, BLAS on one thread"
    (``raw_blas1``: numba threads = cores, BLAS at sparkdl's default of one thread; the headline "raw" of sessions
    up to the eleventh, which left the MLP's GEMMs on one core of two and so flattered transform).
    **The headline reference** (``raw_reference``) is the faster of "one process" and "per core": the best the
    cores give the bare forward pass, whichever way it uses them. On one core the three coincide;
  * transform (vector / array): a cached DataFrame of MNIST-shaped rows (``features`` a Vector, ``pixels`` an
    ``array<float>``, 2 partitions per core) through ``DLClassificationModel.transform`` and a ``noop`` write, so
    every output column (rawPrediction, probability, prediction) is computed and nothing is collected;
  * torch: ``pyspark.ml.functions.predict_batch_udf`` on ``pixels`` with a PyTorch twin of the network holding the
    same weights (1 thread per task), also written to ``noop``, in a process and Spark session of its own
    (``bench/transform_torch.py``, started with this process's environment unchanged): PyTorch in its default
    environment, with PySpark's own Python workers (sparkdl's session starts its workers through
    ``sparkdl.daemon``, which imports sparkdl) and the same Spark settings as sparkdl's session
    (``RECOMMENDED_CONF``: Arrow batches of 1,024 rows, Unix sockets, ...). The sparkdl process hands it the
    rows and the weights through a temporary directory;
  * init cost: the first transform of a fresh session (Python workers start, the network is broadcast and loaded,
    numba kernels load) minus a warm run of the same job, over the Vector column; the array<float> column is
    measured next in the same session, so its init is only a new query's (workers and network warm).
Rows/s are the best of ``--repeats`` runs, after ``--warmup`` untimed ones, over ``--rows`` rows (default 100,000,
the MNIST test images repeated): every query also pays Spark's planning and job start (~0.2-0.3 s; a bare ``noop``
job of 200 cached rows takes ~0.14 s), which was a quarter of the time of the 20,000-row runs of earlier sessions.
Writes ``transform_throughput.png`` (rows/s vs workers) and ``transform_init.png`` (one-time initialization cost vs
workers) into ``--out-dir``. The last line printed is one JSON object. Targets (issue: distributed inference):
transform >= 0.8x the raw reference, >= 1.0x torch, local[2] >= 1.7x local[1].

    python bench/transform.py                    # 100,000 rows, both models, three masters
    python bench/transform.py --quick            # a small check that everything runs
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _data_base(rows: int) -> np.ndarray:
    """The distinct rows of :func:`_data`: the 10,000 MNIST test images scaled to [0, 1] when the dataset is
    cached, else ``rows`` rows of uniform noise; float32, 784 columns."""
    try:
        from sparkdl.datasets import fetch_mnist
        _, (x, _) = fetch_mnist(download=False)
        return (x.reshape(len(x), -1) / 255.0).astype(np.float32)
    except Exception:
        return np.random.default_rng(0).random((rows, 784), dtype=np.float32)


def _data(rows: int) -> np.ndarray:
    """``rows`` MNIST-shaped float32 rows (784 columns): :func:`_data_base` repeated."""
    return np.resize(_data_base(rows), (rows, 784))


def _model(name: str):
    from sparkdl import models
    if name == "lenet5":
        return models.lenet5().initialize(0), [1, 28, 28]
    return models.mlp(in_features=784, hidden=(512, 256), num_classes=10).initialize(0), [784]


def twin_spec(net) -> list:
    """The layers of the sparkdl ``Sequential`` ``net`` as ``[[kind, kwargs], ...]`` (JSON), from which
    ``bench/transform_torch.py`` builds its PyTorch twin without importing sparkdl. Raises TypeError for a layer
    with no twin."""
    from sparkdl import nn
    spec = []
    for m in net.children():
        if isinstance(m, nn.Linear):
            spec.append(["Linear", {"in_features": m.in_features, "out_features": m.out_features}])
        elif isinstance(m, nn.Conv2d):
            spec.append(["Conv2d", {"in_channels": m.in_channels, "out_channels": m.out_channels,
                                    "kernel_size": m.kernel_size, "stride": m.stride, "padding": m.padding}])
        elif isinstance(m, nn.MaxPool2d):
            spec.append(["MaxPool2d", {"kernel_size": m.kernel_size, "stride": m.stride}])
        elif isinstance(m, (nn.ReLU, nn.Flatten)):
            spec.append([type(m).__name__, {}])
        else:
            raise TypeError(f"no torch twin for {type(m).__name__}")
    return spec


def _write_exchange(exchange: str, name: str, net, rows: int, conf: dict, shape: list) -> None:
    """What ``bench/transform_torch.py`` needs, into ``exchange``: ``x.npy`` (the distinct rows of the data),
    ``<name>.npz`` (the weights) and ``<name>.json`` (layers, feature shape, Spark settings)."""
    np.save(os.path.join(exchange, "x.npy"), _data_base(rows))
    np.savez(os.path.join(exchange, f"{name}.npz"), **{k: np.asarray(v) for k, v in net.state_dict().items()})
    with open(os.path.join(exchange, f"{name}.json"), "w") as f:
        json.dump({"layers": twin_spec(net), "shape": shape, "conf": conf}, f)


def _arrow_table(x: np.ndarray):
    """``id`` (long) and ``pixels`` (``array<float>``, the rows of ``x``) as a pyarrow Table."""
    import pyarrow as pa
    pixels = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1]).cast(pa.list_(pa.float32()))
    return pa.table({"id": pa.array(np.arange(len(x), dtype=np.int64)), "pixels": pixels})


def _warm(fn, runs: int) -> None:
    """Untimed runs after the cold one: the JVM's JIT keeps compiling the query's code over the first few hundred
    thousand rows (one session's local[2] MLP rose from ~39k to ~48k rows/s over its first 12 runs)."""
    for _ in range(runs):
        fn()


def _best_rate(fn, rows: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return rows / min(times)


def _noop(df):
    df.write.format("noop").mode("overwrite").save()


def _raw_share(name: str, rows: int, part: int, parts: int, batch: int, repeats: int, barrier) -> list:
    """Seconds per run of the raw forward pass over this process's contiguous ``1 / parts`` of the rows (one
    BLAS/numba thread), each run started with the other processes' at ``barrier``."""
    from sparkdl.config import set_num_threads
    from sparkdl.engine.inference import forward_in_batches
    from sparkdl.allocator import retain_freed_memory
    set_num_threads(1)
    retain_freed_memory()
    net, shape = _model(name)
    x = _data(rows)
    x = np.ascontiguousarray(x[part * len(x) // parts:(part + 1) * len(x) // parts])
    xs = x.reshape(len(x), *shape)
    forward_in_batches(net, xs[:batch], batch)
    times = []
    for _ in range(repeats):
        barrier.wait(timeout=600)  # a process that failed before its wait breaks the others' too
        t = time.perf_counter()
        forward_in_batches(net, xs, batch)
        times.append(time.perf_counter() - t)
    return times


def raw_per_core(name: str, rows: int, cores: int, batch: int, repeats: int) -> float:
    """Rows/s of the raw forward pass with the rows split over one process per core, all running at once (as
    Spark's workers do), best of ``repeats``: each process's numba kernels and BLAS use its one core."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")  # not fork: this process holds the JVM gateway and its threads
    with ctx.Manager() as manager, ctx.Pool(cores) as pool:
        barrier = manager.Barrier(cores)
        runs = pool.starmap(_raw_share, [(name, rows, k, cores, batch, repeats, barrier) for k in range(cores)])
    return rows / min(max(ts) for ts in zip(*runs))


def raw_one_process(net, xs: np.ndarray, cores: int, batch: int, repeats: int, blas_threads) -> float:
    """Rows/s of the raw forward pass over ``xs`` in this process with ``cores`` numba threads and
    ``blas_threads`` BLAS threads (None: ``cores``), best of ``repeats``."""
    from sparkdl.config import set_num_threads
    from sparkdl.engine.inference import forward_in_batches
    from sparkdl.allocator import retain_freed_memory
    set_num_threads(cores, blas_threads=blas_threads)
    retain_freed_memory()  # as in the workers: without it LeNet-5's raw forward is 18-25% slower
    forward_in_batches(net, xs[:batch], batch)
    return _best_rate(lambda: forward_in_batches(net, xs, batch), len(xs), repeats)


def raw_rates(name: str, net, xs: np.ndarray, cores: int, batch: int, repeats: int) -> dict:
    """The three raw forward passes of the module docstring and the reference: the faster of one process with
    BLAS on all cores and one process per core."""
    r = {"raw_one_process_rows_per_s": raw_one_process(net, xs, cores, batch, repeats, None),
         "raw_blas1_rows_per_s": raw_one_process(net, xs, cores, batch, repeats, 1),
         "raw_per_core_rows_per_s": raw_per_core(name, len(xs), cores, batch, repeats)}
    r = {k: round(v, 1) for k, v in r.items()}
    per_core = r["raw_per_core_rows_per_s"] >= r["raw_one_process_rows_per_s"]
    r["raw_reference"] = "per core" if per_core else "one process"
    r["raw_reference_rows_per_s"] = r["raw_per_core_rows_per_s" if per_core else "raw_one_process_rows_per_s"]
    return r


def bench_master(args) -> dict:
    """One master's sparkdl measurements (run in a process of its own); with ``args.exchange`` also writes what
    ``bench/transform_torch.py`` needs there."""
    from pyspark.ml.functions import array_to_vector

    from sparkdl.engine import RECOMMENDED_CONF, get_or_create_session
    from sparkdl.ml import DLClassificationModel

    conf = {"spark.ui.enabled": "false", "spark.driver.memory": "4g"}
    spark = get_or_create_session(args.child, app_name="sparkdl-bench-transform", conf=conf)
    cores = spark.sparkContext.defaultParallelism
    x = _data(args.rows)
    base = spark.createDataFrame(_arrow_table(x))  # Arrow: seconds, where a list of Python rows takes minutes
    frames = {"array": base.repartition(2 * cores).cache(),
              "vector": base.select("id", array_to_vector("pixels").alias("features")).repartition(2 * cores).cache()}
    for df in frames.values():
        df.count()
    results = []
    for name in args.models:
        net, shape = _model(name)
        if args.exchange:
            _write_exchange(args.exchange, name, net, args.rows, {**RECOMMENDED_CONF, **conf}, shape)
        r = {"model": name}
        model = DLClassificationModel(net).setFeatureShape(shape).setInferenceBatchSize(args.batch)
        for kind, col in (("vector", "features"), ("array", "pixels")):
            job = (lambda m=model.copy().setFeaturesCol(col), df=frames[kind]: _noop(m.transform(df)))
            t = time.perf_counter()
            job()  # cold: Python workers, broadcast, kernels
            cold = time.perf_counter() - t
            _warm(job, args.warmup)
            r[f"transform_{kind}_rows_per_s"] = round(_best_rate(job, args.rows, args.repeats), 1)
            r[f"init_{kind}_s"] = round(max(cold - args.rows / r[f"transform_{kind}_rows_per_s"], 0.0), 3)
        r.update(raw_rates(name, net, x.reshape(len(x), *shape), cores, args.batch, args.repeats))
        results.append(r)
    spark.stop()
    return {"master": args.child, "cores": cores, "results": results}


def _ratios(r: dict) -> None:
    """Add transform's ratios to the raw reference (the headline) and to PyTorch's ``predict_batch_udf``."""
    for kind in ("vector", "array"):
        rate = r[f"transform_{kind}_rows_per_s"]
        r[f"ratio_{kind}_vs_raw_reference"] = round(rate / r["raw_reference_rows_per_s"], 3)
        r[f"ratio_{kind}_vs_torch"] = round(rate / r["torch_predict_batch_udf_rows_per_s"], 3)


def _workers(master: str) -> int:
    import re
    m = re.match(r"local-cluster\[(\d+),(\d+)", master)
    if m:
        return int(m.group(1)) * int(m.group(2))
    m = re.match(r"local\[(\d+)", master)
    return int(m.group(1)) if m else 1


def _plots(runs: list, out_dir: str) -> list:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    paths = []
    models = [r["model"] for r in runs[0]["results"]]
    labels = [f"{run['master']}" for run in runs]
    for metric, ylabel, fname in (("rows_per_s", "rows/s", "transform_throughput.png"),
                                  ("init", "one-time initialization (s)", "transform_init.png")):
        fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4), squeeze=False)
        for ax, name in zip(axes[0], models):
            rows = [next(r for r in run["results"] if r["model"] == name) for run in runs]
            series = ({"sparkdl transform (Vector)": "transform_vector_rows_per_s",
                       "sparkdl transform (array<float>)": "transform_array_rows_per_s",
                       "predict_batch_udf + PyTorch": "torch_predict_batch_udf_rows_per_s",
                       "raw forward (1 process, BLAS on all cores)": "raw_one_process_rows_per_s",
                       "raw forward (1 process per core)": "raw_per_core_rows_per_s"} if metric == "rows_per_s" else
                      {"first transform of the session (Vector)": "init_vector_s",
                       "then a first one over array<float> (workers warm)": "init_array_s"})
            pos = np.arange(len(runs))
            width = 0.8 / len(series)
            for k, (label, key) in enumerate(series.items()):
                ax.bar(pos + k * width, [r[key] for r in rows], width, label=label)
            ax.set_xticks(pos + width * (len(series) - 1) / 2)
            ax.set_xticklabels([f"{lab}\n{_workers(lab)} worker(s)" for lab in labels], fontsize=8)
            ax.set_title(name)
            ax.set_ylabel(ylabel)
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out_dir, fname)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def _run(cmd: list, what: str, env=None) -> dict:
    """The last stdout line of ``cmd`` as JSON; SystemExit (after its stderr's tail) if it fails."""
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"bench/transform.py: the {what} run failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _measure(master: str, name: str, args) -> tuple:
    """sparkdl's measurements of ``name`` on ``master`` in a process of its own, then PyTorch's
    (``bench/transform_torch.py``, environment unchanged) on the rows and weights that process wrote."""
    common = ["--rows", str(args.rows), "--batch", str(args.batch), "--repeats", str(args.repeats), "--warmup",
              str(args.warmup)]
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory(prefix="sparkdl-bench-transform-") as exchange:
        one = _run([sys.executable, os.path.abspath(__file__), "--child", master, "--models", name, "--exchange",
                    exchange, *common], f"{master} {name}", env={**os.environ, "PYTHONPATH": ROOT})
        torch = _run([sys.executable, os.path.join(here, "transform_torch.py"), exchange, name, master, *common],
                     f"{master} {name} PyTorch")
    return one, torch["torch_predict_batch_udf_rows_per_s"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["lenet5", "mlp"], choices=["lenet5", "mlp"])
    parser.add_argument("--rows", type=int, default=100000,
                        help="rows of the cached DataFrame (with fewer, Spark's per-query cost weighs in)")
    parser.add_argument("--batch", type=int, default=1024, help="inferenceBatchSize / predict_batch_udf batch_size")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs of each Spark job after its first")
    parser.add_argument("--masters", nargs="+", default=["local[1]", "local[2]", "local-cluster[2,1,2048]"])
    parser.add_argument("--out-dir", default=os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--quick", action="store_true", help="2,000 rows, one warm run each: checks that it runs")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: measure this master in this process
    parser.add_argument("--exchange", help=argparse.SUPPRESS)  # internal: write transform_torch.py's input here
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.repeats, args.warmup = 2000, 1, 0
    if args.child:
        print(json.dumps(bench_master(args)))
        return 0
    runs = []
    for master in args.masters:
        run = {"master": master, "results": []}
        for name in args.models:
            one, torch_rate = _measure(master, name, args)
            run["cores"] = one["cores"]
            for r in one["results"]:
                r["torch_predict_batch_udf_rows_per_s"] = torch_rate
                _ratios(r)
            run["results"] += one["results"]
        for r in run["results"]:
            print(f"{master} {r['model']}: transform {r['transform_vector_rows_per_s']:,.0f} rows/s (Vector), "
                  f"{r['transform_array_rows_per_s']:,.0f} (array<float>); raw reference "
                  f"{r['raw_reference_rows_per_s']:,.0f} ({r['raw_reference']}; one process, BLAS on all cores: "
                  f"{r['raw_one_process_rows_per_s']:,.0f}; one process per core: {r['raw_per_core_rows_per_s']:,.0f}; "
                  f"one process, BLAS on one thread: {r['raw_blas1_rows_per_s']:,.0f}); vs raw reference "
                  f"{r['ratio_vector_vs_raw_reference']:.2f} / {r['ratio_array_vs_raw_reference']:.2f}; "
                  f"predict_batch_udf+torch {r['torch_predict_batch_udf_rows_per_s']:,.0f}; init "
                  f"{r['init_vector_s']:.2f} s", flush=True)
        runs.append(run)
    os.makedirs(args.out_dir, exist_ok=True)
    plots = _plots(runs, args.out_dir)
    by = {run["master"]: run for run in runs}
    scaling = {}
    if "local[1]" in by and "local[2]" in by:
        for r1, r2 in zip(by["local[1]"]["results"], by["local[2]"]["results"]):
            scaling[r1["model"]] = {k: round(r2[f"{key}_rows_per_s"] / r1[f"{key}_rows_per_s"], 3) for k, key in
                                    (("vector", "transform_vector"), ("array", "transform_array"),
                                     ("torch", "torch_predict_batch_udf"))}
    print(json.dumps({"benchmark": "transform", "rows": args.rows, "quick": args.quick, "runs": runs,
                      "local2_vs_local1": scaling, "plots": plots,
                      "targets": {"ratio_vs_raw_reference": 0.8, "ratio_vs_torch": 1.0, "local2_vs_local1": 1.7}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
