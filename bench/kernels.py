"""Kernel benchmark: one full training step (forward, softmax cross-entropy gradient, backward) in sparkdl
and in PyTorch, same model, weights, batch and thread count, each library in a process of its own. sparkdl's step
is an engine task's (:func:`sparkdl.step.task_gradient_sum`: at several threads the rows of a batch are
split across threads where the model allows it: all five models here, the Transformer's dropout and the
batch-first LSTM included); neither library computes the gradient of the input batch (torch: no
``requires_grad``).

Models: MLP 784-512-256-10 (batch 128), LeNet-5 on 1x28x28 (batch 128), a small VGG-style CNN on 3x32x32
(batch 64), a Transformer encoder layer (d_model 128, 4 heads, feed-forward 2048, dropout 0.1, post-norm;
batch 32 of 64 tokens) with a linear classifier on its flattened output, and an LSTM text classifier (batch 64
sequences of 50 token ids, Embedding(10000, 128) -> LSTM(128, 128) -> last hidden state -> Linear(128, 10)).

Processes. Per model the parent (which imports neither library) starts two long-lived workers, ``python
bench/kernels.py --worker sparkdl|torch MODEL``, with its own environment passed on unchanged: the torch worker
never imports sparkdl, the sparkdl worker never imports torch, so PyTorch runs in its default environment (its
OpenMP settings, its default thread pool) and sparkdl's thread pools (numba's TBB or workqueue, OpenBLAS) do not
run in PyTorch's process (in one process they slowed PyTorch's step by 25-45%). The sparkdl worker builds the
model (seed 0) and writes its ``state_dict()``, the benchmark batch and its eval-mode logits on that batch to a
temporary directory; the torch worker loads them and refuses to time unless its logits agree to < 1e-4.

Timing. The parent drives the workers over stdin/stdout ("warmup T N", "time T B": set T threads, run one
untimed step (it wakes the pools after the pause), then B timed steps). Blocks of the two libraries and of all
thread counts are interleaved (the first library alternates from repeat to repeat) so that load from other
processes (and slow phases of the machine) hit them alike, with a pause of ``--pause`` seconds before every
block so that the other library's idle threads (OpenMP, OpenBLAS and TBB spin before they sleep) are asleep when
a block starts. Each number is the median of ``--repeats`` blocks of ``--block`` steps after ``--warmup`` untimed
steps per thread count. Also measures the numba start-up cost: the first training step in a fresh process with
an empty ``NUMBA_CACHE_DIR`` (cold: compilation) and in a second fresh process reusing that cache (warm:
loading compiled kernels).

Prints a table, then as its LAST line one JSON object::

    {"steps": {"<threads>": {"<model>": {"sparkdl": samples/s, "torch": samples/s, "ratio": sparkdl/torch,
                                         ("sparkdl_cpu", "torch_cpu", "ratio_cpu": same per CPU second)}}},
     "thread_speedup": {"<model>": {"<threads>": {"sparkdl": samples/s over 1 thread's, "torch": same}}},
     "start": {"<model>": {"cold_s": s, "warm_s": s}}, "processes": "separate",
     "workers": {"sparkdl": {...}, "torch": {...}}, ...}

``workers`` is what each worker saw: sparkdl's threading layer, torch's default thread count and
``OMP_WAIT_POLICY`` (``null``: unset, OpenMP's default). At 1 thread all work of both libraries runs on the
calling thread, so the thread's CPU time is also reported: on a shared machine it does not count the time spent
waiting for a core.

Usage: ``python bench/kernels.py [--repeats 7] [--threads 1,2] [--models mlp,lenet5,small_cnn,lstm] [--quick]``
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import procs

MODELS = ("mlp", "lenet5", "small_cnn", "transformer", "lstm")
BATCH = {"mlp": 128, "lenet5": 128, "small_cnn": 64, "transformer": 32, "lstm": 64}
INPUT = {"mlp": (784,), "lenet5": (1, 28, 28), "small_cnn": (3, 32, 32), "transformer": (64, 128), "lstm": (50,)}
VOCAB = 10000  # lstm: token ids in [0, VOCAB)
LOGIT_TOLERANCE = 1e-4  # max |logit difference| between the two workers' models before timing


def _torch_last_hidden():
    """torch side of ``sparkdl.nn.RNNOutput('last')`` for a one-layer LSTM: ``h_n[-1]``."""
    import torch

    class LastHidden(torch.nn.Module):
        def forward(self, x):
            return x[1][0][-1]
    return LastHidden()


# ---------------------------------------------------------------- models (identical layer lists)
def _layers(lib, name):
    """The same architecture in sparkdl (lib='sparkdl') or torch."""
    if lib == "torch":
        import torch.nn as m
    else:
        from sparkdl import nn as m
    if name == "mlp":
        return [m.Linear(784, 512), m.ReLU(), m.Linear(512, 256), m.ReLU(), m.Linear(256, 10)]
    if name == "lenet5":
        return [m.Conv2d(1, 6, 5, padding=2), m.ReLU(), m.MaxPool2d(2), m.Conv2d(6, 16, 5), m.ReLU(),
                m.MaxPool2d(2), m.Flatten(), m.Linear(400, 120), m.ReLU(), m.Linear(120, 84), m.ReLU(),
                m.Linear(84, 10)]
    if name == "small_cnn":
        return [m.Conv2d(3, 32, 3, padding=1), m.ReLU(), m.Conv2d(32, 32, 3, padding=1), m.ReLU(), m.MaxPool2d(2),
                m.Conv2d(32, 64, 3, padding=1), m.ReLU(), m.Conv2d(64, 64, 3, padding=1), m.ReLU(), m.MaxPool2d(2),
                m.Flatten(), m.Linear(64 * 8 * 8, 256), m.ReLU(), m.Linear(256, 10)]
    if name == "transformer":
        return [m.TransformerEncoderLayer(128, 4, dim_feedforward=2048, dropout=0.1, batch_first=True), m.Flatten(),
                m.Linear(64 * 128, 10)]
    if name == "lstm":
        last = _torch_last_hidden() if lib == "torch" else m.RNNOutput("last")
        return [m.Embedding(VOCAB, 128), m.LSTM(128, 128, batch_first=True), last, m.Linear(128, 10)]
    raise ValueError(f"unknown model {name!r}; choose from {MODELS}")


def _data(name, seed=0):
    rng = np.random.default_rng(seed)
    if name == "lstm":
        x = rng.integers(0, VOCAB, (BATCH[name],) + INPUT[name]).astype(np.int64)
    else:
        x = rng.standard_normal((BATCH[name],) + INPUT[name]).astype(np.float32)
    return x, rng.integers(0, 10, BATCH[name]).astype(np.int64)


# ---------------------------------------------------------------- the two workers' steps
def _sparkdl_setup(name, exchange):
    """sparkdl's side (never imports torch): builds the model (seed 0), writes ``weights.npz`` (its
    ``state_dict()``) and ``batch.npz`` (``x``, ``y`` and the eval-mode ``logits``) into ``exchange``.
    Returns ``(step, set_threads, info)``; ``step`` is the engine task's step: forward, sum-reduced loss,
    backward without the input's gradient."""
    import sparkdl
    from sparkdl import nn
    from sparkdl.config import threading_layer
    from sparkdl.step import sum_reduction, task_gradient_sum
    model = nn.Sequential(*_layers("sparkdl", name)).initialize(0)
    x, y = _data(name)
    np.savez(os.path.join(exchange, "weights.npz"), **model.state_dict())
    np.savez(os.path.join(exchange, "batch.npz"), x=x, y=y, logits=model(x))
    grad = model.zeros_like_parameters()
    crit = nn.CrossEntropyLoss()
    loss_sum = sum_reduction(crit)
    rng = np.random.default_rng(0)  # dropout masks

    def step():
        task_gradient_sum(model, loss_sum, x, y, rng, grad)
    info = {"threading_layer": threading_layer(),
            "loss": f"sparkdl.nn.{type(crit).__name__}, sum-reduced (engine task)"}
    return step, sparkdl.set_num_threads, info


