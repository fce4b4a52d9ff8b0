"""Model-zoo benchmark: for every PyTorch network of ``tests/zoo_torch.py`` (``TORCH_ZOO``), import parity from both
of PyTorch's exporters, the training step against PyTorch at 1 and 2 threads, and inference against PyTorch and
onnxruntime; sparkdl runs each network as :func:`sparkdl.onnx.load` imports it from PyTorch's export, so it is
the same network with the same weights.

Per model (processes in bench/zoo_sides.py; this parent imports none of the libraries):

1. an export process builds the PyTorch network (seed 0, BatchNorm running statistics randomized, Dropout p=0)
   and writes its weights, an inference batch and a training batch with PyTorch's outputs, and four ONNX files:
   eval-mode exports with every default of ``torch.onnx.export(dynamo=True)`` and ``(dynamo=False)`` at the
   inference batch, and training exports that keep BatchNormalization (legacy ``TrainingMode.PRESERVE``; dynamo
   ``optimize=False``) at the training batch; for sequence models also the dynamo eval and training exports with
   a symbolic batch axis, served and trained only when no static file imports (a static file whose exporter
   folded the batch into constants, as BERT-mini's attention does, imports as a Graph of that fixed batch);
2. three long-lived workers, each in a process of its own with this process's environment unchanged: PyTorch
   (never imports sparkdl, so it runs in its default environment), onnxruntime (the dynamo eval file, or the
   legacy one if sparkdl cannot import the dynamo one; one session per thread count with
   ``intra_op_num_threads`` = T and ``inter_op_num_threads`` = 1), sparkdl (imports the files; never imports
   torch or onnxruntime), which serves the same eval file as onnxruntime.

Measured:

* import error: ``max |sparkdl - torch| / max |torch|`` of the eval outputs on the inference batch, per exporter;
* training step (train mode: forward, loss, backward, SGD lr 1e-4 momentum 0.9; cross-entropy on random class
  labels, MSE for networks without class outputs): sparkdl's is an engine task's step
  (:func:`sparkdl.step.task_gradient_sum` + the optimizer's update) on the imported training file;
* inference: the eval forward (PyTorch under ``inference_mode``).

Shapes and batches (per-row input shapes from ``bench/zoo_sides.py`` ``BENCH[name]``): ImageNet networks (native size 224) infer at
8x3x224x224 and train at 32x3x64x64; CIFAR networks (size 32) infer at 128x3x32x32 and train at 64x3x32x32;
sequence models (``tokens``: int64 ids (N, T) plus a 1/0 padding mask if the model takes one) at batch 32 of
``seq`` tokens (BERT-mini: 128); recommenders (``ids``) at batch 1024 (bench/zoo_sides.py ``IMAGE_BENCH``, ...).

Timing: after ``--warmup`` untimed steps per operation and thread count, ``--repeats`` blocks of ``--block``
steps each, the blocks of all libraries, operations and thread counts interleaved (the first library rotating
from repeat to repeat), ``--pause`` seconds before every block (so the previous library's spinning threads are
asleep); every figure is the median over the blocks. Ratios are speeds, sparkdl over the other (> 1: sparkdl is
faster); scaling is sparkdl's 2-thread speed over its 1-thread speed.

    python bench/zoo.py [--models resnet18,resnet20] [--repeats 7] [--threads 1,2]
    python bench/zoo.py --quick --models resnet20      # smoke run: checks that it works, measures nothing

numpy's OpenBLAS picks its kernels for the CPU it runs on; a machine that sets ``OPENBLAS_CORETYPE`` (and
``OPENBLAS_L2_SIZE``) forces older ones (on an AVX-512 CPU, Haswell's AVX2 kernels run GEMMs at half speed). The
sparkdl worker records the kernel it ran (``workers.sparkdl.blas``) and the table notes a forced one; to measure
what users' default numpy runs, unset both for the run: ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python
bench/zoo.py``.

Prints a markdown table (for bench/RESULTS.md) with footnotes for failures, then as its LAST line one JSON object
with every figure and each worker's information.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile

import procs
import zoo_sides

HEADER = ("| model | shape (train / infer) | batch (train / infer) | import err dynamo / legacy | train 1t | "
          "train 2t | 2t/1t | infer vs torch 1t / 2t | infer vs ORT 1t / 2t |")


def _zoo_names():
    """The names of ``TORCH_ZOO``, read in a child process (tests/zoo_torch.py imports torch)."""
    return procs.run_child(__file__, "--list")


def _workers(name, exchange, stack):
    out = {}
    for lib in ("sparkdl", "torch", "ort"):  # sparkdl first: it reports the imports
        out[lib] = stack.enter_context(procs.Worker(__file__, ["--worker", lib, name, exchange],
                                                    f"{lib} worker for {name}"))
    return out


def measure(name, threads, repeats, warmup, block, pause):
    """One model's figures (a dict; see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="sparkdl-bench-zoo-") as exchange, contextlib.ExitStack() as stack:
        spec = procs.run_child(__file__, "--export", name, exchange)
        res = {"spec": spec}
        if not any(f.startswith("eval") for f in spec["files"]):
            return res
        workers = _workers(name, exchange, stack)
        res["workers"] = {lib: w.info for lib, w in workers.items()}
        ops = workers["sparkdl"].info["ops"]  # what imported: "infer", "train"
        groups = [[((op, t, lib), w, ("time", op, t, block)) for lib, w in workers.items() if op in w.info["ops"]]
                  for t in threads for op in ops]
        for group in groups:
            for _, w, (_, op, t, _) in group:
                w.ask("warmup", op, t, warmup)
        got = procs.interleave(groups, repeats, pause)
    seconds = {f"{op} {t} {lib}": procs.median(v) for (op, t, lib), v in got.items()}
    res["seconds"] = {k: round(v, 5) for k, v in seconds.items()}
    res["ratio"] = {f"{op} {t} vs {lib}": round(seconds[f"{op} {t} {lib}"] / seconds[f"{op} {t} sparkdl"], 3)
                    for (op, t, lib) in got if lib != "sparkdl"}
    if 1 in threads and 2 in threads:
        res["scaling"] = {op: round(seconds[f"{op} 1 sparkdl"] / seconds[f"{op} 2 sparkdl"], 3) for op in ops}
    return res


