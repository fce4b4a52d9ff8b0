"""Kernel benchmark: one full training step (forward, softmax cross-entropy gradient, backward) in sparkdl
and in PyTorch, same model, weights, batch and thread count, measured in the same process. sparkdl's step is
an engine task's (:func:`sparkdl.step.task_gradient_sum`: at several threads the rows of a batch are
split across threads where the model allows it: all five models here, the Transformer's dropout and the
batch-first LSTM included); neither library computes the gradient of the input batch (torch: no
``requires_grad``).

Models: MLP 784-512-256-10 (batch 128), LeNet-5 on 1x28x28 (batch 128), a small VGG-style CNN on 3x32x32
(batch 64), a Transformer encoder layer (d_model 128, 4 heads, feed-forward 2048, dropout 0.1, post-norm;
batch 32 of 64 tokens) with a linear classifier on its flattened output, and an LSTM text classifier (batch 64
sequences of 50 token ids, Embedding(10000, 128) -> LSTM(128, 128) -> last hidden state -> Linear(128, 10)).
Runs of the two libraries and of all thread counts are interleaved so that load from other processes (and slow
phases of the machine) hit them alike; each number is the median of ``--repeats`` timed blocks after ``--warmup``
untimed steps. Also measures the numba start-up cost: the first training step in a fresh process with an empty
``NUMBA_CACHE_DIR`` (cold: compilation) and in a second fresh process reusing that cache (warm: loading
compiled kernels).

Prints a table, then as its LAST line one JSON object::

    {"steps": {"<threads>": {"<model>": {"sparkdl": samples/s, "torch": samples/s, "ratio": sparkdl/torch,
                                         ("sparkdl_cpu", "torch_cpu", "ratio_cpu": same per CPU second)}}},
     "thread_speedup": {"<model>": {"<threads>": {"sparkdl": samples/s over 1 thread's, "torch": same}}},
     "start": {"<model>": {"cold_s": s, "warm_s": s}}, ...}

At 1 thread all work of both libraries runs on the calling thread, so the thread's CPU time is also
reported: on a shared machine it does not count the time spent waiting for a core.

Both libraries run with the same OpenMP setting: sparkdl is imported first, so its default
``OMP_WAIT_POLICY=PASSIVE`` (idle threads sleep, see :mod:`sparkdl.config`) also applies to torch's OpenMP
pool unless the environment sets the variable.

Usage: ``python bench/kernels.py [--repeats 7] [--threads 1,2] [--models mlp,lenet5,small_cnn,lstm] [--quick]``
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

MODELS = ("mlp", "lenet5", "small_cnn", "transformer", "lstm")
BATCH = {"mlp": 128, "lenet5": 128, "small_cnn": 64, "transformer": 32, "lstm": 64}
INPUT = {"mlp": (784,), "lenet5": (1, 28, 28), "small_cnn": (3, 32, 32), "transformer": (64, 128), "lstm": (50,)}
VOCAB = 10000  # lstm: token ids in [0, VOCAB)


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


def _softmax_xent_grad(logits, labels):
    """Mean softmax cross-entropy and its gradient (plain numpy; used when sparkdl has no loss module)."""
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    n = logits.shape[0]
    loss = -np.log(p[np.arange(n), labels]).mean()
    p[np.arange(n), labels] -= 1
    return float(loss), p / n


def _sparkdl_loss():
    """``((logits, labels) -> (loss, grad_logits), name)``: sparkdl.nn.loss if it exists, else numpy."""
    try:
        from sparkdl.nn.loss import CrossEntropyLoss
    except ImportError:  # loss module not there yet
        return _softmax_xent_grad, "numpy softmax cross-entropy (bench/kernels.py)"
    crit = CrossEntropyLoss()

    def f(logits, labels):
        value, cache = crit.forward(logits, labels)
        return float(value), crit.backward(cache)
    return f, "sparkdl.nn.loss.CrossEntropyLoss"


def build(name):
    """(sparkdl step, torch step, max |logit difference| between the two at the start)."""
    import torch
    from sparkdl import nn
    from sparkdl.step import sum_reduction, task_gradient_sum
    model = nn.Sequential(*_layers("sparkdl", name)).initialize(0)
    tmodel = torch.nn.Sequential(*_layers("torch", name))
    tmodel.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in model.state_dict().items()})
    x, y = _data(name)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    grad = model.zeros_like_parameters()
    loss_sum, tloss = sum_reduction(nn.CrossEntropyLoss()), torch.nn.CrossEntropyLoss()

    rng = np.random.default_rng(0)  # dropout masks

    def step():  # the engine task's step: forward, sum-reduced loss, backward without the input's gradient
        task_gradient_sum(model, loss_sum, x, y, rng, grad)

    def tstep():
        tmodel.zero_grad(set_to_none=False)
        tloss(tmodel(xt), yt).backward()

    with torch.no_grad():
        diff = float(np.abs(model(x) - tmodel.eval()(xt).numpy()).max())
    tmodel.train()
    if not diff < 1e-4:
        raise RuntimeError(f"{name}: sparkdl and torch logits differ by {diff}; the models are not the same")
    return step, tstep, diff


# ---------------------------------------------------------------- timing
def measure(name, threads, repeats, warmup, block):
    """Samples/s of both libraries at each thread count of ``threads``: median over ``repeats`` blocks of
    ``block`` steps, with the blocks of both libraries and of all thread counts interleaved.

    Interleaving puts background load (and this VM's slow phases) on every library and thread count alike, so
    the ratios between them hold even when the absolute figures drift; whole blocks (rather than single steps)
    keep one library's idle-spinning worker threads (OpenMP / OpenBLAS) from landing inside the other's timing
    more than once per block. Returns ``{threads: result}``.
    """
    import torch
    import sparkdl
    step, tstep, diff = build(name)
    for t in threads:
        sparkdl.set_num_threads(t)
        torch.set_num_threads(t)
        for _ in range(warmup):
            step()
            tstep()
    times = {t: ([], [], [], []) for t in threads}  # sparkdl wall, torch wall, sparkdl CPU, torch CPU
    for _ in range(repeats):
        for t in threads:
            sparkdl.set_num_threads(t)
            torch.set_num_threads(t)
            step()  # untimed: the first step after a switch wakes the other thread count's pools
            tstep()
            ts, tt, cs, ct = times[t]
            for fn, out, cpu in ((step, ts, cs), (tstep, tt, ct)):
                t0, c0 = time.perf_counter(), time.thread_time()
                for _ in range(block):
                    fn()
                out.append((time.perf_counter() - t0) / block)
                cpu.append((time.thread_time() - c0) / block)
    n = BATCH[name]
    results = {}
    for t, (ts, tt, cs, ct) in times.items():
        s, u = n / float(np.median(ts)), n / float(np.median(tt))
        res = {"sparkdl": round(s, 1), "torch": round(u, 1), "ratio": round(s / u, 3), "logit_diff": diff}
        if t == 1:  # all work runs on this thread: CPU time is immune to waiting for a busy machine
            sc, tc = n / float(np.median(cs)), n / float(np.median(ct))
            res.update({"sparkdl_cpu": round(sc, 1), "torch_cpu": round(tc, 1), "ratio_cpu": round(sc / tc, 3)})
        results[t] = res
    return results


def first_step(name):
    """Time (s) of importing sparkdl and running the first training step (run in a fresh process)."""
    t0 = time.perf_counter()
    import sparkdl
    from sparkdl import nn
    sparkdl.set_num_threads(1)
    model = nn.Sequential(*_layers("sparkdl", name)).initialize(0)
    x, y = _data(name)
    logits, cache = model.forward(x, training=True, rng=np.random.default_rng(0))
    _, g = _sparkdl_loss()[0](logits, y)
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
                proc = subprocess.run([sys.executable, __file__, "--first-step", name], env=env,
                                      capture_output=True, text=True, check=True)
                res[kind] = round(float(proc.stdout.strip().splitlines()[-1]), 2)
        out[name] = res
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7, help="timed steps per model (median reported)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--block", type=int, default=2, help="consecutive steps per timed block")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ",".join(MODELS))
    ap.add_argument("--quick", action="store_true", help="smoke run: 3 repeats, 1 warm-up, 1 thread")
    ap.add_argument("--no-start", action="store_true", help="skip the cold/warm start-up measurement")
    ap.add_argument("--first-step", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.first_step:
        print(first_step(args.first_step))
        return
    import sparkdl  # noqa: F401  first: its OMP_WAIT_POLICY=PASSIVE default then applies to torch's OpenMP too
    import torch  # noqa: F401
    if args.quick:
        args.repeats, args.warmup, args.block, args.threads = 3, 1, 1, "1"
    if args.repeats < 1 or args.block < 1:
        ap.error("--repeats and --block must be >= 1")
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in MODELS:
            ap.error(f"unknown model {m!r}; choose from {','.join(MODELS)}")
    threads = [int(t) for t in args.threads.split(",")]

    result = {"steps": {}, "repeats": args.repeats, "block": args.block, "batch": {m: BATCH[m] for m in models},
              "loss": _sparkdl_loss()[1], "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}
    print(f"{'model':<10} {'thr':>3} {'sparkdl/s':>10} {'torch/s':>10} {'ratio':>6} {'cpu ratio':>9}   (samples per "
          f"second of wall time, median of {args.repeats} blocks of {args.block} steps; cpu ratio: per second of "
          f"thread CPU time, 1 thread only)")
    result["thread_speedup"] = {}
    for m in models:
        for t, r in measure(m, threads, args.repeats, args.warmup, args.block).items():
            result["steps"].setdefault(str(t), {})[m] = r
            cpu = f"{r['ratio_cpu']:>9.2f}" if "ratio_cpu" in r else f"{'-':>9}"
            print(f"{m:<10} {t:>3} {r['sparkdl']:>10.0f} {r['torch']:>10.0f} {r['ratio']:>6.2f} {cpu}", flush=True)
        if 1 in threads and len(threads) > 1:  # the same model at t threads vs 1, blocks interleaved
            one = result["steps"]["1"][m]
            result["thread_speedup"][m] = {str(t): {lib: round(result["steps"][str(t)][m][lib] / one[lib], 3)
                                                    for lib in ("sparkdl", "torch")} for t in threads if t != 1}
            print(f"{'':<10} {'':>3} speed-up over 1 thread: " + ", ".join(
                f"{t} threads sparkdl {v['sparkdl']:.2f} / torch {v['torch']:.2f}"
                for t, v in result["thread_speedup"][m].items()), flush=True)
    if not args.no_start and not args.quick:
        result["start"] = start_times(models)
        for m, r in result["start"].items():
            print(f"start {m:<10} cold {r['cold_s']:.2f} s   warm cache {r['warm_s']:.2f} s")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
