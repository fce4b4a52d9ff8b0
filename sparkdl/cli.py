"""The ``sparkdl`` command line: train and evaluate reference models on real datasets with Spark.

Examples
--------
    sparkdl train --model lenet5 --dataset mnist            # Spark local[*], default settings
    sparkdl train --model mlp --dataset fashion-mnist --epochs 5 --master local[2] --json
    sparkdl evaluate --model runs/lenet5-mnist/model --dataset mnist
    spark-submit --master spark://host:7077 examples/train_lenet5_mnist.py --epochs 12
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

import numpy as np

__all__ = ["main", "build_parser"]

#: Per-dataset pixel mean and standard deviation (of the training images scaled to [0, 1]).
NORMALIZATION = {"mnist": (0.1307, 0.3081), "fashion-mnist": (0.2860, 0.3530)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkdl", description="Deep learning on Apache Spark.")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--dataset", choices=sorted(NORMALIZATION), default="mnist")
        p.add_argument("--master", default=None,
                       help="Spark master URL (default: spark-submit's, else local[*])")
        p.add_argument("--data-home", default=None, help="dataset cache directory (default ~/.cache/sparkdl/datasets)")
        p.add_argument("--data-source", default=None, help="local directory holding the dataset's IDX files")
        p.add_argument("--partitions", type=int, default=None, help="data partitions (default: Spark's parallelism)")
        p.add_argument("--json", action="store_true", help="print one JSON line with the results at the end")

    t = sub.add_parser("train", help="train a model with the distributed engine")
    common(t)
    t.add_argument("--model", choices=["lenet5", "mlp"], default="lenet5")
    t.add_argument("--epochs", type=int, default=12)
    t.add_argument("--batch-size", type=int, default=512, help="global mini-batch size")
    t.add_argument("--lr", type=float, default=4e-3, help="peak learning rate")
    t.add_argument("--optimizer", choices=["adam", "adamw", "sgd"], default="adam")
    t.add_argument("--warmup-epochs", type=float, default=0.5, help="linear warm-up before cosine decay")
    t.add_argument("--limit", type=int, default=None, help="use only the first N training samples")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--output", default="runs/{model}-{dataset}", help="directory for model, checkpoints, logs")
    t.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --output")
    t.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    e = sub.add_parser("evaluate", help="evaluate a saved model on a dataset's test split")
    common(e)
    e.add_argument("--model", required=True, help="path of a model saved by `sparkdl train`")
    e.add_argument("--batch-size", type=int, default=1024)
    return parser


def _load(args):
    from sparkdl import datasets
    fetch = {"mnist": datasets.fetch_mnist, "fashion-mnist": datasets.fetch_fashion_mnist}[args.dataset]
    (x_train, y_train), (x_test, y_test) = fetch(data_home=args.data_home, source=args.data_source)
    mean, std = NORMALIZATION[args.dataset]

    def prep(x):
        return ((x.astype(np.float32) / 255.0 - mean) / std).reshape(len(x), 1, 28, 28)
    return (prep(x_train), y_train.astype(np.int64)), (prep(x_test), y_test.astype(np.int64))


def _optimizer(args, iterations_per_epoch):
    from sparkdl import optim
    from sparkdl.optim import schedules
    total = max(1, args.epochs * iterations_per_epoch)
    warmup = min(total - 1, int(args.warmup_epochs * iterations_per_epoch))
    cosine = schedules.CosineAnnealingLR(T_max=max(1, total - warmup), eta_min=args.lr * 0.01, step_by="iteration")
    schedule = schedules.SequentialLR([schedules.LinearWarmup(warmup, start_factor=0.1, step_by="iteration"), cosine],
                                      milestones=[warmup]) if warmup > 0 else cosine
    cls = {"adam": optim.Adam, "adamw": optim.AdamW, "sgd": optim.SGD}[args.optimizer]
    kwargs = {"momentum": 0.9, "nesterov": True} if args.optimizer == "sgd" else {}
    return cls(lr=args.lr, schedule=schedule, **kwargs)


def train(args) -> dict:
    from sparkdl import engine, io, metrics, nn
    from sparkdl.models import MODELS
    output = args.output.format(model=args.model, dataset=args.dataset)
    spark = engine.get_or_create_session(args.master, app_name=f"sparkdl train {args.model} {args.dataset}")
    sc = spark.sparkContext
    (x_train, y_train), (x_test, y_test) = _load(args)
    if args.limit:
        x_train, y_train = x_train[:args.limit], y_train[:args.limit]
    train_data = engine.DataBlocks.from_numpy(sc, x_train, y_train, args.partitions)
    test_data = engine.DataBlocks.from_numpy(sc, x_test, y_test, args.partitions)
    model = MODELS[args.model]().initialize(args.seed)
    it_per_epoch = -(-len(x_train) // args.batch_size)
    trainer = engine.DistributedTrainer(
        model, nn.CrossEntropyLoss(), _optimizer(args, it_per_epoch), batch_size=args.batch_size,
        end_trigger=engine.MaxEpoch(args.epochs), seed=args.seed, num_classes=10,
        validation_metrics=[metrics.Top1Accuracy(), metrics.Loss(nn.CrossEntropyLoss())],
        checkpoint_dir=os.path.join(output, "checkpoints"), log_dir=os.path.join(output, "tensorboard"),
        progress=not args.no_progress)
    t0 = time.perf_counter()
    summary = trainer.fit(train_data, test_data, resume=args.resume)
    wall = time.perf_counter() - t0
    model_path = os.path.join(output, "model")
    io.save_model(model, model_path, overwrite=True)
    final = summary.validations[-1] if summary.validations else {}
    samples = sum(r["samples"] for r in summary.iterations)
    result = {"command": "train", "model": args.model, "dataset": args.dataset,
              "test_accuracy": final.get("Top1Accuracy"), "test_loss": final.get("Loss"),
              "epochs": trainer.state.epoch, "iterations": trainer.state.iteration, "wall_s": round(wall, 2),
              "samples_per_s": round(samples / wall, 1) if wall > 0 else None, "model_path": model_path,
              "master": sc.master, "partitions": train_data.num_partitions, "batch_size": args.batch_size}
    print(f"\nTrained {args.model} on {args.dataset} ({len(x_train)} samples, {train_data.num_partitions} partitions, "
          f"master {sc.master}) for {result['epochs']} epochs in {wall:.1f} s ({result['samples_per_s']} samples/s).")
    if final:
        print(f"Test accuracy {final['Top1Accuracy']:.4f}, test loss {final['Loss']:.4f}.")
    print(f"Model: {model_path}\nCheckpoints: {os.path.join(output, 'checkpoints')}\n"
          f"TensorBoard: tensorboard --logdir {os.path.join(output, 'tensorboard')}")
    train_data.unpersist()
    test_data.unpersist()
    return result


def evaluate(args) -> dict:
    from sparkdl import engine, io, metrics, nn
    spark = engine.get_or_create_session(args.master, app_name=f"sparkdl evaluate {args.dataset}")
    model = io.load_model(args.model)
    _, (x_test, y_test) = _load(args)
    test_data = engine.DataBlocks.from_numpy(spark.sparkContext, x_test, y_test, args.partitions)
    t0 = time.perf_counter()
    scores = engine.evaluate(model, test_data, [metrics.Top1Accuracy(), metrics.Loss(nn.CrossEntropyLoss())],
                             batch_size=args.batch_size)
    result = {"command": "evaluate", "model_path": args.model, "dataset": args.dataset,
              "test_accuracy": scores["Top1Accuracy"], "test_loss": scores["Loss"],
              "samples": len(x_test), "wall_s": round(time.perf_counter() - t0, 2)}
    print(f"{args.model} on the {args.dataset} test set ({len(x_test)} samples): "
          f"accuracy {scores['Top1Accuracy']:.4f}, loss {scores['Loss']:.4f}")
    test_data.unpersist()
    return result


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("sparkdl").setLevel(logging.INFO)  # validation lines, data source used
    result = train(args) if args.command == "train" else evaluate(args)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
