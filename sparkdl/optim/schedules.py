"""Learning-rate schedules as functions of the training position, with plain-data state.

A schedule maps ``(base_lr, iteration, epoch, last metric)`` to the learning rate of the next step::

    lr = schedule.lr(base_lr, iteration=i, epoch=e, metric=None)

The driver evaluates it before every optimizer step and passes the result to
:meth:`sparkdl.optim.Optimizer.update` as ``lr``. Every schedule counts in one unit, chosen by its
``step_by`` argument:

* ``step_by="epoch"`` (default): ``t = epoch``, the 0-based epoch index. Equals PyTorch's scheduler when
  ``scheduler.step()`` is called once at the end of every epoch.
* ``step_by="iteration"``: ``t = iteration``, the number of optimizer steps already taken (0-based, global
  across epochs). Equals PyTorch's scheduler stepped after every ``optimizer.step()``.

Stateless schedules use PyTorch's closed forms (``_get_closed_form_lr``), so any ``t`` can be evaluated in
any order (a resumed run needs no schedule state). :class:`ReduceLROnPlateau` is stateful: it consumes a
metric once per new ``t`` (a repeated ``t`` is ignored, so a retried step changes nothing); its
counters live in :meth:`~Schedule.state_dict`, plain JSON data.

References: ``torch.optim.lr_scheduler`` (same names, arguments and values).
"""
from __future__ import annotations

import math
from bisect import bisect_right

from sparkdl.optim._checks import check_choice, check_int, check_real

__all__ = ["Schedule", "StepLR", "MultiStepLR", "ExponentialLR", "PolynomialLR", "CosineAnnealingLR",
           "LinearWarmup", "SequentialLR", "ReduceLROnPlateau", "SCHEDULE_REGISTRY", "schedule_config",
           "schedule_from_config"]

#: Every Schedule subclass by class name.
SCHEDULE_REGISTRY: dict[str, type] = {}


class Schedule:
    """Base class: ``lr(base_lr, iteration=, epoch=, metric=)`` from the closed form :meth:`lr_at`."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        SCHEDULE_REGISTRY[cls.__name__] = cls

    def __init__(self, step_by: str = "epoch"):
        self.step_by = check_choice(type(self).__name__, "step_by", step_by, ("epoch", "iteration"))

    def _t(self, iteration: int, epoch: int) -> int:
        name = type(self).__name__
        return check_int(name, self.step_by, epoch if self.step_by == "epoch" else iteration, 0)

    def lr(self, base_lr: float, *, iteration: int = 0, epoch: int = 0, metric: float | None = None) -> float:
        """Learning rate for the step at (``iteration``, ``epoch``); see the module docstring for units."""
        return self.lr_at(base_lr, self._t(iteration, epoch))

    def lr_at(self, base_lr: float, t: int) -> float:
        """Closed form: the rate after ``t`` scheduler steps."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        """Mutable state as plain data (empty for stateless schedules)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise ValueError(f"{type(self).__name__}.load_state_dict: a stateless schedule takes {{}}, "
                             f"got keys {sorted(state)}")

    def _args(self) -> dict:
        return {}

    def get_config(self) -> dict:
        """Constructor keyword arguments (JSON data)."""
        return {**self._args(), "step_by": self.step_by}

    @classmethod
    def from_config(cls, config: dict) -> "Schedule":
        return cls(**config)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{k}={v!r}" for k, v in self.get_config().items()) + ")"


