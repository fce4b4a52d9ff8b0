"""The processes of bench/zoo.py, one per library: the PyTorch export, and the PyTorch, onnxruntime and sparkdl
workers. Each runs in a process of its own and imports only its own library (checked): the export and the torch
worker never import sparkdl, the onnxruntime worker imports neither, the sparkdl worker never imports torch or
onnxruntime. They share files in an exchange directory:

``spec.json``         what the export wrote (shapes, batches, loss, file names, export errors)
``state.pt``          the PyTorch model's ``state_dict`` (seed 0, BatchNorm statistics randomized)
``infer.npz``         the inference batch ``x0, x1, ...`` and PyTorch's eval outputs ``out``
``train.npz``         the training batch ``x0, ...``, the targets ``y`` and PyTorch's training-mode outputs ``out``
``serving.json``      the eval file sparkdl serves and onnxruntime runs (the first of these that sparkdl imports)
``eval_dynamo.onnx``  ``torch.onnx.export(model, args, f, dynamo=True, external_data=False)`` in eval mode, every
                      other default (BatchNorm folded by onnxscript's optimizer), at the inference batch (with
                      ``external_data`` left True the weights go to a separate file, which sparkdl refuses to open)
``eval_legacy.onnx``  the same with ``dynamo=False``
``train_legacy.onnx`` ``dynamo=False, training=TrainingMode.PRESERVE`` at the training batch (BatchNormalization
                      nodes kept, so the imported network trains them)
``train_dynamo.onnx`` ``dynamo=True, optimize=False`` at the training batch (the same, from the other exporter)
``*_dynamic.onnx``    sequence models only: ``eval_dynamo`` and ``train_dynamo`` with axis 0 of every input symbolic
                      (``dynamic_shapes``), served and trained only when no static file imports
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

import procs

__all__ = ["blas_kernel", "export", "torch_worker", "ort_worker", "sparkdl_worker", "LR", "MOMENTUM", "IMAGE_BENCH",
           "SERVING_FILES", "TRAINING_FILES"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LR, MOMENTUM = 1e-4, 0.9  # SGD of the training step, both libraries (small: repeated steps on one batch stay tame)

#: The benchmark's input per zoo model and the builder arguments that go with it (the tests' ``SHAPES`` are small
#: test inputs): ImageNet layouts at their native 224, the CIFAR ResNet at 32, BERT-mini with a padding mask at 128
#: tokens (BERT's 30,522-word vocabulary), the text classifier at 64 tokens of a 20,000-word vocabulary, NeuMF
#: with MovieLens-20M's 138,493 users and 26,744 items.
BENCH = {
    **{name: dict(input="image", size=224, kwargs={}) for name in (
        "resnet18", "resnet34", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "vgg11_bn", "squeezenet1_1")},
    "resnet20": dict(input="image", size=32, kwargs={}),
    "bert_mini": dict(input="tokens", vocab=30522, seq=128, mask=True, kwargs=dict(max_length=128)),
    "rnn_classifier": dict(input="tokens", vocab=20000, seq=64,
                           kwargs=dict(vocab=20000, embed=128, hidden=128, cell="gru", bidirectional=True)),
    "ncf": dict(input="ids", cardinalities=(138493, 26744),
                kwargs=dict(num_users=138493, num_items=26744, factors=32, mlp_layers=(128, 64, 32))),
}

#: The eval files sparkdl tries to serve (and onnxruntime then runs), and the training files, in order: the
#: ``*_dynamic`` ones (batch axis symbolic, exported for sequence models only) are fallbacks. A static file whose
#: exporter folded the batch into reshape targets (BERT-mini's attention folds it into the heads) imports as a
#: ``Graph`` of that fixed ``batch_size``, which is the batch this benchmark runs it at.
SERVING_FILES = ("eval_dynamo", "eval_legacy", "eval_dynamo_dynamic")
TRAINING_FILES = ("train_legacy", "train_dynamo", "train_dynamo_dynamic")

#: Benchmark sizes by an image network's native resolution (``BENCH[name]["size"]``): (inference size, batch),
#: (training size, batch). ImageNet networks are served at 224x224 and trained here at 64x64; CIFAR networks at 32.
IMAGE_BENCH = {224: ((224, 8), (64, 32)), 32: ((32, 128), (32, 64))}
TOKEN_BATCH, IDS_BATCH = (32, 32), (1024, 1024)  # (inference, training) batch of sequence and recommender models


def _plan(shape):
    """Per-row input specs ``[(dtype, per-row shape, high)]`` for inference and training, and the batches."""
    kind = shape["input"]
    if kind == "image":
        size = shape["size"]
        (isz, ib), (tsz, tb) = IMAGE_BENCH.get(size, ((size, 64), (size, 64)))
        c = shape.get("channels", 3)
        return [("float32", (c, isz, isz), None)], [("float32", (c, tsz, tsz), None)], ib, tb
    if kind == "tokens":
        row = [("int64", (shape["seq"],), shape["vocab"])] + ([("mask", (shape["seq"],), 2)] if shape.get("mask")
                                                               else [])
        return row, row, *TOKEN_BATCH
    if kind == "ids":
        row = [("int64", (), c) for c in shape["cardinalities"]]
        return row, row, *IDS_BATCH
    raise ValueError(f"BENCH input kind must be 'image', 'tokens' or 'ids', got {kind!r}")


def _inputs(row_specs, batch, seed):
    rng = np.random.default_rng(seed)
    out = []
    for dtype, shape, high in row_specs:
        if dtype == "float32":
            out.append(rng.standard_normal((batch, *shape)).astype(np.float32))
        elif dtype == "mask":  # 1 for tokens, 0 for padding: row i keeps its first T - i % (T // 2) tokens
            t = shape[0]
            out.append((np.arange(t)[None, :] < (t - np.arange(batch) % (t // 2))[:, None]).astype(np.int64))
        else:
            out.append(rng.integers(0, high, (batch, *shape)).astype(np.int64))
    return out


def _save_batch(path, xs, out, y=None):
    arrays = {f"x{i}": x for i, x in enumerate(xs)}
    np.savez(path, out=out, **arrays, **({} if y is None else {"y": y}))


def load_batch(path):
    """``(inputs, outputs, targets or None)`` of a ``*.npz`` batch."""
    with np.load(path) as d:
        xs = [d[f"x{i}"] for i in range(sum(k.startswith("x") for k in d.files))]
        return xs, d["out"], (d["y"] if "y" in d.files else None)


def blas_kernel():
    """numpy's BLAS as this process runs it: library, version and the kernel family it picked for this CPU
    (threadpoolctl's ``architecture``), and ``OPENBLAS_CORETYPE`` if set. Some machines set that variable (with
    ``OPENBLAS_L2_SIZE``) to force older, narrower kernels (e.g. Haswell's AVX2 on an AVX-512 CPU), which slows every
    GEMM of sparkdl; a default numpy picks the widest kernel the CPU has, so benchmarks unset both."""
    import threadpoolctl
    blas = [p for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    out = {k: blas[0].get(k) for k in ("internal_api", "version", "architecture")} if blas else {}
    out["OPENBLAS_CORETYPE"] = os.environ.get("OPENBLAS_CORETYPE")
    return out


# ---------------------------------------------------------------- PyTorch: export (one-shot) and worker
def _torch_model(name, exchange=None):
    """The zoo's PyTorch network (seed 0; BatchNorm statistics randomized so a wrong mapping shows; Dropout p=0,
    as the exports have none), with ``state.pt``'s weights when ``exchange`` is given."""
    import torch
    sys.path.insert(0, ROOT)  # the repository: tests/zoo_torch.py imports tests.zoo_cnn
    from tests.zoo_torch import TORCH_ZOO
    torch.manual_seed(0)
    model = TORCH_ZOO[name](**BENCH[name]["kwargs"])
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
                m.running_mean.normal_(0, 0.2, generator=g)
                m.running_var.uniform_(0.5, 2.0, generator=g)
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
            if isinstance(m, torch.nn.MultiheadAttention):  # its attention dropout is a float, not a module
                m.dropout = 0.0
    if exchange is not None:
        model.load_state_dict(torch.load(os.path.join(exchange, "state.pt")))
    return model, BENCH[name]


