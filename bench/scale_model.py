"""An iteration-time cost model for clusters we cannot run (issue 30, item 4): calibrate, validate, predict.

The model (``bench/scale_cost.py``) sums measured parts: task launch, gradient compute per row and parameter,
bytes per gradient record, Python <-> JVM and driver (gather) throughput, the driver's summation rate, shuffle
and broadcast throughput. Three modes:

    python bench/scale_model.py --calibrate                # measure the parts (small Spark jobs), write the JSON
    python bench/scale_model.py --validate                 # real iterations vs the model, error % per configuration
    python bench/scale_model.py --predict                  # 16-256 executors x 1M-100M parameters, reduce chosen

``--calibrate`` measures the parts that small jobs isolate on ``--master`` (default ``local-cluster[2,1,1024]``:
executors in their own JVMs, so results, broadcasts and shuffle blocks cross JVMs as on a cluster), fits the
transfers (weights, shuffle) jointly on engine runs of sizes ``--validate`` does not use (:data:`FIT_PARAMS` on
:data:`FIT_MASTERS`) and writes ``--calibration`` (default ``bench/scale_calibration.json``). ``--validate``
trains an MLP of P in ``--params`` (100k, 1M, 10M) on each of ``--masters`` (local[1], local[2],
local-cluster[2,1,1024], local-cluster[4,1,1024]; each in its own process) and
prints predicted vs measured seconds per iteration. ``--predict`` prints, for ``--cores`` cores per executor,
``--partitions-per-core`` and ``--rows-per-core`` (weak scaling: the global batch grows with the slots), the
predicted iteration time of each reduce strategy, the one the engine's rule picks (``scale_cost.reduce_strategy``),
its weak-scaling efficiency against one executor and the bytes reaching the driver. ``--quick`` is the smallest
setting of each mode (a smoke run, not a measurement). The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from scale_cost import Calibration, Cluster, Strategy, efficiency, predict, reduce_strategy  # noqa: E402
from sparkdl.engine import jvm_reduce, loop  # noqa: E402

DEFAULT_CALIBRATION = os.path.join(HERE, "scale_calibration.json")
MASTERS = ["local[1]", "local[2]", "local-cluster[2,1,1024]", "local-cluster[4,1,1024]"]
#: Sizes of the engine runs the transfers are fitted on (``scale_calibrate.transfer_fit``), on each of the
#: masters of :data:`FIT_MASTERS`, as ``--validate`` measures: weights inside the tasks (120k: 480 KB), broadcast
#: (300k, 600k), the shuffle reduce with 2 and 4 blocks (2M, 4M). None is a validation size.
FIT_PARAMS = (120_000, 300_000, 600_000, 2_000_000, 4_000_000)
#: One JVM (weights only read by the tasks), executors in JVMs of their own, and oversubscribed (4 on 2 cores here).
FIT_MASTERS = ("local[2]", "local-cluster[2,1,1024]", "local-cluster[4,1,1024]")
#: Spark's default ``spark.driver.maxResultSize``: the driver reduce fails when its records exceed it.
MAX_RESULT_BYTES = 1 << 30


def engine_rule(parameters: int, partitions: int, executors: int, cores: int) -> Strategy:
    """:func:`scale_cost.reduce_strategy` with the engine's own constants (read when called, as the engine does)."""
    return reduce_strategy(parameters, partitions, executors, cores, loop.BLOCK_PARAMETERS, jvm_reduce.DRIVER_REDUCE,
                           loop.MAX_BLOCK_BYTES)


def parse_master(master: str) -> tuple[int, int]:
    """``(executors, cores per executor)`` of a local or local-cluster master URL."""
    m = re.fullmatch(r"local\[(\d+)(?:,\d+)?\]", master)
    if m:
        return 1, int(m.group(1))
    if master == "local":
        return 1, 1
    m = re.fullmatch(r"local-cluster\[(\d+),(\d+),\d+\]", master)
    if m:
        return int(m.group(1)), int(m.group(2))
    raise ValueError(f"--masters: expected local, local[k] or local-cluster[n,c,mb], got {master!r}")


