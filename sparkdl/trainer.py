"""Single-process training, evaluation and prediction — the reference the distributed engine must match.

One training step (:func:`train_step`, from :mod:`sparkdl.step`) is exactly what one synchronous data-parallel
iteration computes on the union of the partitions' mini-batches::

    y            = model.forward(xb, training=True, rng)
    L_sum        = loss_sum(y, yb)                          # the loss with reduction='sum'
    g            = d L_sum / d params  /  loss.normalizer(yb)  # the global mean gradient
    params      <- optimizer.update(params, g, state, lo=0, lr)  # clips g over the whole flat vector

:func:`fit` loops over epochs and mini-batches built on :func:`train_step`. All randomness is derived
from ``seed``: the epoch's shuffle from ``default_rng([seed, epoch])`` and a step's forward rng (Dropout)
from ``default_rng([seed, epoch, iteration])``; the last partial batch is included. With
``checkpoint_dir`` it checkpoints and can resume mid-epoch bit-exactly.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from sparkdl.allocator import retained_memory
from sparkdl.io.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint
from sparkdl.metrics import Loss, ValidationMethod
from sparkdl.nn.module import Module
from sparkdl.step import gradient_sum, grouped_gradient_sum, sum_reduction, train_step

__all__ = ["History", "train_step", "fit", "evaluate", "predict", "sum_reduction", "gradient_sum",
           "grouped_gradient_sum"]


@dataclass
class History:
    """What :func:`fit` records: per-iteration ``loss`` (the batch's mean loss) and ``lr``, and per-epoch
    ``validation`` metrics (``{metric name: [value per epoch]}``) and wall-clock ``epoch_time`` (seconds)."""

    loss: list = field(default_factory=list)
    lr: list = field(default_factory=list)
    validation: dict = field(default_factory=dict)
    epoch_time: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"loss": list(self.loss), "lr": list(self.lr),
                "validation": {k: list(v) for k, v in self.validation.items()}, "epoch_time": list(self.epoch_time)}

    @classmethod
    def from_dict(cls, d: dict) -> "History":
        return cls(list(d["loss"]), list(d["lr"]), {k: list(v) for k, v in d["validation"].items()},
                   list(d["epoch_time"]))


def _batches(n: int, batch_size: int):
    return [(s, min(s + batch_size, n)) for s in range(0, n, batch_size)]


def _check_xy(fn: str, x, y=None):
    if not isinstance(x, np.ndarray) or x.ndim < 1:
        raise TypeError(f"{fn}: x must be a numpy.ndarray with a leading sample axis, got {type(x).__name__}")
    if y is not None:
        if not isinstance(y, np.ndarray):
            raise TypeError(f"{fn}: y must be a numpy.ndarray, got {type(y).__name__}")
        if len(y) != len(x):
            raise ValueError(f"{fn}: x and y must have the same number of samples, got {len(x)} and {len(y)}")


def _check_batch_size(fn: str, batch_size) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"{fn}: batch_size must be an int >= 1, got {batch_size!r}")
    return int(batch_size)


@retained_memory()
def predict(model: Module, x: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """Model outputs for every sample of ``x`` (evaluation mode), computed ``batch_size`` rows at a time."""
    _check_xy("predict", x)
    batch_size = _check_batch_size("predict", batch_size)
    outs = [model.infer(x[lo:hi]) for lo, hi in _batches(len(x), batch_size)]
    if not outs:
        raise ValueError("predict: x has no samples")
    return np.concatenate(outs, axis=0)


@retained_memory()
def evaluate(model: Module, x: np.ndarray, y: np.ndarray, metrics, batch_size: int = 256) -> dict[str, float]:
    """``{metric.name: value}`` of ``metrics`` (ValidationMethod instances) over ``(x, y)`` in eval mode."""
    _check_xy("evaluate", x, y)
    batch_size = _check_batch_size("evaluate", batch_size)
    metrics = list(metrics)
    for m in metrics:
        if not isinstance(m, ValidationMethod):
            raise TypeError(f"evaluate: metrics must be sparkdl.metrics.ValidationMethod instances, got "
                            f"{type(m).__name__}")
    states = [m.zero() for m in metrics]
    for lo, hi in _batches(len(x), batch_size):
        out = model.infer(x[lo:hi])
        states = [m.update(s, out, y[lo:hi]) for m, s in zip(metrics, states)]
    return {m.name: m.result(s) for m, s in zip(metrics, states)}


def _configure(optimizer, model: Module):
    layout = model.parameter_layout()
    if optimizer.layout is None:
        optimizer.configure(layout)
    elif [(e.name, e.shape) for e in optimizer.layout] != [(e.name, e.shape) for e in layout]:
        raise ValueError(f"fit: the optimizer is configured for another layout ({optimizer.layout}) than the "
                         f"model's ({layout}); configure it with model.parameter_layout()")


def _monitored(history: History, monitor: str | None, epoch_losses: list) -> float | None:
    """The metric a plateau schedule sees before the next epoch."""
    if monitor is None:
        if history.validation:
            return next(iter(history.validation.values()))[-1]
        return float(np.mean(epoch_losses)) if epoch_losses else None
    if monitor == "loss":
        return float(np.mean(epoch_losses)) if epoch_losses else None
    if monitor not in history.validation:
        raise ValueError(f"fit: monitor={monitor!r} is neither 'loss' nor a validation metric "
                         f"({sorted(history.validation)})")
    return history.validation[monitor][-1]


def _call(callbacks, event: str, info: dict) -> bool:
    stop = False
    for cb in callbacks:
        fn = getattr(cb, event, None)
        if fn is not None and fn(info) is True:
            stop = True
    return stop


@retained_memory()
def fit(model: Module, loss, optimizer, x: np.ndarray, y: np.ndarray, *, batch_size: int, epochs: int, seed: int,
        validation_data: tuple | None = None, metrics=(), schedule=None, shuffle: bool = True, callbacks=(),
        checkpoint_dir=None, checkpoint_every: int | None = None, keep_last: int | None = None,
        resume: bool = False, max_iterations: int | None = None, monitor: str | None = None,
        verbose: int = 0) -> History:
    """Train ``model`` in place with mini-batch steps of :func:`train_step`; returns the :class:`History`.

    Parameters
    ----------
    model, loss, optimizer
        The optimizer is configured on ``model.parameter_layout()`` unless it already is.
    x, y : ndarray
        Training inputs (N, ...) of ``model.dtype`` and targets (N, ...).
    batch_size, epochs, seed : int
        Batches are consecutive slices of the epoch's order (the last one may be smaller). Epoch ``e``'s
        order is ``default_rng([seed, e]).permutation(N)`` (``arange(N)`` when ``shuffle=False``); step
        ``i``'s forward rng is ``default_rng([seed, e, i])``.
    validation_data : (x_val, y_val), optional
        Evaluated with ``metrics`` after every epoch (default metric: ``Loss(loss)``).
    metrics : sequence of ValidationMethod
    schedule : Schedule, optional
        Learning-rate schedule; default ``optimizer.schedule``. The rate of step ``i`` in epoch ``e`` is
        ``schedule.lr(optimizer.lr, iteration=i, epoch=e, metric=m)`` where ``m`` is the monitored value
        after epoch ``e - 1`` (None in the first epoch).
    monitor : str, optional
        What ``m`` is: a validation metric name or ``"loss"`` (the previous epoch's mean training loss).
        Default: the first validation metric if there is validation data, else ``"loss"``.
    callbacks : sequence
        Objects with optional ``on_iteration_end(info)`` / ``on_epoch_end(info)``; returning True stops
        training. ``info`` has ``model, epoch, iteration, loss, lr, history``.
    checkpoint_dir : path, optional
        Save a checkpoint (see :mod:`sparkdl.io.checkpoint`) after every epoch, every ``checkpoint_every``
        iterations if given, and when stopping at ``max_iterations``; keep the newest ``keep_last``.
    resume : bool
        Continue from the latest checkpoint in ``checkpoint_dir`` (if any): model, optimizer state,
        schedule state, counters and history are restored and the run continues mid-epoch, bit-exactly.
    max_iterations : int, optional
        Stop after this many optimizer steps in total (counting steps before a resume).
    verbose : int
        0 silent, 1 one line per epoch.

    Raises
    ------
    TypeError, ValueError
        On inconsistent data, bad counts, or an optimizer configured for another layout.
    """
    _check_xy("fit", x, y)
    batch_size = _check_batch_size("fit", batch_size)
    for name, v in (("epochs", epochs), ("seed", seed)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"fit: {name} must be a non-negative int, got {v!r}")
    if len(x) == 0:
        raise ValueError("fit: x has no samples")
    if (checkpoint_every is not None or resume) and checkpoint_dir is None:
        raise ValueError("fit: checkpoint_every and resume need checkpoint_dir")
    if monitor not in (None, "loss") and validation_data is None:
        raise ValueError(f"fit: monitor={monitor!r} names a validation metric but there is no validation_data")
    metrics = list(metrics) or ([Loss(loss)] if validation_data is not None else [])
    schedule = schedule if schedule is not None else getattr(optimizer, "schedule", None)
    _configure(optimizer, model)
    n, nparams = len(x), model.num_parameters()
    nbatches = -(-n // batch_size)
    opt_state = optimizer.init_state(0, nparams, dtype=model.dtype)
    history, iteration, epoch, start_batch, samples_seen, metric = History(), 0, 0, 0, 0, None
    if resume and list_checkpoints(checkpoint_dir):
        ck = load_checkpoint(checkpoint_dir)
        run = {"num_samples": n, "batch_size": batch_size, "seed": int(seed), "shuffle": bool(shuffle)}
        saved = ck.extras.get("run")
        if saved != run:
            raise ValueError(f"fit: cannot resume {ck.path}: it was written by a run with {saved}, this run has "
                             f"{run}; resuming mid-epoch needs the same data size, batch_size, seed and shuffle")
        model.load_state_dict(ck.model.state_dict())
        if not isinstance(ck.optimizer_state, dict) or (0, nparams) not in ck.optimizer_state:
            raise ValueError(f"fit: {ck.path} holds no optimizer state for the whole vector (0, {nparams})")
        opt_state = ck.optimizer_state[(0, nparams)]
        if schedule is not None and ck.schedule_state is not None:
            schedule.load_state_dict(ck.schedule_state)
        iteration, epoch, samples_seen = ck.iteration, ck.epoch, ck.samples_seen
        start_batch, metric = ck.extras["batch"], ck.extras["metric"]
        history = History.from_dict(ck.extras["history"])

    def checkpoint(next_batch):
        save_checkpoint(checkpoint_dir, model, iteration=iteration, epoch=epoch, samples_seen=samples_seen,
                        optimizer=optimizer, optimizer_state={(0, nparams): opt_state}, schedule=schedule,
                        extras={"batch": next_batch, "metric": metric, "history": history.to_dict(),
                                "run": {"num_samples": n, "batch_size": batch_size, "seed": int(seed),
                                        "shuffle": bool(shuffle)}},
                        keep_last=keep_last)

    grads, loss_sum = model.zeros_like_parameters(), sum_reduction(loss)
    stop = max_iterations is not None and iteration >= max_iterations
    while epoch < epochs and not stop:
        t0 = time.perf_counter()
        order = np.random.default_rng([seed, epoch]).permutation(n) if shuffle else np.arange(n)
        epoch_losses = history.loss[len(history.loss) - start_batch:] if start_batch else []
        for b in range(start_batch, nbatches):
            idx = order[b * batch_size:(b + 1) * batch_size]
            lr = optimizer.lr if schedule is None else schedule.lr(optimizer.lr, iteration=iteration, epoch=epoch,
                                                                  metric=metric)
            value = train_step(model, loss_sum, optimizer, opt_state, x[idx], y[idx], lr,
                               np.random.default_rng([seed, epoch, iteration]), grad_buffer=grads)
            iteration += 1
            samples_seen += len(idx)
            history.loss.append(value)
            history.lr.append(float(lr))
            epoch_losses.append(value)
            info = {"model": model, "epoch": epoch, "iteration": iteration, "loss": value, "lr": lr,
                    "history": history}
            stop = _call(callbacks, "on_iteration_end", info)
            done = max_iterations is not None and iteration >= max_iterations
            if checkpoint_dir is not None and b + 1 < nbatches and (
                    done or stop or (checkpoint_every and iteration % checkpoint_every == 0)):
                checkpoint(b + 1)
            if (done or stop) and b + 1 < nbatches:
                return history
        start_batch = 0
        if validation_data is not None:
            for name, v in evaluate(model, *validation_data, metrics, batch_size=max(batch_size, 256)).items():
                history.validation.setdefault(name, []).append(v)
        history.epoch_time.append(time.perf_counter() - t0)
        metric = _monitored(history, monitor, epoch_losses)
        if verbose:
            vals = " - ".join(f"{k} {v[-1]:.4f}" for k, v in history.validation.items())
            print(f"epoch {epoch + 1}/{epochs} - loss {np.mean(epoch_losses):.4f}" + (f" - {vals}" if vals else "")
                  + f" - {history.epoch_time[-1]:.2f}s", flush=True)
        epoch += 1
        stop = _call(callbacks, "on_epoch_end", {"model": model, "epoch": epoch - 1, "iteration": iteration,
                                                  "loss": float(np.mean(epoch_losses)), "lr": history.lr[-1],
                                                  "history": history}) or stop
        stop = stop or (max_iterations is not None and iteration >= max_iterations)
        if checkpoint_dir is not None:
            checkpoint(0)
    return history