def _export_file(model, args, path, dynamo, keep_batchnorm, dynamic_batch=False):
    import logging
    import warnings

    import torch
    args = tuple(args)
    kw = {"optimize": not keep_batchnorm, "external_data": False, "verbose": False} if dynamo else (
        {"training": torch.onnx.TrainingMode.PRESERVE} if keep_batchnorm else {})
    if dynamic_batch:  # axis 0 of every input symbolic, as users export a model for serving
        batch = torch.export.Dim("N", min=1, max=4096)
        kw["dynamic_shapes"] = tuple({0: batch} for _ in args)
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model.eval(), args, path, dynamo=dynamo, **kw)
    finally:
        logging.disable(logging.NOTSET)


def export(name, exchange):
    """Build, run and export ``name`` (see the module docstring); returns the spec written to ``spec.json``."""
    import copy

    import torch
    model, shape = _torch_model(name)
    infer_row, train_row, infer_batch, train_batch = _plan(shape)
    torch.save(model.state_dict(), os.path.join(exchange, "state.pt"))
    xi = _inputs(infer_row, infer_batch, 0)
    with torch.no_grad():
        out = model.eval()(*map(torch.from_numpy, xi)).numpy()
    _save_batch(os.path.join(exchange, "infer.npz"), xi, out)
    xt = _inputs(train_row, train_batch, 1)
    with torch.no_grad():
        out = copy.deepcopy(model).train()(*map(torch.from_numpy, xt)).numpy()
    loss = "cross_entropy" if out.ndim == 2 and out.shape[1] > 1 else "mse"
    rng = np.random.default_rng(2)
    y = rng.integers(0, out.shape[1], len(out)) if loss == "cross_entropy" else \
        rng.standard_normal(out.shape).astype(np.float32)
    _save_batch(os.path.join(exchange, "train.npz"), xt, out, y)
    spec = {"name": name, "input": shape["input"], "infer_shape": [list(r[1]) for r in infer_row],
            "train_shape": [list(r[1]) for r in train_row], "infer_batch": infer_batch, "train_batch": train_batch,
            "loss": loss, "files": {}, "export_errors": {}}
    files = [("eval_dynamo", xi, True, False, False), ("eval_legacy", xi, False, False, False),
             ("train_legacy", xt, False, True, False), ("train_dynamo", xt, True, True, False)]
    if shape["input"] == "tokens":  # attention folds the batch into the heads: static shapes fix the batch
        files += [("eval_dynamo_dynamic", xi, True, False, True), ("train_dynamo_dynamic", xt, True, True, True)]
    for file, args, dynamo, keep, dynamic in files:
        t0 = time.perf_counter()
        try:
            _export_file(model, map(torch.from_numpy, args), os.path.join(exchange, file + ".onnx"), dynamo, keep,
                         dynamic)
            spec["files"][file] = round(time.perf_counter() - t0, 1)
        except Exception as e:  # noqa: BLE001  (an exporter's failure is a result of the benchmark)
            spec["export_errors"][file] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    procs.forbid_imports(["sparkdl"], "the export process")
    with open(os.path.join(exchange, "spec.json"), "w") as f:
        json.dump(spec, f)
    return spec


