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

    python bench/time_to_accuracy.py [--target 0.99] [--max-epochs 15]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


SCHEDULE_EPOCHS = 10  # cosine horizon for every system (each stops as soon as it reaches the target)


def load():
    from sparkdl.datasets import fetch_mnist
    (xtr, ytr), (xte, yte) = fetch_mnist()
    prep = lambda x: ((x.astype(np.float32) / 255.0 - 0.1307) / 0.3081).reshape(len(x), 1, 28, 28)
    return (prep(xtr), ytr.astype(np.int64)), (prep(xte), yte.astype(np.int64))


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


def _ddp_main(target, max_epochs, batch_size, lr, schedule_epochs):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = load()
    (xtr, ytr), (xte, yte) = data
    model = DistributedDataParallel(torch_lenet())
    epochs, acc = _torch_train(model, xtr, ytr, xte, yte, target, max_epochs, batch_size, lr, schedule_epochs,
                               rank=dist.get_rank(), world=dist.get_world_size())
    dist.destroy_process_group()
    return epochs, acc


def run_torch_distributor(target, max_epochs, batch_size=64, lr=3e-3, schedule_epochs=SCHEDULE_EPOCHS):
    from pyspark.ml.torch.distributor import TorchDistributor
    from sparkdl.engine import get_or_create_session
    spark = get_or_create_session("local[2]", training=True)
    t0 = time.perf_counter()
    epochs, acc = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(
        _ddp_main, target, max_epochs, batch_size, lr, schedule_epochs)
    wall = time.perf_counter() - t0
    spark.stop()
    return {"seconds": wall, "epochs": epochs, "accuracy": acc, "reached": acc >= target}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=float, default=0.99)
    ap.add_argument("--max-epochs", type=int, default=15)
    ap.add_argument("--systems", default="sparkdl,torch,distributor",
                    help="comma-separated subset of sparkdl,torch,distributor (ratios need all three)")
    ap.add_argument("--sparkdl-batch-size", type=int, default=1024, help="sparkdl's global batch (default 1024)")
    ap.add_argument("--sparkdl-lr", type=float, default=6e-3, help="sparkdl's peak learning rate (default 6e-3)")
    args = ap.parse_args()
    systems = set(args.systems.split(","))
    data = load()
    res = {"target": args.target}
    if "sparkdl" in systems:
        res["sparkdl_local2"] = run_sparkdl(data, args.target, args.max_epochs, batch_size=args.sparkdl_batch_size,
                                            lr=args.sparkdl_lr)
        print("sparkdl local[2]:", res["sparkdl_local2"], flush=True)
    if "torch" in systems:
        res["torch_2threads"] = run_torch(data, args.target, args.max_epochs)
        print("PyTorch 2 threads:", res["torch_2threads"], flush=True)
    if "distributor" in systems:
        res["torch_distributor_2proc"] = run_torch_distributor(args.target, args.max_epochs)
        print("TorchDistributor 2 processes:", res["torch_distributor_2proc"], flush=True)
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