def _session(master: str):
    from sparkdl.engine import get_or_create_session
    return get_or_create_session(master, app_name="sparkdl-bench-scale-model", training=True,
                                 conf={"spark.ui.enabled": "false", "spark.driver.memory": "2g"})


# ------------------------------------------------------------------------------------------------ modes
def run_calibrate(args) -> dict:
    from scale_calibrate import calibrate, driver_task_part, reduce_parts, train_iterations, transfer_fit, warm_up
    repeats = 2 if args.quick else 7
    iterations = 2 if args.quick else 6
    fit_params = FIT_PARAMS[1::2] if args.quick else FIT_PARAMS
    spark = _session("local[32]")  # the driver's cost per task: 32 slots, every task in the first wave
    try:
        task_driver_s = driver_task_part(spark.sparkContext, repeats)["task_driver_s"]
    finally:
        spark.stop()
    # The driver reduce with 1 and 2 records per iteration: local[k] runs k group tasks, one pre-summed record each.
    # In local[2] also the launch of an iteration in one JVM: a ~1k-parameter model's iteration.
    runs = []
    for k in (1, 2):
        spark = _session(f"local[{k}]")
        try:
            warm_up(spark.sparkContext)
            runs.append((k, train_iterations(spark.sparkContext, 1_000_000, 2, 2 * iterations, 2)))
            if k == 2:
                one_jvm_launch_s = train_iterations(spark.sparkContext, 1, 2, 2 * iterations, 2)["seconds"]
        finally:
            spark.stop()
    spark = _session(args.master)
    try:
        cal = calibrate(spark.sparkContext, task_driver_s, {**reduce_parts(runs), "one_jvm_launch_s": one_jvm_launch_s},
                        repeats=repeats, iterations=iterations)
    finally:
        spark.stop()
    # The transfers: engine runs measured as --validate measures, at sizes it does not use.
    fitted = []
    for master in FIT_MASTERS[:1 if args.quick else None]:
        for m in measure(master, fit_params, args.partitions, args.iterations, args.warmup):
            cl = _measured_cluster(master, m)
            fitted.append((cl, engine_rule(cl.parameters, cl.partitions, *parse_master(master)), m["seconds"]))
    cal = dataclasses.replace(cal, **transfer_fit(cal, fitted))
    with open(args.calibration, "w") as f:
        json.dump(cal.to_dict(), f, indent=1)
    for k, v in cal.to_dict().items():
        print(f"{k:20s} {v:.4g}" if isinstance(v, float) else f"{k:20s} {v}")
    print(f"written to {args.calibration}")
    return cal.to_dict()


def _measured_cluster(master: str, m: dict) -> Cluster:
    """The :class:`Cluster` of a :func:`scale_calibrate.train_iterations` run ``m`` on ``master`` (this host)."""
    executors, cores = parse_master(master)
    return Cluster(executors, cores, m["partitions"], m["parameters"], m["batch_size"], host_cores=os.cpu_count(),
                   one_jvm=master.startswith("local["), sent_records=m.get("records"))


def validate_worker(args) -> list:
    """In its own process: the measured iterations on one master (:func:`measure` starts one per master)."""
    from scale_calibrate import train_iterations, warm_up
    spark = _session(args.validate_worker)
    try:
        warm_up(spark.sparkContext)
        # The engine's own paths warmed up too (one task per executor and iteration warms the executors' JIT
        # slowly): on a fresh local-cluster[4,...] the first 100k-parameter run took 0.15 s per iteration after
        # its 20 warm-up iterations, the same run 0.08-0.10 s when repeated; on local-cluster[2,...] the tasks'
        # deserialization fell from 21 to 10 ms over 140 iterations.
        train_iterations(spark.sparkContext, args.params[0], args.partitions, args.iterations, 5 * args.warmup)
        return [train_iterations(spark.sparkContext, p, args.partitions, args.iterations, args.warmup)
                for p in args.params]
    finally:
        spark.stop()