def _serve(ops, set_threads, info):
    """:func:`procs.serve` with ``warmup OP T N`` and ``time OP T B`` over the step functions ``ops[OP](T)``."""
    def warmup(op, threads, steps):
        set_threads(int(threads))
        step = ops[op](int(threads))
        for _ in range(int(steps)):
            step()
        return {}

    def timed(op, threads, steps):
        set_threads(int(threads))
        step = ops[op](int(threads))
        step()  # untimed: wakes this thread count's pools after the pause
        return procs.time_steps(step, int(steps))
    procs.serve({"warmup": warmup, "time": timed}, info)


def torch_worker(name, exchange):
    """PyTorch: the training step (train mode, forward + loss + backward + ``SGD(LR, momentum=MOMENTUM)``) and the
    eval forward (``inference_mode``), at the threads of ``torch.set_num_threads``."""
    import torch
    info = {"default_threads": torch.get_num_threads(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "ops": ["infer", "train"]}
    model, _ = _torch_model(name, exchange)
    with open(os.path.join(exchange, "spec.json")) as f:
        spec = json.load(f)
    xi = [torch.from_numpy(x) for x in load_batch(os.path.join(exchange, "infer.npz"))[0]]
    xt, _, y = load_batch(os.path.join(exchange, "train.npz"))
    xt, y = [torch.from_numpy(x) for x in xt], torch.from_numpy(y)
    loss = torch.nn.functional.cross_entropy if spec["loss"] == "cross_entropy" else torch.nn.functional.mse_loss
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

    def train():
        model.train()
        opt.zero_grad()
        loss(model(*xt), y).backward()
        opt.step()

    def infer():
        model.eval()
        with torch.inference_mode():
            model(*xi)
    procs.forbid_imports(["sparkdl", "onnxruntime"], "the torch worker")
    _serve({"train": lambda t: train, "infer": lambda t: infer}, torch.set_num_threads, info)


def ort_worker(name, exchange):
    """onnxruntime: the eval file sparkdl serves (``serving.json``, written by the sparkdl worker, which starts
    first), in one ``InferenceSession`` per thread count (``intra_op_num_threads`` = T, ``inter_op_num_threads`` =
    1, sequential execution, default graph optimizations)."""
    import onnxruntime as ort
    with open(os.path.join(exchange, "serving.json")) as f:
        file = json.load(f)["file"]
    info = {"file": file, "version": ort.__version__, "ops": []}
    xs = load_batch(os.path.join(exchange, "infer.npz"))[0]
    sessions = {}

    def infer(threads):
        if threads not in sessions:
            so = ort.SessionOptions()
            so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            s = ort.InferenceSession(os.path.join(exchange, file + ".onnx"), so, providers=["CPUExecutionProvider"])
            feed = dict(zip([i.name for i in s.get_inputs()], xs))
            sessions[threads] = lambda: s.run(None, feed)
        return sessions[threads]
    if file is not None:
        try:
            infer(1)
            info["ops"] = ["infer"]
        except Exception as e:  # noqa: BLE001  (onnxruntime refusing a file is a result of the benchmark)
            info["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    procs.forbid_imports(["sparkdl", "torch"], "the onnxruntime worker")
    _serve({"infer": infer}, lambda t: None, info)


# ---------------------------------------------------------------- sparkdl worker
def _relative(actual, expected):
    """``max |actual - expected| / max |expected|``: the error relative to the output's scale."""
    return float(np.max(np.abs(actual - expected)) / max(float(np.max(np.abs(expected))), 1e-30))


def _one(xs):
    return xs[0] if len(xs) == 1 else tuple(xs)


def _import(path, info, key):
    """``sparkdl.onnx.load(path)``, or None with the failure recorded in ``info["import_failure"][key]``."""
    import sparkdl.onnx
    try:
        return sparkdl.onnx.load(path)
    except Exception as e:  # noqa: BLE001  (an import failure is a result of the benchmark)
        info["import_failure"][key] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        return None


def sparkdl_worker(name, exchange):
    """sparkdl: imports every exported file with :func:`sparkdl.onnx.load` (``import_error``: eval outputs against
    PyTorch's, relative to their largest magnitude; ``train_error``: the training-mode outputs likewise); times the
    engine task's training step (:func:`sparkdl.step.task_gradient_sum`, then ``SGD(LR, momentum=MOMENTUM)`` over
    the whole vector) on the imported training file and the eval forward on the file onnxruntime runs."""
    import sparkdl
    from sparkdl import nn
    from sparkdl.allocator import retained_memory
    from sparkdl.config import threading_layer
    from sparkdl.optim import SGD
    from sparkdl.step import sum_reduction, task_gradient_sum
    with open(os.path.join(exchange, "spec.json")) as f:
        spec = json.load(f)
    info = {"threading_layer": threading_layer(), "blas": blas_kernel(), "import_error": {}, "import_failure": {},
            "serving_file": None}
    xi, out_i, _ = load_batch(os.path.join(exchange, "infer.npz"))
    infer_model = None
    for file in SERVING_FILES:  # served (and run by onnxruntime): the first that imports
        model = _import(os.path.join(exchange, file + ".onnx"), info, file) if file in spec["files"] else None
        if model is not None:
            info["import_error"][file] = _relative(model(_one(xi)), out_i)
            if infer_model is None:
                infer_model, info["serving_file"] = model, file
    with open(os.path.join(exchange, "serving.json"), "w") as f:
        json.dump({"file": info["serving_file"]}, f)
    xt, out_t, y = load_batch(os.path.join(exchange, "train.npz"))
    train_model = None
    for file in TRAINING_FILES:  # the first that imports
        if file in spec["files"] and train_model is None:
            train_model = _import(os.path.join(exchange, file + ".onnx"), info, file)
            info["train_file"] = file if train_model is not None else None
    ops = {}
    if infer_model is not None:
        x_infer = _one(xi)  # not ``x``: the lambda reads the name when called (it was the training batch)
        ops["infer"] = lambda t: lambda: infer_model(x_infer)
    if train_model is not None:
        rng = np.random.default_rng(0)
        info["train_error"] = _relative(train_model.forward(_one(xt), training=True, rng=rng)[0], out_t)
        loss = sum_reduction(nn.CrossEntropyLoss() if spec["loss"] == "cross_entropy" else nn.MSELoss())
        opt = SGD(lr=LR, momentum=MOMENTUM).configure(train_model.parameter_layout())
        state = opt.init_state(0, train_model.num_parameters())
        grad = train_model.zeros_like_parameters()
        x_train = _one(xt)

        def train():
            _, count = task_gradient_sum(train_model, loss, x_train, y, rng, grad)
            grad[...] /= count
            opt.update(train_model.flat_parameters, grad, state, lo=0)
        ops["train"] = lambda t: train
    info["ops"] = sorted(ops)
    procs.forbid_imports(["torch", "onnxruntime"], "the sparkdl worker")
    with retained_memory():  # as in sparkdl's Spark tasks (sparkdl.engine.worker.task_scope), where both run
        _serve(ops, sparkdl.set_num_threads, info)