def _fmt(x, spec="{:.2f}"):
    return "-" if x is None else spec.format(x)


def row(name, res, notes):
    """The markdown table row of one model; failures are appended to ``notes``."""
    spec = res["spec"]
    shape = lambda key: ", ".join("x".join(map(str, s)) or "1" for s in spec[key])
    cells = [name, f"{shape('train_shape')} / {shape('infer_shape')}",
             f"{spec['train_batch']} / {spec['infer_batch']}"]
    info = res.get("workers", {}).get("sparkdl", {})
    errs = []
    for exporter in ("dynamo", "legacy"):
        key = "eval_" + exporter
        if key in spec["export_errors"]:
            notes.append(f"{name}: export {key}: {spec['export_errors'][key]}")
            errs.append("export fails")
        elif key in info.get("import_failure", {}):
            notes.append(f"{name}: import {key}: {info['import_failure'][key]}")
            errs.append("import fails")
        else:
            errs.append(_fmt(info.get("import_error", {}).get(key), "{:.1e}"))
    if "error" in res.get("workers", {}).get("ort", {}):
        notes.append(f"{name}: onnxruntime: {res['workers']['ort']['error']}")
    for key in ("train_legacy", "train_dynamo", "eval_dynamo_dynamic", "train_dynamo_dynamic"):
        if key in spec["export_errors"] or key in info.get("import_failure", {}):
            notes.append(f"{name}: {key}: " + spec["export_errors"].get(key, info.get("import_failure", {}).get(key)))
    for key, what in (("serving_file", "served"), ("train_file", "trained")):
        if str(info.get(key)).endswith("_dynamic"):
            notes.append(f"{name}: {what} from {info[key]}.onnx (the batch axis symbolic; the static files fix it)")
    ratio = res.get("ratio", {}).get
    cells += [" / ".join(errs), _fmt(ratio("train 1 vs torch")), _fmt(ratio("train 2 vs torch")),
              _fmt(res.get("scaling", {}).get("train")),
              f"{_fmt(ratio('infer 1 vs torch'))} / {_fmt(ratio('infer 2 vs torch'))}",
              f"{_fmt(ratio('infer 1 vs ort'))} / {_fmt(ratio('infer 2 vs ort'))}"]
    return "| " + " | ".join(cells) + " |"