def measure(master: str, params, partitions: int, iterations: int, warmup: int) -> list:
    """:func:`scale_calibrate.train_iterations` of each of ``params`` on ``master``, in a process of its own."""
    cmd = [sys.executable, __file__, "--validate-worker", master, "--params", *map(str, params),
           "--partitions", str(partitions), "--iterations", str(iterations), "--warmup", str(warmup)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"the engine runs on {master} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_validate(args) -> dict:
    cal = load_calibration(args.calibration)
    rows = []
    for master in args.masters:
        executors, cores = parse_master(master)
        for m in measure(master, args.params, args.partitions, args.iterations, args.warmup):
            cl = _measured_cluster(master, m)
            rule = engine_rule(cl.parameters, cl.partitions, executors, cores)
            pred = predict(cal, cl, rule)
            err = 100 * (pred["total"] - m["seconds"]) / m["seconds"]
            rows.append({"master": master, "parameters": m["parameters"], "rule": rule.name, "blocks": rule.blocks,
                         "engine_ran": m["strategy"], "predicted_s": pred["total"], "measured_s": m["seconds"],
                         "error_pct": err, "parts": {k: v for k, v in pred.items() if k != "total"},
                         "jvm_ms": m["jvm_ms"], "predicted_driver_bytes": pred["driver_bytes"],
                         "measured_driver_bytes": m["driver_bytes"]})
    print(f"{'master':26s} {'P':>11s} {'reduce':>9s} {'ran':>8s} {'predicted':>10s} {'measured':>10s} {'error':>8s}"
          f" {'driver MB predicted':>20s} {'measured':>9s}")
    for r in rows:
        print(f"{r['master']:26s} {r['parameters']:11,d} {r['rule']:>9s} {r['engine_ran']:>8s} "
              f"{r['predicted_s']:9.3f}s {r['measured_s']:9.3f}s {r['error_pct']:+7.1f}% "
              f"{r['predicted_driver_bytes'] / 2**20:20.2f} {r['measured_driver_bytes'] / 2**20:9.2f}")
    worst = max(abs(r["error_pct"]) for r in rows) if rows else math.nan
    print(f"largest error {worst:.1f}% (target: within 25%); rule == engine in every run: "
          f"{all(r['rule'] == r['engine_ran'] for r in rows)}")
    return {"validation": rows, "largest_error_pct": worst}


def prediction_table(cal: Calibration, executors: list, params: list, cores: int, partitions_per_core: int,
                     rows_per_core: int, value_bytes: int, network_bps: float, scattered: bool = False) -> list:
    """One row per (P, E): both strategies' predicted seconds, the rule's choice, its efficiency vs 1 executor."""
    def cluster(e, p):
        s = e * cores
        return Cluster(e, cores, partitions_per_core * s, p, rows_per_core * s, value_bytes, network_bps,
                       scattered=scattered)
    rows = []
    for p in params:
        base = cluster(1, p)
        base_rule = engine_rule(p, base.partitions, 1, cores)
        for e in executors:
            cl = cluster(e, p)
            rule = engine_rule(p, cl.partitions, e, cores)
            k = max(1, min(cl.partitions, rule.blocks if rule.name == "shuffle" else -(-p // (1 << 20))))
            each = {name: predict(cal, cl, Strategy(name, k if name == "shuffle" else 1))
                    for name in ("driver", "shuffle")}
            chosen = each[rule.name]
            rows.append({"parameters": p, "executors": e, "slots": cl.slots, "partitions": cl.partitions,
                         "batch_size": cl.batch_size, "rule": rule.name, "blocks": rule.blocks,
                         **{f"{name}_s": v["total"] for name, v in each.items()},
                         "chosen_s": chosen["total"], "efficiency": efficiency(cal, cl, rule, base, base_rule),
                         "driver_bytes": chosen["driver_bytes"],
                         "over_max_result_size": chosen["driver_bytes"] > MAX_RESULT_BYTES,
                         "parts": {k2: v2 for k2, v2 in chosen.items() if k2 not in ("total", "driver_bytes")}})
    return rows


def run_predict(args) -> dict:
    cal = load_calibration(args.calibration)
    network = args.network_gbps * 1e9 / 8
    rows = prediction_table(cal, args.executors, args.params, args.cores, args.partitions_per_core,
                            args.rows_per_core, 2 if args.compress == "fp16" else 4, network, args.scattered)
    print(f"calibration: {cal.host}; {args.cores} cores/executor, {args.partitions_per_core} partitions and "
          f"{args.rows_per_core} rows per core, network {args.network_gbps} Gbit/s (assumed)"
          + ("; partition ids scattered over executors" if args.scattered else ""))
    print(f"{'P':>12s} {'exec':>5s} {'slots':>6s} {'driver':>9s} {'shuffle':>9s} {'rule':>8s} "
          f"{'iter':>9s} {'eff':>6s} {'driver MB':>10s}")
    for r in rows:
        flag = " (> maxResultSize: fails)" if r["over_max_result_size"] else ""
        print(f"{r['parameters']:12,d} {r['executors']:5d} {r['slots']:6d} {r['driver_s']:8.3f}s "
              f"{r['shuffle_s']:8.3f}s {r['rule']:>8s} {r['chosen_s']:8.3f}s "
              f"{r['efficiency']:6.2f} {r['driver_bytes'] / 2**20:10.1f}{flag}")
    return {"prediction": rows, "calibration": cal.to_dict()}


def load_calibration(path: str) -> Calibration:
    if not os.path.exists(path):
        raise SystemExit(f"no calibration at {path}: run bench/scale_model.py --calibrate first")
    with open(path) as f:
        return Calibration.from_dict(json.load(f))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--calibrate", action="store_true")
    mode.add_argument("--validate", action="store_true")
    mode.add_argument("--predict", action="store_true")
    mode.add_argument("--validate-worker", metavar="MASTER", help=argparse.SUPPRESS)
    ap.add_argument("--calibration", default=DEFAULT_CALIBRATION)
    ap.add_argument("--master", default="local-cluster[2,1,1024]", help="--calibrate: where to measure")
    ap.add_argument("--masters", nargs="+", default=MASTERS)
    ap.add_argument("--params", nargs="+", type=int, default=None)
    ap.add_argument("--partitions", type=int, default=4, help="--validate and the fitted runs of --calibrate: "
                    "data partitions")
    ap.add_argument("--iterations", type=int, default=15, help="--validate and the fitted runs of --calibrate: "
                    "iterations measured (their median)")
    ap.add_argument("--warmup", type=int, default=20, help="--validate and the fitted runs: iterations before the measured ones (the "
                    "model predicts a long run's steady state)")
    ap.add_argument("--executors", nargs="+", type=int, default=[16, 32, 64, 128, 256])
    ap.add_argument("--cores", type=int, default=4)
    ap.add_argument("--partitions-per-core", type=int, default=2)
    ap.add_argument("--rows-per-core", type=int, default=32)
    ap.add_argument("--network-gbps", type=float, default=10.0)
    ap.add_argument("--compress", choices=["fp16"], default=None)
    ap.add_argument("--scattered", action="store_true",
                    help="--predict: partition ids interleaved over the executors (no pre-sum in the tasks)")
    ap.add_argument("--quick", action="store_true", help="the smallest setting of the mode (smoke run)")
    args = ap.parse_args(argv)
    if args.quick:
        args.masters, args.iterations, args.warmup = args.masters[:1], 2, 1
        args.executors = args.executors[:1]
    if args.params is None:
        if args.predict:
            args.params = [1_000_000] if args.quick else [1_000_000, 10_000_000, 100_000_000]
        else:
            args.params = [100_000] if args.quick else [100_000, 1_000_000, 10_000_000]
    if args.validate_worker:
        result = validate_worker(args)
    elif args.calibrate:
        result = run_calibrate(args)
    elif args.validate:
        result = run_validate(args)
    else:
        result = run_predict(args)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