def _torch_setup(name, exchange):
    """torch's side (never imports sparkdl): the same layers with the weights of ``weights.npz``, checked against
    the sparkdl logits of ``batch.npz``. Returns ``(step, set_threads, info)``. Raises RuntimeError if the logits
    differ by ``LOGIT_TOLERANCE`` or more."""
    import torch
    info = {"default_threads": torch.get_num_threads(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}
    model = torch.nn.Sequential(*_layers("torch", name))
    with np.load(os.path.join(exchange, "weights.npz")) as w:
        model.load_state_dict({k: torch.from_numpy(w[k]) for k in w.files})
    with np.load(os.path.join(exchange, "batch.npz")) as b:
        xt, yt, logits = torch.from_numpy(b["x"]), torch.from_numpy(b["y"]), b["logits"]
    with torch.no_grad():
        info["logit_diff"] = float(np.abs(logits - model.eval()(xt).numpy()).max())
    model.train()
    if not info["logit_diff"] < LOGIT_TOLERANCE:
        raise RuntimeError(f"{name}: sparkdl and torch logits differ by {info['logit_diff']}; the models are not "
                           "the same")
    loss = torch.nn.CrossEntropyLoss()

    def step():
        model.zero_grad(set_to_none=False)
        loss(model(xt), yt).backward()
    return step, torch.set_num_threads, info


def worker(lib, name, exchange):
    """Serve the parent (:func:`procs.serve`): ``info`` after set-up, then per command read from stdin —
    ``warmup T N`` (``{}``), ``time T B`` (``{"wall": s, "cpu": s}`` per step) — until ``quit``."""
    step, set_threads, info = (_sparkdl_setup if lib == "sparkdl" else _torch_setup)(name, exchange)
    procs.forbid_imports(["torch" if lib == "sparkdl" else "sparkdl"], f"the {lib} worker")

    def warmup(threads, steps):
        set_threads(int(threads))
        for _ in range(int(steps)):
            step()
        return {}

    def timed(threads, steps):
        set_threads(int(threads))
        step()  # untimed: wakes this thread count's pools after the pause
        return procs.time_steps(step, int(steps))
    if lib == "sparkdl":
        from sparkdl.allocator import retained_memory
        with retained_memory():  # as in sparkdl's Spark tasks (sparkdl.engine.worker.task_scope)
            procs.serve({"warmup": warmup, "time": timed}, info)
    else:
        procs.serve({"warmup": warmup, "time": timed}, info)


# ---------------------------------------------------------------- parent: drives the workers
@contextlib.contextmanager
def _workers(name):
    """``{"sparkdl": procs.Worker, "torch": procs.Worker}`` for ``name``; the sparkdl one is ready (weights
    written) before the torch one starts."""
    with tempfile.TemporaryDirectory(prefix="sparkdl-bench-kernels-") as exchange, contextlib.ExitStack() as stack:
        out = {}
        for lib in ("sparkdl", "torch"):
            out[lib] = stack.enter_context(procs.Worker(__file__, ["--worker", lib, name, exchange],
                                                        f"{lib} worker for {name}"))
        yield out


def measure(name, threads, repeats, warmup, block, pause):
    """Samples/s of both libraries at each thread count of ``threads``: median over ``repeats`` blocks of
    ``block`` steps, with the blocks of both libraries and of all thread counts interleaved, ``pause`` seconds
    before each. Returns ``({threads: result}, {lib: worker info})``.

    Interleaving puts background load (and this VM's slow phases) on every library and thread count alike, so
    the ratios between them hold even when the absolute figures drift; the pause lets one library's idle
    threads fall asleep before the other's block starts.
    """
    with _workers(name) as workers:
        for t in threads:
            for w in workers.values():
                w.ask("warmup", t, warmup)
        got = procs.interleave([[((t, lib), workers[lib], ("time", t, block)) for lib in ("sparkdl", "torch")]
                                for t in threads], repeats, pause)
        info = {lib: w.info for lib, w in workers.items()}
    n = BATCH[name]
    results = {}
    for t in threads:
        s, u = n / procs.median(got[t, "sparkdl"]), n / procs.median(got[t, "torch"])
        res = {"sparkdl": round(s, 1), "torch": round(u, 1), "ratio": round(s / u, 3),
               "logit_diff": info["torch"]["logit_diff"]}
        if t == 1:  # all work runs on the worker's thread: CPU time is immune to waiting for a busy machine
            sc, tc = n / procs.median(got[t, "sparkdl"], "cpu"), n / procs.median(got[t, "torch"], "cpu")
            res.update({"sparkdl_cpu": round(sc, 1), "torch_cpu": round(tc, 1), "ratio_cpu": round(sc / tc, 3)})
        results[t] = res
    return results, info


def first_step(name):
    """Time (s) of importing sparkdl and running the first training step (run in a fresh process)."""
    t0 = time.perf_counter()
    import sparkdl
    from sparkdl import nn
    sparkdl.set_num_threads(1)
    model = nn.Sequential(*_layers("sparkdl", name)).initialize(0)
    x, y = _data(name)
    crit = nn.CrossEntropyLoss()
    logits, cache = model.forward(x, training=True, rng=np.random.default_rng(0))
    _, loss_cache = crit.forward(logits, y)
    g = crit.backward(loss_cache)
    model.backward(cache, g.astype(np.float32, copy=False), model.zeros_like_parameters())
    return time.perf_counter() - t0


def start_times(models):
    """Cold (empty NUMBA_CACHE_DIR) and warm (same dir again) first-step times, each in a new process."""
    out = {}
    for name in models:
        with tempfile.TemporaryDirectory(prefix="sparkdl-numba-") as cache_dir:
            env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir}
            res = {}
            for kind in ("cold_s", "warm_s"):
                proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--first-step", name], env=env,
                                      capture_output=True, text=True, check=True)
                res[kind] = round(float(proc.stdout.strip().splitlines()[-1]), 2)
        out[name] = res
    return out