class StepLR(Schedule):
    r"""Multiply by ``gamma`` every ``step_size`` steps: :math:`\eta_t = \eta_0 \gamma^{\lfloor t / s \rfloor}`."""

    def __init__(self, step_size: int, gamma: float = 0.1, step_by: str = "epoch"):
        super().__init__(step_by)
        self.step_size = check_int("StepLR", "step_size", step_size, 1)
        self.gamma = check_real("StepLR", "gamma", gamma, 0.0, low_open=True)

    def lr_at(self, base_lr, t):
        return base_lr * self.gamma ** (t // self.step_size)

    def _args(self):
        return {"step_size": self.step_size, "gamma": self.gamma}


class MultiStepLR(Schedule):
    r"""Multiply by ``gamma`` at each milestone: :math:`\eta_t = \eta_0 \gamma^{\#\{m \le t\}}` (repeats count)."""

    def __init__(self, milestones: list, gamma: float = 0.1, step_by: str = "epoch"):
        super().__init__(step_by)
        if not isinstance(milestones, (list, tuple)):
            raise TypeError(f"MultiStepLR: milestones must be a list of ints, got {type(milestones).__name__}")
        self.milestones = sorted(check_int("MultiStepLR", "milestones[]", m, 0) for m in milestones)
        self.gamma = check_real("MultiStepLR", "gamma", gamma, 0.0, low_open=True)

    def lr_at(self, base_lr, t):
        return base_lr * self.gamma ** bisect_right(self.milestones, t)

    def _args(self):
        return {"milestones": list(self.milestones), "gamma": self.gamma}


class ExponentialLR(Schedule):
    r"""Multiply by ``gamma`` every step: :math:`\eta_t = \eta_0 \gamma^t`."""

    def __init__(self, gamma: float, step_by: str = "epoch"):
        super().__init__(step_by)
        self.gamma = check_real("ExponentialLR", "gamma", gamma, 0.0, low_open=True)

    def lr_at(self, base_lr, t):
        return base_lr * self.gamma ** t

    def _args(self):
        return {"gamma": self.gamma}


class PolynomialLR(Schedule):
    r"""Polynomial decay to 0 over ``total_iters`` steps: :math:`\eta_t = \eta_0 (1 - \min(t, T)/T)^p`."""

    def __init__(self, total_iters: int = 5, power: float = 1.0, step_by: str = "epoch"):
        super().__init__(step_by)
        self.total_iters = check_int("PolynomialLR", "total_iters", total_iters, 1)
        self.power = check_real("PolynomialLR", "power", power, 0.0)

    def lr_at(self, base_lr, t):
        return base_lr * (1.0 - min(self.total_iters, t) / self.total_iters) ** self.power

    def _args(self):
        return {"total_iters": self.total_iters, "power": self.power}


class CosineAnnealingLR(Schedule):
    r"""Cosine annealing: :math:`\eta_t = \eta_{min} + (\eta_0 - \eta_{min})(1 + \cos(\pi t / T_{max}))/2`.

    Periodic beyond ``T_max`` (the rate rises again), like PyTorch's. Reference: Loshchilov & Hutter,
    "SGDR: Stochastic Gradient Descent with Warm Restarts", ICLR 2017.
    """

    def __init__(self, T_max: int, eta_min: float = 0.0, step_by: str = "epoch"):
        super().__init__(step_by)
        self.T_max = check_int("CosineAnnealingLR", "T_max", T_max, 1)
        self.eta_min = check_real("CosineAnnealingLR", "eta_min", eta_min, 0.0)

    def lr_at(self, base_lr, t):
        return self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * t / self.T_max)) / 2

    def _args(self):
        return {"T_max": self.T_max, "eta_min": self.eta_min}


class LinearWarmup(Schedule):
    r"""Linear factor from ``start_factor`` to ``end_factor`` over ``warmup_iters`` steps, then constant.

    :math:`\eta_t = \eta_0 (f_s + (f_e - f_s) \min(t, T) / T)`; PyTorch's ``LinearLR(start_factor,
    end_factor, total_iters=warmup_iters)``.
    """

    def __init__(self, warmup_iters: int = 5, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 step_by: str = "epoch"):
        super().__init__(step_by)
        self.warmup_iters = check_int("LinearWarmup", "warmup_iters", warmup_iters, 1)
        self.start_factor = check_real("LinearWarmup", "start_factor", start_factor, 0.0, 1.0, low_open=True)
        self.end_factor = check_real("LinearWarmup", "end_factor", end_factor, 0.0, 1.0)

    def lr_at(self, base_lr, t):
        frac = min(self.warmup_iters, t) / self.warmup_iters
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * frac)

    def _args(self):
        return {"warmup_iters": self.warmup_iters, "start_factor": self.start_factor, "end_factor": self.end_factor}


