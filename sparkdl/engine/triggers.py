"""Triggers: when to stop, validate or checkpoint (BigDL's ``Trigger``), composable with ``|`` and ``&``.

A trigger is called with the driver's :class:`TrainingState` after every iteration.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["TrainingState", "Trigger", "MaxEpoch", "MaxIteration", "MinLoss", "MaxScore", "EveryEpoch",
           "SeveralIteration"]


@dataclass
class TrainingState:
    """Counters after an iteration: ``epoch`` = completed epochs, ``iteration`` = completed iterations
    (global), ``epoch_end`` = this iteration finished an epoch, ``loss`` = its mean loss, ``score`` = the
    last validation score (first metric) or None."""

    epoch: int = 0
    iteration: int = 0
    epoch_end: bool = False
    loss: float = math.inf
    score: float | None = None


class Trigger:
    """Base class: ``trigger(state) -> bool``.

    ``predictable`` is True when the trigger reads only the counters (``epoch``, ``iteration``, ``epoch_end``)
    and the validation ``score``, so the driver can tell in advance at which iteration it fires and run the
    iterations before it in one Spark job (``DistributedTrainer(iterations_per_job=...)``). False here, so a
    trigger of your own (which may read the loss) is evaluated after every iteration; the built-in ones but
    :class:`MinLoss` set it True."""

    predictable = False

    def __call__(self, state: TrainingState) -> bool:
        raise NotImplementedError

    def __or__(self, other: "Trigger") -> "Trigger":
        return _Any(self, other)

    def __and__(self, other: "Trigger") -> "Trigger":
        return _All(self, other)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


def _count(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


class MaxEpoch(Trigger):
    """True once ``max_epoch`` epochs have completed."""

    predictable = True

    def __init__(self, max_epoch: int):
        self.max_epoch = _count("MaxEpoch: max_epoch", max_epoch)

    def __call__(self, state):
        return state.epoch >= self.max_epoch


class MaxIteration(Trigger):
    """True once ``max_iteration`` iterations have completed."""

    predictable = True

    def __init__(self, max_iteration: int):
        self.max_iteration = _count("MaxIteration: max_iteration", max_iteration)

    def __call__(self, state):
        return state.iteration >= self.max_iteration


class MinLoss(Trigger):
    """True once an iteration's mean training loss is below ``min_loss``."""

    def __init__(self, min_loss: float):
        self.min_loss = float(min_loss)

    def __call__(self, state):
        return state.loss < self.min_loss


class MaxScore(Trigger):
    """True once the validation score (first metric) exceeds ``max_score``."""

    predictable = True

    def __init__(self, max_score: float):
        self.max_score = float(max_score)

    def __call__(self, state):
        return state.score is not None and state.score > self.max_score


class EveryEpoch(Trigger):
    """True at the end of every epoch."""

    predictable = True

    def __call__(self, state):
        return state.epoch_end


class SeveralIteration(Trigger):
    """True every ``interval`` iterations."""

    predictable = True

    def __init__(self, interval: int):
        self.interval = _count("SeveralIteration: interval", interval)

    def __call__(self, state):
        return state.iteration > 0 and state.iteration % self.interval == 0


class _Combined(Trigger):
    def __init__(self, *triggers):
        self.triggers = triggers

    @property
    def predictable(self):
        return all(t.predictable for t in self.triggers)


class _Any(_Combined):
    def __call__(self, state):
        return any(t(state) for t in self.triggers)


class _All(_Combined):
    def __call__(self, state):
        return all(t(state) for t in self.triggers)