def _parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7, help="timed blocks per model and library (median reported)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first, per thread count")
    ap.add_argument("--block", type=int, default=2, help="consecutive steps per timed block")
    ap.add_argument("--pause", type=float, default=0.25, help="seconds of sleep before each block (default 0.25)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ",".join(MODELS))
    ap.add_argument("--quick", action="store_true", help="smoke run: 3 repeats, 1 warm-up, 1 thread")
    ap.add_argument("--no-start", action="store_true", help="skip the cold/warm start-up measurement")
    ap.add_argument("--first-step", help=argparse.SUPPRESS)
    ap.add_argument("--worker", nargs=3, metavar=("LIB", "MODEL", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.warmup, args.block, args.threads = 3, 1, 1, "1"
    if args.repeats < 1 or args.block < 1 or args.pause < 0:
        ap.error("--repeats and --block must be >= 1, --pause >= 0")
    args.models = [m for m in args.models.split(",") if m]
    for m in args.models:
        if m not in MODELS:
            ap.error(f"unknown model {m!r}; choose from {','.join(MODELS)}")
    args.threads = [int(t) for t in args.threads.split(",")]
    return args


def main(argv=None):
    args = _parse(argv)
    if args.first_step:
        print(first_step(args.first_step))
        return
    if args.worker:
        worker(*args.worker)
        return
    result = {"steps": {}, "repeats": args.repeats, "block": args.block, "pause_s": args.pause,
              "batch": {m: BATCH[m] for m in args.models}, "processes": "separate", "thread_speedup": {}}
    print(f"{'model':<10} {'thr':>3} {'sparkdl/s':>10} {'torch/s':>10} {'ratio':>6} {'cpu ratio':>9}   (samples per "
          f"second of wall time, median of {args.repeats} blocks of {args.block} steps; cpu ratio: per second of "
          f"thread CPU time, 1 thread only; each library in a process of its own)")
    for m in args.models:
        steps, info = measure(m, args.threads, args.repeats, args.warmup, args.block, args.pause)
        result["loss"] = info["sparkdl"]["loss"]
        result["workers"] = {"sparkdl": {"threading_layer": info["sparkdl"]["threading_layer"]},
                             "torch": {k: info["torch"][k] for k in ("default_threads", "omp_wait_policy")}}
        for t, r in steps.items():
            result["steps"].setdefault(str(t), {})[m] = r
            cpu = f"{r['ratio_cpu']:>9.2f}" if "ratio_cpu" in r else f"{'-':>9}"
            print(f"{m:<10} {t:>3} {r['sparkdl']:>10.0f} {r['torch']:>10.0f} {r['ratio']:>6.2f} {cpu}", flush=True)
        if 1 in args.threads and len(args.threads) > 1:  # the same model at t threads vs 1, blocks interleaved
            one = result["steps"]["1"][m]
            result["thread_speedup"][m] = {str(t): {lib: round(result["steps"][str(t)][m][lib] / one[lib], 3)
                                                    for lib in ("sparkdl", "torch")} for t in args.threads if t != 1}
            print(f"{'':<10} {'':>3} speed-up over 1 thread: " + ", ".join(
                f"{t} threads sparkdl {v['sparkdl']:.2f} / torch {v['torch']:.2f}"
                for t, v in result["thread_speedup"][m].items()), flush=True)
    if not args.no_start and not args.quick:
        result["start"] = start_times(args.models)
        for m, r in result["start"].items():
            print(f"start {m:<10} cold {r['cold_s']:.2f} s   warm cache {r['warm_s']:.2f} s")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