class SequentialLR(Schedule):
    """Run ``schedules[k]`` from ``milestones[k-1]`` on, restarting its count at 0 (e.g. warmup then cosine).

    Parameters
    ----------
    schedules : list of Schedule
        Stateless schedules, all with the same ``step_by`` (which the chain uses).
    milestones : list of int
        Non-decreasing switch points, ``len(schedules) - 1`` of them.

    Raises
    ------
    TypeError, ValueError
        On a ReduceLROnPlateau child (as PyTorch), mixed ``step_by`` or a wrong number of milestones.
    """

    def __init__(self, schedules: list, milestones: list):
        if not isinstance(schedules, (list, tuple)) or not schedules:
            raise ValueError(f"SequentialLR: schedules must be a non-empty list, got {schedules!r}")
        for i, s in enumerate(schedules):
            if not isinstance(s, Schedule) or isinstance(s, ReduceLROnPlateau):
                raise TypeError(f"SequentialLR: schedules[{i}] must be a stateless Schedule, got {type(s).__name__}")
        units = {s.step_by for s in schedules}
        if len(units) != 1:
            raise ValueError(f"SequentialLR: all schedules must share one step_by, got {sorted(units)}")
        super().__init__(units.pop())
        if not isinstance(milestones, (list, tuple)) or len(milestones) != len(schedules) - 1:
            raise ValueError(f"SequentialLR: expected {len(schedules) - 1} milestones (one fewer than schedules), "
                             f"got {milestones!r}")
        self.milestones = [check_int("SequentialLR", "milestones[]", m, 0) for m in milestones]
        if self.milestones != sorted(self.milestones):
            raise ValueError(f"SequentialLR: milestones must be non-decreasing, got {milestones!r}")
        self.schedules = list(schedules)

    def lr_at(self, base_lr, t):
        idx = bisect_right(self.milestones, t)
        start = self.milestones[idx - 1] if idx > 0 else 0
        return self.schedules[idx].lr_at(base_lr, t - start)

    def get_config(self):
        return {"schedules": [schedule_config(s) for s in self.schedules], "milestones": list(self.milestones)}

    @classmethod
    def from_config(cls, config):
        return cls([schedule_from_config(s) for s in config["schedules"]], config["milestones"])


