"""The ``sparkdl`` command line: train and evaluate reference models on real datasets with Spark.

Examples
--------
    sparkdl train --model lenet5 --dataset mnist            # Spark local[*], default settings
    sparkdl train --model mlp --dataset fashion-mnist --epochs 5 --master local[2] --json
    sparkdl evaluate --model runs/lenet5-mnist/model --dataset mnist
    spark-submit --master spark://host:7077 examples/train_lenet5_mnist.py --epochs 7
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shutil
import sys
import time

import numpy as np

__all__ = ["main", "build_parser", "UsageError"]

#: Per-dataset pixel mean and standard deviation (of the training images scaled to [0, 1]).
NORMALIZATION = {"mnist": (0.1307, 0.3081), "fashion-mnist": (0.2860, 0.3530)}

#: The file that makes a directory a sparkdl run: the settings the run was started with.
RUN_FILE = "run.json"
#: What a run directory holds; --overwrite removes exactly these.
RUN_ENTRIES = ("model", "checkpoints", "tensorboard", RUN_FILE)
#: Settings that define a run: --resume continues a run only with the same values.
RUN_SETTINGS = ("model", "dataset", "epochs", "batch_size", "lr", "optimizer", "warmup_epochs", "limit", "seed")

_MASTER = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|yarn|(spark|k8s|mesos)://\S+")


class UsageError(Exception):
    """A mistake in the command line or in the files it names: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """Reports a usage error as one line (no usage block) naming ``--help``."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _int_at_least(low):
    def convert(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value
    return convert


def _float(positive: bool):
    def convert(text):
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"expected a finite number {'> 0' if positive else '>= 0'}, got {text!r}")
        return value
    return convert


def _master(text):
    if not _MASTER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected a Spark master URL (local, local[N], local[*], spark://HOST:PORT, "
                                         f"yarn, k8s://...), got {text!r}")
    return text


def _existing_dir(text):
    if not os.path.isdir(os.path.expanduser(text)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory")
    return text


def build_parser() -> argparse.ArgumentParser:
    from sparkdl import __version__
    fmt = argparse.ArgumentDefaultsHelpFormatter
    parser = _Parser(prog="sparkdl", description="Deep learning on Apache Spark.", formatter_class=fmt)
    parser.add_argument("--version", action="version", version=f"sparkdl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,evaluate}")

    def common(p):
        p.add_argument("--dataset", choices=sorted(NORMALIZATION), default="mnist", help="dataset to use")
        p.add_argument("--master", type=_master, default=None,
                       help="Spark master URL (default: spark-submit's, else local[*])")
        p.add_argument("--data-home", default=None,
                       help="dataset cache directory (default: ~/.cache/sparkdl/datasets)")
        p.add_argument("--data-source", type=_existing_dir, default=None,
                       help="local directory holding the dataset's IDX files (offline use)")
        p.add_argument("--partitions", type=_int_at_least(1), default=None,
                       help="data partitions (default: Spark's parallelism)")
        p.add_argument("--json", action="store_true", help="print one JSON line with the results at the end")

    t = sub.add_parser("train", help="train a model with the distributed engine", formatter_class=fmt,
                       description="Train a reference model on a dataset with the distributed engine.")
    common(t)
    t.add_argument("--model", choices=["lenet5", "mlp"], default="lenet5", help="network to train")
    t.add_argument("--epochs", type=_int_at_least(1), default=7, help="passes over the training data")
    t.add_argument("--batch-size", type=_int_at_least(1), default=512, help="global mini-batch size")
    t.add_argument("--lr", type=_float(positive=True), default=4e-3, help="peak learning rate")
    t.add_argument("--optimizer", choices=["adam", "adamw", "sgd"], default="adam",
                   help="optimizer (sgd: momentum 0.9, Nesterov)")
    t.add_argument("--warmup-epochs", type=_float(positive=False), default=0.5,
                   help="linear warm-up before cosine decay, in epochs")
    t.add_argument("--limit", type=_int_at_least(1), default=None, help="use only the first N training samples")
    t.add_argument("--test-limit", type=_int_at_least(1), default=None,
                   help="validate on only the first N test samples (quick runs; does not change the training)")
    t.add_argument("--seed", type=_int_at_least(0), default=0, help="seed of initialization, shuffling and dropout")
    t.add_argument("--output", default="runs/{model}-{dataset}",
                   help="run directory for the model, checkpoints, TensorBoard logs and run.json")
    again = t.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="continue the run in --output from its latest checkpoint (same settings only)")
    again.add_argument("--overwrite", action="store_true", help="replace the run already in --output")
    t.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    e = sub.add_parser("evaluate", help="evaluate a saved model on a dataset's test split", formatter_class=fmt,
                       description="Evaluate a model saved by `sparkdl train` on a dataset's test split.")
    common(e)
    e.add_argument("--model", required=True, help="path of a model saved by `sparkdl train` (RUN/model)")
    e.add_argument("--batch-size", type=_int_at_least(1), default=1024, help="rows per forward pass")
    return parser


def _run_settings(args) -> dict:
    return {k: getattr(args, k) for k in RUN_SETTINGS}


def _next_free(storage, path: str) -> str:
    n = 2
    while storage.exists(f"{path}-{n}"):
        n += 1
    return f"{path}-{n}"


def _output_name(args) -> str:
    try:
        return args.output.format(model=args.model, dataset=args.dataset)
    except (KeyError, IndexError, ValueError) as e:
        raise UsageError(f"--output {args.output!r}: only {{model}} and {{dataset}} can be filled in ({e})") from None


def _storage(path: str):
    """``(storage, path)``: a local path (normalized, relative stays relative) or a URI of the session's Hadoop file
    systems (``hdfs://``, ``s3a://``, ...: the session must run already)."""
    from sparkdl.io._fs import LocalStorage, resolve
    return (LocalStorage(), os.path.normpath(path)) if "://" not in path else resolve(path)


def prepare_run_directory(args) -> str:
    """The run directory of ``sparkdl train``, checked before training starts (before Spark starts for a local
    one): a new run never overwrites another one (without ``--overwrite``), and ``--resume`` only continues a run
    started with the same settings. A URI other than ``file://`` needs the Spark session running.

    Raises
    ------
    UsageError
        Naming the directory and the option that fixes the problem.
    """
    from sparkdl.io._fs import replace_file
    storage, output = _storage(_output_name(args))
    run_file = storage.join(output, RUN_FILE)
    settings = _run_settings(args)
    if args.resume:
        if not storage.exists(run_file) or storage.isdir(run_file):
            raise UsageError(f"--resume: {output} holds no sparkdl run ({RUN_FILE} is missing); start the run "
                             "without --resume")
        saved = json.loads(storage.read_bytes(run_file)).get("settings", {})
        changed = [f"--{k.replace('_', '-')} {saved.get(k)} there, {v} now" for k, v in settings.items()
                   if saved.get(k) != v]
        if changed:
            raise UsageError(f"--resume: {output} is a run with other settings ({'; '.join(changed)}); resume it with "
                             f"its settings, or start a new run with another --output (e.g. "
                             f"{_next_free(storage, output)})")
        if not storage.exists(storage.join(output, "checkpoints", "latest")):
            raise UsageError(f"--resume: {output} has no checkpoint yet; start it again with --overwrite")
        return output
    if storage.isdir(output) and storage.listdir(output):
        if not storage.exists(run_file) or storage.isdir(run_file):
            raise UsageError(f"--output {output} is a non-empty directory that is not a sparkdl run; choose another "
                             f"--output (e.g. {_next_free(storage, output)})")
        if not args.overwrite:
            raise UsageError(f"{output} already holds a run; start a new one with --output "
                             f"{_next_free(storage, output)}, continue it with --resume, or replace it with --overwrite")
        for name in RUN_ENTRIES:
            storage.rmtree(storage.join(output, name))
    elif storage.exists(output) and not storage.isdir(output):
        raise UsageError(f"--output {output} is a file, not a directory")
    from sparkdl import __version__
    storage.makedirs(output)
    replace_file(storage, run_file, json.dumps({"sparkdl": __version__, "settings": settings,
                                                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=1).encode())
    return output


def _check_evaluate(args) -> None:
    storage, path = _storage(args.model)
    if not storage.exists(storage.join(path, "metadata.json")):
        raise UsageError(f"--model {args.model}: not a model saved by `sparkdl train` (no metadata.json there; "
                         "the model of a run is RUN/model)")


def _session(args):
    """The Spark session of the command (``get_or_create_session``: an active one is returned unchanged)."""
    from sparkdl import engine
    if args.command == "train":
        return engine.get_or_create_session(args.master, app_name=f"sparkdl train {args.model} {args.dataset}",
                                            training=True)
    return engine.get_or_create_session(args.master, app_name=f"sparkdl evaluate {args.dataset}")


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


def train(args, output: str) -> dict:
    from sparkdl import engine, io, metrics, nn
    from sparkdl.models import MODELS
    (x_train, y_train), (x_test, y_test) = _load(args)  # before Spark starts: a missing dataset fails fast
    sc = _session(args).sparkContext
    if args.limit:
        x_train, y_train = x_train[:args.limit], y_train[:args.limit]
    if args.test_limit:
        x_test, y_test = x_test[:args.test_limit], y_test[:args.test_limit]
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
    hint = "" if shutil.which("tensorboard") else "  (not installed: pip install 'sparkdl[tensorboard]')"
    print(f"Model: {model_path}\nCheckpoints: {os.path.join(output, 'checkpoints')}\n"
          f"TensorBoard: tensorboard --logdir {os.path.join(output, 'tensorboard')}{hint}")
    train_data.unpersist()
    test_data.unpersist()
    return result


def evaluate(args) -> dict:
    from sparkdl import engine, io, metrics, nn
    model = io.load_model(args.model)
    _, (x_test, y_test) = _load(args)
    test_data = engine.DataBlocks.from_numpy(_session(args).sparkContext, x_test, y_test, args.partitions)
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


def _user_errors():
    """Exceptions that report a problem of the user's input or environment, not a bug: printed as one message."""
    from sparkdl.engine import TrainingDivergedError
    from sparkdl.engine.environment import ExecutorEnvironmentError
    return (UsageError, ValueError, TypeError, OSError, TrainingDivergedError, ExecutorEnvironmentError)


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0 success, 1 failed run, 2 usage error, 130 interrupted)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("sparkdl").setLevel(logging.INFO)  # validation lines, data source used
    from tqdm.contrib.logging import logging_redirect_tqdm
    prog = f"sparkdl {args.command}"
    try:
        target = _output_name(args) if args.command == "train" else args.model
        if "://" in target:
            from sparkdl.io._fs import is_local
            if not is_local(target):
                _session(args)  # the session's Hadoop file systems serve the run directory or the model
        if args.command == "train":
            output = prepare_run_directory(args)
            with logging_redirect_tqdm():  # log lines are printed above the progress bar, not through it
                result = train(args, output)
        else:
            _check_evaluate(args)
            result = evaluate(args)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except _user_errors() as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, UsageError) else 1
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
