"""Compile sparkdl's kernels ahead of time into numba's on-disk cache: ``python -m sparkdl.precompile``.

numba compiles a kernel the first time a process calls it with new argument types and keeps the machine code in
its cache directory (:mod:`sparkdl.config`). A process that finds the cache empty compiles every kernel its model
needs: 20-35 s of CPU for LeNet-5's training step on a 2-core machine, paid by each Python worker that starts
before the cache is written (the two workers of a ``local[2]`` session compile the same kernels at the same time).
Run this once where the cache lives — in the image of your executors (with ``NUMBA_CACHE_DIR`` set to the cache
directory they use, e.g. ``~/.cache/sparkdl/numba``, :data:`sparkdl.engine.RECOMMENDED_CONF`), or before the first
``spark-submit`` on a new machine — and workers start with compiled kernels.

What it compiles: for each named workload, one training step (forward in training mode, cross-entropy, backward,
the update of :class:`~sparkdl.optim.SGD` with momentum and of :class:`~sparkdl.optim.Adam`, whose kernels for
small parameter vectors are compiled too) and one eval-mode forward, in float32, on a batch of 2-4 samples at the
input shape the model is used at (the convolution algorithm is chosen per layer shape,
:mod:`sparkdl.nn.conv_algorithm`, so the shapes matter). Kernels the workloads do not reach (other dtypes,
layers no workload uses) still compile on first use. Results never depend on whether a kernel came from the cache.

Usage::

    python -m sparkdl.precompile                      # every workload (~2 min of one core)
    python -m sparkdl.precompile --models lenet5,mlp  # some of them
    python -m sparkdl.precompile --list
"""
from __future__ import annotations

import argparse
import time
from typing import Callable

import numpy as np

__all__ = ["WORKLOADS", "precompile", "main"]


def _images(shape):
    def inputs(batch):
        x = np.random.default_rng(0).standard_normal((batch, *shape)).astype(np.float32)
        return x, np.arange(batch) % 2
    return inputs


def _tokens(vocab, length):
    def inputs(batch):  # float32 ids as Spark's blocks hold them, -1 padding after each row's end
        ids = np.random.default_rng(0).integers(1, vocab, (batch, length)).astype(np.float32)
        ids[0, length // 2:] = -1
        return ids, np.arange(batch) % 2
    return inputs


def _zoo(name, **kwargs):
    def build():
        from sparkdl import models
        return models.MODELS[name](**kwargs)
    return build


def _text_transformer():
    from sparkdl import nn
    return nn.Sequential(nn.SequenceLengths(), nn.TransformerClassifier(50, 2, max_length=16, d_model=16, nhead=2,
                                                                         num_layers=1, dim_feedforward=32))


def _text_lstm():
    from sparkdl import nn
    return nn.Sequential(nn.SequenceLengths(), nn.Embedding(50, 8), nn.LSTM(8, 8, batch_first=True,
                                                                            bidirectional=True),
                         nn.RNNOutput("last"), nn.Dropout(0.1), nn.Linear(16, 2))


#: name -> (builder of the model, inputs(batch) -> (x, integer targets), training batch size)
WORKLOADS: dict[str, tuple[Callable, Callable, int]] = {
    "mlp": (_zoo("mlp", num_classes=2), _images((784,)), 4),
    "lenet5": (_zoo("lenet5", num_classes=2), _images((1, 28, 28)), 4),
    "small_cnn": (_zoo("small_cnn", num_classes=2), _images((3, 32, 32)), 4),
    "resnet20": (_zoo("resnet20", num_classes=2), _images((3, 32, 32)), 4),
    "mobilenet_v2": (_zoo("mobilenet_v2", num_classes=2), _images((3, 64, 64)), 2),
    "mobilenet_v3_small": (_zoo("mobilenet_v3_small", num_classes=2), _images((3, 64, 64)), 2),
    "resnet18": (_zoo("resnet18", num_classes=2), _images((3, 64, 64)), 2),
    "rnn_gru": (_zoo("rnn_classifier", vocab=50, embed=8, hidden=8), _tokens(50, 12), 4),
    "text_lstm": (_text_lstm, _tokens(50, 12), 4),
    "text_transformer": (_text_transformer, _tokens(50, 12), 4),
}


def _steps(build, x, y) -> None:
    """One training step with each optimizer, then an eval forward."""
    from sparkdl import nn
    from sparkdl.optim import SGD, Adam
    from sparkdl.step.update import train_step
    for optimizer in (SGD(lr=1e-3, momentum=0.9), Adam(lr=1e-3)):
        model = build().initialize(0)
        optimizer.configure(model.parameter_layout())
        state = optimizer.init_state(0, model.num_parameters())
        train_step(model, nn.CrossEntropyLoss(), optimizer, state, x, y, None, np.random.default_rng(0))
    model(x)


def _small_shards() -> None:
    """The optimizers' serial kernels, which update parameter vectors below ``PARALLEL_MIN_SIZE``."""
    from sparkdl import nn
    x, y = _images((3,))(2)
    _steps(lambda: nn.Linear(3, 2), x, y)


def _split_batch_norm() -> None:
    """BatchNorm's kernels for a batch split across threads (:mod:`sparkdl.nn.row_parts`): a training task with
    several threads reaches them, a one-thread workload does not."""
    from sparkdl.kernels import batchnorm as K
    x = np.ones((2, 3, 4), np.float32)
    mean, invstd = np.zeros(3), np.ones(3)
    gb, gw = K.batch_norm_grad_sums(x, x, mean, invstd)
    K.batch_norm_grad_input(x, x, mean, invstd, np.ones(3, np.float32), gb, gw, 8)


def precompile(names=None) -> dict[str, float]:
    """Run the workloads ``names`` (default: all of :data:`WORKLOADS`) once each; returns the seconds each took.

    Raises
    ------
    ValueError
        If a name is not in :data:`WORKLOADS` (before anything runs).
    """
    names = list(WORKLOADS) if names is None else list(names)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise ValueError(f"precompile: unknown workload(s) {unknown}; expected names from {sorted(WORKLOADS)}")
    seconds = {}
    _small_shards()
    _split_batch_norm()
    for name in names:
        start = time.perf_counter()
        build, inputs, batch = WORKLOADS[name]
        _steps(build, *inputs(batch))
        seconds[name] = time.perf_counter() - start
    return seconds


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sparkdl.precompile",
                                     description="Compile sparkdl's kernels into numba's on-disk cache.")
    parser.add_argument("--models", type=lambda s: [n for n in s.split(",") if n],
                        help=f"comma-separated workloads (default: all of {', '.join(WORKLOADS)})")
    parser.add_argument("--list", action="store_true", help="print the workloads and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(WORKLOADS))
        return
    try:
        seconds = precompile(args.models)
    except ValueError as e:
        parser.error(str(e))
    for name, s in seconds.items():
        print(f"{name:20s} {s:6.1f} s")


if __name__ == "__main__":
    main()