class ReduceLROnPlateau(Schedule):
    """Divide the rate by ``1/factor`` when a metric stops improving for ``patience`` steps.

    Parameters
    ----------
    mode : {"min", "max"}, default "min"
        Whether the metric should decrease or increase.
    factor : float, default 0.1
        Multiplier on reduction, in ``[0, 1)``.
    patience : int, default 10
        Non-improving steps tolerated before reducing.
    threshold : float, default 1e-4
        Minimal improvement; relative (``best * (1 -/+ threshold)``) or absolute per ``threshold_mode``.
    threshold_mode : {"rel", "abs"}, default "rel"
    cooldown : int, default 0
        Steps to wait after a reduction before counting bad steps again.
    min_lr : float, default 0
        Lower bound of the rate.
    eps : float, default 1e-8
        Reductions smaller than this are skipped.
    step_by : {"epoch", "iteration"}, default "epoch"

    Notes
    -----
    ``lr(base_lr, epoch=e, metric=m)`` with ``m`` the metric measured *before* step ``e`` (e.g. the
    validation loss after epoch ``e - 1``) consumes ``m`` once per new ``t`` (PyTorch's
    ``scheduler.step(m)``) and returns the current rate; ``metric=None`` or an already seen ``t`` only
    reads it. The first call sets the current rate to ``base_lr``. State (``state_dict``): ``best``,
    ``num_bad_epochs``, ``cooldown_counter``, ``current_lr``, ``last_t``.
    """

    def __init__(self, mode: str = "min", factor: float = 0.1, patience: int = 10, threshold: float = 1e-4,
                 threshold_mode: str = "rel", cooldown: int = 0, min_lr: float = 0.0, eps: float = 1e-8,
                 step_by: str = "epoch"):
        super().__init__(step_by)
        n = "ReduceLROnPlateau"
        self.mode = check_choice(n, "mode", mode, ("min", "max"))
        self.factor = check_real(n, "factor", factor, 0.0, 1.0, high_open=True)
        self.patience = check_int(n, "patience", patience, 0)
        self.threshold = check_real(n, "threshold", threshold, 0.0)
        self.threshold_mode = check_choice(n, "threshold_mode", threshold_mode, ("rel", "abs"))
        self.cooldown = check_int(n, "cooldown", cooldown, 0)
        self.min_lr = check_real(n, "min_lr", min_lr, 0.0)
        self.eps = check_real(n, "eps", eps, 0.0)
        self.best, self.num_bad_epochs, self.cooldown_counter = None, 0, 0
        self.current_lr, self.last_t = None, None

    def _is_better(self, a: float) -> bool:
        if self.best is None:
            return not math.isnan(a)
        rel = self.threshold_mode == "rel"
        if self.mode == "min":
            return a < (self.best * (1 - self.threshold) if rel else self.best - self.threshold)
        return a > (self.best * (1 + self.threshold) if rel else self.best + self.threshold)

    def _step(self, metric: float) -> None:
        current = float(metric)
        if self._is_better(current):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            new_lr = max(self.current_lr * self.factor, self.min_lr)
            if self.current_lr - new_lr > self.eps:
                self.current_lr = new_lr
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0

    def lr(self, base_lr, *, iteration=0, epoch=0, metric=None):
        t = self._t(iteration, epoch)
        if self.current_lr is None:
            self.current_lr = float(base_lr)
        if metric is not None and (self.last_t is None or t > self.last_t):
            self._step(metric)
            self.last_t = t
        return self.current_lr

    def lr_at(self, base_lr, t):
        raise TypeError("ReduceLROnPlateau has no closed form; call lr(base_lr, epoch=..., metric=...)")

    def _args(self):
        return {"mode": self.mode, "factor": self.factor, "patience": self.patience, "threshold": self.threshold,
                "threshold_mode": self.threshold_mode, "cooldown": self.cooldown, "min_lr": self.min_lr,
                "eps": self.eps}

    _STATE = ("best", "num_bad_epochs", "cooldown_counter", "current_lr", "last_t")

    def state_dict(self):
        return {k: getattr(self, k) for k in self._STATE}

    def load_state_dict(self, state):
        missing = [k for k in self._STATE if k not in state]
        if missing or set(state) - set(self._STATE):
            raise ValueError(f"ReduceLROnPlateau.load_state_dict: expected keys {list(self._STATE)}, "
                             f"got {sorted(state)}")
        for k in self._STATE:
            setattr(self, k, state[k])


def schedule_config(schedule: Schedule) -> dict:
    """``{"class": name, "config": kwargs}`` JSON data for ``schedule`` (state excluded; see ``state_dict``)."""
    return {"class": type(schedule).__name__, "config": schedule.get_config()}


def schedule_from_config(data: dict) -> Schedule:
    """Rebuild a schedule from :func:`schedule_config` output."""
    cls = SCHEDULE_REGISTRY.get(data.get("class"))
    if cls is None:
        raise ValueError(f"schedule_from_config: unknown schedule class {data.get('class')!r}; "
                         f"known: {sorted(SCHEDULE_REGISTRY)}")
    return cls.from_config(data.get("config", {}))
