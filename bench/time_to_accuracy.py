"""Wall time to a test accuracy on this machine, three ways, one script:

  * sparkdl on Spark local[2] (the distributed engine, 2 partitions),
  * single-process PyTorch with 2 threads,
  * PySpark's TorchDistributor with 2 local processes (gloo, DistributedDataParallel).

Two tasks (bench/tta_tasks.py): ``mnist`` (the default), LeNet-5 on MNIST to 99.0%; ``fashion_mnist``, ResNet-8
(the CIFAR ResNet with one basic block per stage, BatchNorm, for 1x28x28) on Fashion-MNIST to 92.0%.
Each system trains the same architecture (defined for both libraries in bench/tta_tasks.py) with Adam and a
cosine learning-rate decay over ``schedule_epochs`` epochs, at the batch size, peak rate and schedule chosen per
system (``tta_tasks.SETTINGS``: the fastest of the grid ``tta_tasks.SEARCH``, which ``--search`` runs, and of the
schedules tried with ``--schedule-epochs``, which sets the schedule of every system run; sparkdl prefers
larger global batches because each iteration is a Spark job), evaluates the test set after every epoch and stops
at the first epoch with accuracy >= --target. Time includes data preparation inside the system but not the
dataset download. The last line is one JSON object with the three results and the ratios sparkdl/other (goal
<= 1.0); a ratio against a run that never reached the target is marked as a bound.

Processes: every system runs in a process of its own (``--system NAME``), started with this process's
environment unchanged, one after the other; this process imports neither sparkdl nor torch. A first process
(``--prepare``) fetches the data set through :mod:`sparkdl.datasets`, normalizes it and writes it to a
temporary ``.npz`` that the systems read with numpy, so the PyTorch and TorchDistributor processes (and the DDP
processes TorchDistributor starts) never import sparkdl and run PyTorch in its default environment, and
TorchDistributor's local[2] session is PySpark's plain ``SparkSession`` (not sparkdl's, whose Python workers
import sparkdl).

    python bench/time_to_accuracy.py [--target 0.99] [--max-epochs 15] [--schedule-epochs 6]
    python bench/time_to_accuracy.py --task fashion_mnist
    python bench/time_to_accuracy.py --task fashion_mnist --search [--systems torch]   # the settings' grid
    python bench/time_to_accuracy.py --quick     # one epoch per system: checks that it runs, measures nothing
    python bench/time_to_accuracy.py --task fashion_mnist --quick --limit 2000   # the same on 2,000 images
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

import procs
import tta_tasks
from tta_tasks import SETTINGS, TASKS

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


SYSTEMS = {"sparkdl": ("sparkdl_local2", "sparkdl local[2]"), "torch": ("torch_2threads", "PyTorch 2 threads"),
           "distributor": ("torch_distributor_2proc", "TorchDistributor 2 processes")}  # key in the JSON, label


def prepare(path, task, limit=None):
    """Fetch the task's data set (sparkdl's cache / download), normalize it and write ``xtr, ytr, xte, yte`` to
    ``path`` (run in a process of its own); with ``limit``, only the first ``limit`` training and test images."""
    from sparkdl import datasets
    spec = TASKS[task]
    (xtr, ytr), (xte, yte) = getattr(datasets, spec["fetch"])()
    if limit:
        xtr, ytr, xte, yte = xtr[:limit], ytr[:limit], xte[:limit], yte[:limit]
    prep = lambda x: ((x.astype(np.float32) / 255.0 - spec["mean"]) / spec["std"]).reshape(len(x), 1, 28, 28)
    np.savez(path, xtr=prep(xtr), ytr=ytr.astype(np.int64), xte=prep(xte), yte=yte.astype(np.int64))


def _no_sparkdl(where):
    """Raise RuntimeError if sparkdl was imported in this PyTorch process (no module of bench/ used: TorchDistributor
    pickles this into its training processes by value)."""
    if "sparkdl" in sys.modules:
        raise RuntimeError(f"{where}: sparkdl was imported in a PyTorch process; each system runs in its own")


def load(path):
    """``((x_train, y_train), (x_test, y_test))`` written by :func:`prepare` (numpy only)."""
    with np.load(path) as d:
        return (d["xtr"], d["ytr"]), (d["xte"], d["yte"])


def run_sparkdl(data, target, max_epochs, batch_size, lr, schedule_epochs, model="lenet5", warmup_epochs=0.5):
    """sparkdl's settings: few large iterations (each is a Spark job with a fixed cost of ~0.2-0.3 s here),
    Adam with the CLI's linear warm-up + cosine schedule over ``schedule_epochs``."""
    from argparse import Namespace

    from sparkdl import engine, metrics, nn
    from sparkdl.cli import _optimizer
    (xtr, ytr), (xte, yte) = data
    spark = engine.get_or_create_session("local[2]", training=True)  # as `sparkdl train` does
    t0 = time.perf_counter()
    train = engine.DataBlocks.from_numpy(spark.sparkContext, xtr, ytr, 2)
    test = engine.DataBlocks.from_numpy(spark.sparkContext, xte, yte, 2)
    opt = _optimizer(Namespace(epochs=schedule_epochs, warmup_epochs=warmup_epochs, lr=lr, optimizer="adam"),
                     -(-len(xtr) // batch_size))
    trainer = engine.DistributedTrainer(
        tta_tasks.sparkdl_model(model), nn.CrossEntropyLoss(), opt, batch_size=batch_size,
        end_trigger=engine.MaxEpoch(max_epochs) | engine.MaxScore(target - 1e-9), progress=False,
        validation_metrics=[metrics.Top1Accuracy()])
    summary = trainer.fit(train, test)
    wall = time.perf_counter() - t0
    spark.stop()
    accs = [round(v["Top1Accuracy"], 4) for v in summary.validations]
    return {"seconds": wall, "epochs": trainer.state.epoch, "accuracy": accs[-1], "reached": accs[-1] >= target,
            "per_epoch": accs, "batch_size": batch_size, "lr": lr}


def _torch_train(model, xtr, ytr, xte, yte, target, max_epochs, batch_size, lr, schedule_epochs=None, rank=0,
                 world=1):
    """Adam, constant ``lr`` or cosine decay to 1% over ``schedule_epochs``; stops at the first epoch whose
    test accuracy reaches ``target``."""
    import torch
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    steps = -(-len(xtr) // (world * batch_size))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, schedule_epochs * steps, eta_min=lr * 0.01) \
        if schedule_epochs else None
    g = torch.Generator().manual_seed(0)
    xtr, ytr = torch.from_numpy(xtr), torch.from_numpy(ytr)
    for epoch in range(max_epochs):
        perm = torch.randperm(len(xtr), generator=g)[rank::world]
        model.train()
        for i in range(0, len(perm), batch_size):
            idx = perm[i:i + batch_size]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
            if sched is not None and sched.last_epoch < sched.T_max:
                sched.step()
        model.eval()
        with torch.no_grad():
            acc = float((model(torch.from_numpy(xte)).argmax(1).numpy() == yte).mean())
        if acc >= target:
            return epoch + 1, acc
    return max_epochs, acc


def run_torch(data, target, max_epochs, batch_size, lr, schedule_epochs, model="lenet5"):
    import torch
    torch.set_num_threads(2)
    torch.manual_seed(0)
    (xtr, ytr), (xte, yte) = data
    t0 = time.perf_counter()
    epochs, acc = _torch_train(tta_tasks.torch_model(model), xtr, ytr, xte, yte, target, max_epochs, batch_size, lr,
                               schedule_epochs)
    return {"seconds": time.perf_counter() - t0, "epochs": epochs, "accuracy": acc, "reached": acc >= target}


def _ddp_main(data_path, target, max_epochs, batch_size, lr, schedule_epochs, model, bench_dir):
    """One TorchDistributor training process. It is pickled by value into a process whose ``sys.path`` lacks bench/,
    so it imports bench/tta_tasks.py from ``bench_dir`` itself."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    sys.path.insert(0, bench_dir)
    import tta_tasks as tasks
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    (xtr, ytr), (xte, yte) = load(data_path)
    net = DistributedDataParallel(tasks.torch_model(model))
    epochs, acc = _torch_train(net, xtr, ytr, xte, yte, target, max_epochs, batch_size, lr, schedule_epochs,
                               rank=dist.get_rank(), world=dist.get_world_size())
    dist.destroy_process_group()
    _no_sparkdl("TorchDistributor's training process")
    return epochs, acc


def run_torch_distributor(data_path, target, max_epochs, batch_size, lr, schedule_epochs, model="lenet5"):
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.master("local[2]").appName("bench-torch-distributor").getOrCreate()
    t0 = time.perf_counter()
    epochs, acc = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(
        _ddp_main, data_path, target, max_epochs, batch_size, lr, schedule_epochs, model,
        os.path.dirname(os.path.abspath(__file__)))
    wall = time.perf_counter() - t0
    spark.stop()
    return {"seconds": wall, "epochs": epochs, "accuracy": acc, "reached": acc >= target}


def run_system(args):
    """This process's system (``--system``) on the data of ``--data``: its result dict."""
    task = TASKS[args.task]
    kw = {"batch_size": args.batch_size, "lr": args.lr,
          "schedule_epochs": args.schedule_epochs or task["schedule_epochs"], "model": task["model"]}
    if args.system == "distributor":
        res = run_torch_distributor(args.data, args.target, args.max_epochs, **kw)
        _no_sparkdl("TorchDistributor's driver")
        return res
    data = load(args.data)
    if args.system == "torch":
        res = run_torch(data, args.target, args.max_epochs, **kw)
        _no_sparkdl("PyTorch")
        return res
    return run_sparkdl(data, args.target, args.max_epochs, **kw)


def _run(name, data, args, batch_size, lr, schedule_epochs=None):
    """System ``name`` in a process of its own; its result dict."""
    schedule = schedule_epochs or args.schedule_epochs or TASKS[args.task]["schedule_epochs"]
    return procs.run_child(__file__, "--system", name, "--data", data, "--task", args.task, "--target", args.target,
                           "--max-epochs", args.max_epochs, "--batch-size", batch_size, "--lr", lr,
                           "--schedule-epochs", schedule)


def search(args, systems, data):
    """Every (batch size, lr) of ``tta_tasks.SEARCH[task]`` for each system, each in a process of its own; prints
    one line per run and returns ``{system: {"runs": [...], "best": {...}}}`` (best: fastest to the target)."""
    out = {}
    for name in systems:
        runs = []
        for batch_size in tta_tasks.SEARCH[args.task][name][0]:
            for lr in tta_tasks.SEARCH[args.task][name][1]:
                res = {"batch_size": batch_size, "lr": lr, **_run(name, data, args, batch_size, lr)}
                runs.append(res)
                print(f"search {args.task} {SYSTEMS[name][1]}: batch {batch_size} lr {lr:g} schedule "
                      f"{args.schedule_epochs or TASKS[args.task]['schedule_epochs']}: {res['seconds']:.1f} s, "
                      f"{res['epochs']} epochs, accuracy {res['accuracy']:.4f}", flush=True)
        reached = [r for r in runs if r["reached"]]
        out[name] = {"runs": runs, "best": min(reached, key=lambda r: r["seconds"]) if reached else None}
    return out


def _parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=sorted(TASKS), default="mnist", help="mnist (default) or fashion_mnist")
    ap.add_argument("--target", type=float, help="test accuracy to reach (default: the task's, 0.99 / 0.92)")
    ap.add_argument("--max-epochs", type=int, help="give up after this many epochs (default: the task's, 15 / 20)")
    ap.add_argument("--systems", default="sparkdl,torch,distributor",
                    help="comma-separated subset of sparkdl,torch,distributor (ratios need all three)")
    ap.add_argument("--sparkdl-batch-size", type=int, help="sparkdl's global batch (default: the task's setting)")
    ap.add_argument("--sparkdl-lr", type=float, help="sparkdl's peak learning rate (default: the task's setting)")
    ap.add_argument("--schedule-epochs", type=int,
                    help="epochs of the cosine decay, for every system run (default: each system's setting in "
                         "tta_tasks.SETTINGS, else the task's schedule_epochs)")
    ap.add_argument("--search", action="store_true", help="run the grid of settings (tta_tasks.SEARCH) instead")
    ap.add_argument("--quick", action="store_true", help="smoke run: --max-epochs 1 (checks that it runs)")
    ap.add_argument("--limit", type=int, help="smoke runs: only the first LIMIT training and test images")
    ap.add_argument("--prepare", help=argparse.SUPPRESS)  # internal: write the data set to this .npz
    ap.add_argument("--system", choices=sorted(SYSTEMS), help=argparse.SUPPRESS)  # internal: run one system here
    ap.add_argument("--data", help=argparse.SUPPRESS)  # internal: the .npz of --prepare
    ap.add_argument("--batch-size", type=int, help=argparse.SUPPRESS)  # internal: --system's settings
    ap.add_argument("--lr", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    task = TASKS[args.task]
    args.target = task["target"] if args.target is None else args.target
    args.max_epochs = 1 if args.quick else (task["max_epochs"] if args.max_epochs is None else args.max_epochs)
    return args


def main():
    args = _parse()
    if args.prepare:
        prepare(args.prepare, args.task, args.limit)
        return
    if args.system:
        print(json.dumps(run_system(args)))
        return
    systems = [name for name in SYSTEMS if name in set(args.systems.split(","))]
    settings = dict(SETTINGS[args.task])
    settings["sparkdl"] = (args.sparkdl_batch_size or settings["sparkdl"][0], args.sparkdl_lr or settings["sparkdl"][1],
                           *settings["sparkdl"][2:])
    schedules = {name: args.schedule_epochs or (s[2] if len(s) > 2 else TASKS[args.task]["schedule_epochs"])
                 for name, s in settings.items()}
    res = {"target": args.target} if args.task == "mnist" else {"task": args.task, "target": args.target}
    with tempfile.TemporaryDirectory(prefix="sparkdl-bench-tta-") as tmp:
        data = os.path.join(tmp, args.task + ".npz")
        limit = ["--limit", args.limit] if args.limit else []
        procs.run_child(__file__, "--prepare", data, "--task", args.task, *limit)
        if args.search:
            print(json.dumps({"task": args.task, "target": args.target, "search": search(args, systems, data)}))
            return
        for name in systems:
            key, label = SYSTEMS[name]
            res[key] = {**_run(name, data, args, *settings[name][:2], schedules[name]),
                        "batch_size": settings[name][0], "lr": settings[name][1], "schedule_epochs": schedules[name]}
            print(f"{label}:", res[key], flush=True)
    if len(systems) == 3:
        ours = res["sparkdl_local2"]
        for key, name in (("torch_2threads", "ratio_vs_torch"),
                          ("torch_distributor_2proc", "ratio_vs_torch_distributor")):
            other = res[key]
            res[name] = round(ours["seconds"] / other["seconds"], 3)
            if not (ours["reached"] and other["reached"]):  # a run that missed the target only bounds the ratio
                res[name + "_bound"] = "upper" if ours["reached"] else ("lower" if other["reached"] else "none")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