def _parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="comma-separated subset of tests/zoo_torch.py TORCH_ZOO (default: all)")
    ap.add_argument("--repeats", type=int, default=7, help="timed blocks per figure (median reported)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first, per operation and thread count")
    ap.add_argument("--block", type=int, default=2, help="consecutive steps per timed block")
    ap.add_argument("--pause", type=float, default=0.25, help="seconds of sleep before each block")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (the table shows 1 and 2)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 repeats of 1 step, 1 warm-up step")
    ap.add_argument("--list", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--export", nargs=2, metavar=("MODEL", "DIR"), help=argparse.SUPPRESS)
    ap.add_argument("--worker", nargs=3, metavar=("LIB", "MODEL", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.warmup, args.block = 2, 1, 1
    if args.repeats < 1 or args.block < 1 or args.warmup < 0 or args.pause < 0:
        ap.error("--repeats and --block must be >= 1, --warmup and --pause >= 0")
    args.threads = [int(t) for t in args.threads.split(",") if t]
    return args


def main(argv=None):
    args = _parse(argv)
    if args.list:
        sys.path.insert(0, zoo_sides.ROOT)  # the repository: tests/zoo_torch.py imports tests.zoo_cnn
        from tests.zoo_torch import TORCH_ZOO
        print(json.dumps(list(TORCH_ZOO)))
        return
    if args.export:
        print(json.dumps(zoo_sides.export(*args.export)))
        return
    if args.worker:
        lib, name, exchange = args.worker
        getattr(zoo_sides, f"{lib}_worker")(name, exchange)
        return
    names = _zoo_names()
    models = [m for m in args.models.split(",") if m] if args.models else names
    unknown = [m for m in models if m not in names]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; tests/zoo_torch.py has {names}")
    result = {"models": {}, "threads": args.threads, "repeats": args.repeats, "block": args.block,
              "warmup": args.warmup, "pause_s": args.pause, "processes": "separate",
              "sgd": {"lr": zoo_sides.LR, "momentum": zoo_sides.MOMENTUM}}
    rows, notes = [], []
    for name in models:
        try:
            result["models"][name] = res = measure(name, args.threads, args.repeats, args.warmup, args.block,
                                                   args.pause)
            rows.append(row(name, res, notes))
        except (SystemExit, RuntimeError) as e:  # a process that died: its error is printed above; go on
            result["models"][name] = {"error": str(e)}
            notes.append(f"{name}: {e}")
            rows.append(f"| {name} |" + " - |" * (HEADER.count(" | ")))
        print(rows[-1], flush=True)
    forced = {json.dumps(r["workers"]["sparkdl"]["blas"]) for r in result["models"].values()
              if r.get("workers", {}).get("sparkdl", {}).get("blas", {}).get("OPENBLAS_CORETYPE")}
    if forced:  # numpy's BLAS told which kernels to run: not what a default numpy would measure
        notes.append(f"OPENBLAS_CORETYPE is set: sparkdl's GEMMs ran {', '.join(sorted(forced))}; unset "
                     "OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE to measure what a default numpy runs")
    print(f"\nSpeed ratios sparkdl / other (> 1: sparkdl faster), median of {args.repeats} blocks of {args.block} "
          "steps, each library in a process of its own; import err: max |sparkdl - torch| / max |torch| of the eval "
          "outputs.\n")
    print(HEADER)
    print("|" + " --- |" * HEADER.count(" | ") + " --- |")
    print("\n".join(rows))
    if notes:
        print("\n" + "\n".join(f"- {n}" for n in notes))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
