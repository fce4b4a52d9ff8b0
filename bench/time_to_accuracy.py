"""Wall time to reach 99.0% MNIST test accuracy with LeNet-5 on this machine, three ways, one script:

  * sparkdl on Spark local[2] (the distributed engine, 2 partitions),
  * single-process PyTorch with 2 threads,
  * PySpark's TorchDistributor with 2 local processes (gloo, DistributedDataParallel).

Each trains the same architecture (sparkdl.models.lenet5 / its torch twin) with Adam and a cosine learning-rate
decay over SCHEDULE_EPOCHS epochs, at the batch size and peak rate chosen per system (sparkdl prefers larger
global batches because each iteration is a Spark job; the torch settings are the fastest of those tried, see
bench/RESULTS.md), evaluates the test set after every epoch and stops at the first epoch with accuracy >=
--target. Time includes data preparation inside the system but not the dataset download. The last line is one
JSON object with the three results and the ratios sparkdl/other (goal <= 1.0); a ratio against a run that
never reached the target is marked as a bound.

Processes: every system runs in a process of its own (``--system NAME``), started with this process's
environment unchanged, one after the other; this process imports neither sparkdl nor torch. A first process
(``--prepare``) fetches MNIST through :func:`sparkdl.datasets.fetch_mnist`, normalizes it and writes it to a
temporary ``.npz`` that the systems read with numpy, so the PyTorch and TorchDistributor processes (and the DDP
processes TorchDistributor starts) never import sparkdl and run PyTorch in its default environment, and
TorchDistributor's local[2] session is PySpark's plain ``SparkSession`` (not sparkdl's, whose Python workers
import sparkdl).

    python bench/time_to_accuracy.py [--target 0.99] [--max-epochs 15]
    python bench/time_to_accuracy.py --quick     # one epoch per system: checks that it runs, measures nothing
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


SCHEDULE_EPOCHS = 10  # cosine horizon for every system (each stops as soon as it reaches the target)


SYSTEMS = {"sparkdl": ("sparkdl_local2", "sparkdl local[2]"), "torch": ("torch_2threads", "PyTorch 2 threads"),
           "distributor": ("torch_distributor_2proc", "TorchDistributor 2 processes")}  # key in the JSON, label


def prepare(path):
    """Fetch MNIST (sparkdl's cache / download), normalize it and write ``xtr, ytr, xte, yte`` to ``path``
    (run in a process of its own)."""
    from sparkdl.datasets import fetch_mnist
    (xtr, ytr), (xte, yte) = fetch_mnist()
    prep = lambda x: ((x.astype(np.float32) / 255.0 - 0.1307) / 0.3081).reshape(len(x), 1, 28, 28)
    np.savez(path, xtr=prep(xtr), ytr=ytr.astype(np.int64), xte=prep(xte), yte=yte.astype(np.int64))


def _no_sparkdl(where):
    """Raise RuntimeError if sparkdl was imported in this PyTorch process."""
    if "sparkdl" in sys.modules:
        raise RuntimeError(f"{where}: sparkdl was imported in a PyTorch process; each system runs in its own")


def load(path):
    """``((x_train, y_train), (x_test, y_test))`` written by :func:`prepare` (numpy only)."""
    with np.load(path) as d:
        return (d["xtr"], d["ytr"]), (d["xte"], d["yte"])


def run_sparkdl(data, target, max_epochs, batch_size=1024, lr=6e-3, warmup_epochs=0.5,
                schedule_epochs=SCHEDULE_EPOCHS):
    """sparkdl's settings: few large iterations (each is a Spark job with a fixed cost of ~0.2-0.3 s here),
    Adam with the CLI's linear warm-up + cosine schedule over ``schedule_epochs``."""
    from argparse import Namespace

    from sparkdl import engine, metrics, nn
    from sparkdl.cli import _optimizer
    from sparkdl.models import lenet5
    (xtr, ytr), (xte, yte) = data
    spark = engine.get_or_create_session("local[2]", training=True)  # as `sparkdl train` does
    t0 = time.perf_counter()
    train = engine.DataBlocks.from_numpy(spark.sparkContext, xtr, ytr, 2)
    test = engine.DataBlocks.from_numpy(spark.sparkContext, xte, yte, 2)
    opt = _optimizer(Namespace(epochs=schedule_epochs, warmup_epochs=warmup_epochs, lr=lr, optimizer="adam"),
                     -(-len(xtr) // batch_size))
    trainer = engine.DistributedTrainer(
        lenet5().initialize(0), nn.CrossEntropyLoss(), opt, batch_size=batch_size,
        end_trigger=engine.MaxEpoch(max_epochs) | engine.MaxScore(target - 1e-9), progress=False,
        validation_metrics=[metrics.Top1Accuracy()])
    summary = trainer.fit(train, test)
    wall = time.perf_counter() - t0
    spark.stop()
    accs = [round(v["Top1Accuracy"], 4) for v in summary.validations]
    return {"seconds": wall, "epochs": trainer.state.epoch, "accuracy": accs[-1], "reached": accs[-1] >= target,
            "per_epoch": accs, "batch_size": batch_size, "lr": lr}


def torch_lenet():
    import torch.nn as tnn
    return tnn.Sequential(tnn.Conv2d(1, 6, 5, padding=2), tnn.ReLU(), tnn.MaxPool2d(2), tnn.Conv2d(6, 16, 5),
                          tnn.ReLU(), tnn.MaxPool2d(2), tnn.Flatten(), tnn.Linear(400, 120), tnn.ReLU(),
                          tnn.Linear(120, 84), tnn.ReLU(), tnn.Linear(84, 10))


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


def run_torch(data, target, max_epochs, batch_size=128, lr=3e-3, schedule_epochs=SCHEDULE_EPOCHS):
    import torch
    torch.set_num_threads(2)
    torch.manual_seed(0)
    (xtr, ytr), (xte, yte) = data
    t0 = time.perf_counter()
    epochs, acc = _torch_train(torch_lenet(), xtr, ytr, xte, yte, target, max_epochs, batch_size, lr,
                               schedule_epochs)
    return {"seconds": time.perf_counter() - t0, "epochs": epochs, "accuracy": acc, "reached": acc >= target}


def _ddp_main(data_path, target, max_epochs, batch_size, lr, schedule_epochs):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    (xtr, ytr), (xte, yte) = load(data_path)
    model = DistributedDataParallel(torch_lenet())
    epochs, acc = _torch_train(model, xtr, ytr, xte, yte, target, max_epochs, batch_size, lr, schedule_epochs,
                               rank=dist.get_rank(), world=dist.get_world_size())
    dist.destroy_process_group()
    _no_sparkdl("TorchDistributor's training process")
    return epochs, acc


def run_torch_distributor(data_path, target, max_epochs, batch_size=64, lr=3e-3, schedule_epochs=SCHEDULE_EPOCHS):
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.master("local[2]").appName("bench-torch-distributor").getOrCreate()
    t0 = time.perf_counter()
    epochs, acc = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(
        _ddp_main, data_path, target, max_epochs, batch_size, lr, schedule_epochs)
    wall = time.perf_counter() - t0
    spark.stop()
    return {"seconds": wall, "epochs": epochs, "accuracy": acc, "reached": acc >= target}


def run_system(args):
    """This process's system (``--system``) on the data of ``--data``: its result dict."""
    if args.system == "distributor":
        res = run_torch_distributor(args.data, args.target, args.max_epochs)
        _no_sparkdl("TorchDistributor's driver")
        return res
    data = load(args.data)
    if args.system == "torch":
        res = run_torch(data, args.target, args.max_epochs)
        _no_sparkdl("PyTorch")
        return res
    return run_sparkdl(data, args.target, args.max_epochs, batch_size=args.sparkdl_batch_size, lr=args.sparkdl_lr)


def _child(*argv):
    """Run this script with ``argv`` in a new process (environment unchanged); its last stdout line as JSON."""
    done = subprocess.run([sys.executable, os.path.abspath(__file__), *argv], stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench/time_to_accuracy.py {' '.join(argv)} failed (exit code {done.returncode})")
    lines = done.stdout.strip().splitlines()
    for line in lines[:-1]:  # anything the system printed before its result
        print(line)
    return json.loads(lines[-1]) if lines else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=float, default=0.99)
    ap.add_argument("--max-epochs", type=int, default=15)
    ap.add_argument("--systems", default="sparkdl,torch,distributor",
                    help="comma-separated subset of sparkdl,torch,distributor (ratios need all three)")
    ap.add_argument("--sparkdl-batch-size", type=int, default=1024, help="sparkdl's global batch (default 1024)")
    ap.add_argument("--sparkdl-lr", type=float, default=6e-3, help="sparkdl's peak learning rate (default 6e-3)")
    ap.add_argument("--quick", action="store_true", help="smoke run: --max-epochs 1 (checks that it runs)")
    ap.add_argument("--prepare", help=argparse.SUPPRESS)  # internal: write the data set to this .npz
    ap.add_argument("--system", choices=sorted(SYSTEMS), help=argparse.SUPPRESS)  # internal: run one system here
    ap.add_argument("--data", help=argparse.SUPPRESS)  # internal: the .npz of --prepare
    args = ap.parse_args()
    if args.quick:
        args.max_epochs = 1
    if args.prepare:
        prepare(args.prepare)
        return
    if args.system:
        print(json.dumps(run_system(args)))
        return
    systems = [name for name in SYSTEMS if name in set(args.systems.split(","))]
    res = {"target": args.target}
    with tempfile.TemporaryDirectory(prefix="sparkdl-bench-tta-") as tmp:
        data = os.path.join(tmp, "mnist.npz")
        _child("--prepare", data)
        for name in systems:
            key, label = SYSTEMS[name]
            res[key] = _child("--system", name, "--data", data, "--target", str(args.target), "--max-epochs",
                              str(args.max_epochs), "--sparkdl-batch-size", str(args.sparkdl_batch_size),
                              "--sparkdl-lr", str(args.sparkdl_lr))
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
