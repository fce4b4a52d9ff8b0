"""The optimizer contract: update one shard ``[lo, hi)`` of the flat parameter vector in place.

The distributed engine splits the flat parameter vector into shards; each shard's optimizer state lives
with the shard (see ``DESIGN.md``). An :class:`Optimizer` therefore never sees a whole model: it sees

* ``init_state(lo, hi)`` -> a plain dict of numpy arrays of length ``hi - lo`` plus ``"step"`` (an int);
* ``update(params, grads, state, lo)`` -> ``params`` (= ``flat[lo:hi]``) updated in place from the averaged
  gradient shard ``grads``.

All math is element-wise (numba kernels, parallel over elements), so updating the whole vector equals
updating its shards one by one, bit for bit. The layer-wise optimizers (LARS, LAMB) also need per-tensor norms
of whole tensors: a partial-norms pass over every shard first (:mod:`sparkdl.optim.trust`), exact, so they keep
the same property. The base class owns what is common: hyper-parameter checks,
parameter groups (per-tensor ``lr``/``weight_decay`` overrides and freezing, see
:mod:`sparkdl.optim.groups`), gradient clipping and the optional schedule; a subclass writes only its
state names and its kernel call (:meth:`Optimizer._apply`).

Hyper-parameters: a subclass passes its constructor arguments to :meth:`Optimizer._set_hyper`, which checks
each one as the table :data:`sparkdl.optim._checks.HYPER_RANGES` says and stores it under its own name;
:meth:`Optimizer.get_config` reads them back by the constructor's signature, so every named constructor
argument must be stored under that name.
"""
from __future__ import annotations

import inspect
import math
from typing import NamedTuple

import numpy as np

from sparkdl.nn.layout import Layout
from sparkdl.optim._checks import check_hyper, check_int
from sparkdl.optim.clip import clip_coef, partial_sq_norm
from sparkdl.optim.groups import ParamGroup, resolve_param_groups
from sparkdl.optim.schedules import Schedule, schedule_config, schedule_from_config

__all__ = ["Optimizer", "Segments", "OPTIMIZER_REGISTRY", "optimizer_config", "optimizer_from_config"]

#: Every Optimizer subclass by class name; :func:`optimizer_from_config` resolves names only here.
OPTIMIZER_REGISTRY: dict[str, type] = {}


class Segments(NamedTuple):
    """The non-frozen parts of one shard: ``params[lo[k]:hi[k]]`` uses learning rate ``lr[k]`` and weight
    decay ``weight_decay[k]`` (shard-relative int64 bounds, float64 hyper-parameters)."""

    lo: np.ndarray
    hi: np.ndarray
    lr: np.ndarray
    weight_decay: np.ndarray


class Optimizer:
    """Base class of shard-wise optimizers.

    Parameters
    ----------
    lr : float
        Base learning rate, ``>= 0``.
    weight_decay : float
        Default weight decay, ``>= 0`` (L2 added to the gradient, or decoupled for AdamW).
    schedule : Schedule, optional
        Learning-rate schedule, evaluated by the caller (the driver) through :meth:`lr_at`; the resulting
        rate is passed to :meth:`update` as ``lr``.
    clip_value : float, optional
        Clamp every gradient element to ``[-clip_value, clip_value]`` before the update (``> 0``).
    clip_norm : float, optional
        Scale the gradient so its global L2 norm is at most ``clip_norm`` (``> 0``), as
        ``torch.nn.utils.clip_grad_norm_``. Frozen elements do not count. On a shard, pass the global
        squared norm to :meth:`update` (``grad_sq_norm``; the sum over shards of :meth:`partial_sq_norm`).
        At most one of ``clip_value`` and ``clip_norm`` may be set.

    Notes
    -----
    Parameter groups (:meth:`configure`): a group's ``lr`` is its base rate; at every step it is scaled by
    the same factor the schedule applies to the default rate, ``lr_group * lr / self.lr`` (used unscaled
    when ``self.lr == 0``). This equals PyTorch's per-group scheduling for every multiplicative schedule.
    """

    #: Names of the per-element state arrays (subclasses; may depend on options).
    state_names: tuple = ()

    #: Whether :meth:`update` of a partial shard needs per-tensor norms from every shard (LARS, LAMB: see
    #: :mod:`sparkdl.optim.trust`); the engine then runs the partial-norms pass before the update.
    needs_tensor_norms: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        OPTIMIZER_REGISTRY[cls.__name__] = cls

    def __init__(self, lr: float, weight_decay: float = 0.0, *, schedule: Schedule | None = None,
                 clip_value: float | None = None, clip_norm: float | None = None):
        name = type(self).__name__
        self._set_hyper(lr=lr, weight_decay=weight_decay)
        if schedule is not None and not isinstance(schedule, Schedule):
            raise TypeError(f"{name}: schedule must be a sparkdl.optim.schedules.Schedule or None, "
                            f"got {type(schedule).__name__}")
        self.schedule = schedule
        self.clip_value = None if clip_value is None else check_hyper(name, "clip_value", clip_value)
        self.clip_norm = None if clip_norm is None else check_hyper(name, "clip_norm", clip_norm)
        if self.clip_value is not None and self.clip_norm is not None:
            raise ValueError(f"{name}: set at most one of clip_value and clip_norm, got clip_value={clip_value} "
                             f"and clip_norm={clip_norm}")
        self.layout: Layout | None = None
        self._set_groups([ParamGroup(names=())],
                         (np.zeros(1, np.int64), np.full(1, np.iinfo(np.int64).max, np.int64), np.zeros(1, np.int64)))

    def _set_hyper(self, **values) -> None:
        """Check every hyper-parameter as :data:`~sparkdl.optim._checks.HYPER_RANGES` says (in the order
        given) and store it as the attribute of the same name."""
        name = type(self).__name__
        for arg, value in values.items():
            setattr(self, arg, check_hyper(name, arg, value))

    # ------------------------------------------------------------------ groups
    def configure(self, layout: Layout, param_groups: list[dict] | None = None) -> "Optimizer":
        """Bind the optimizer to a parameter layout, with optional per-tensor groups.

        Parameters
        ----------
        layout : sparkdl.nn.Layout
            ``model.parameter_layout``: name -> (offset, shape) over the flat vector.
        param_groups : list of dict, optional
            ``{"params": names | regex | callable, "lr": float, "weight_decay": float, "frozen": bool}``;
            see :mod:`sparkdl.optim.groups`. A name may be selected by at most one group.

        Returns
        -------
        self

        Raises
        ------
        TypeError, ValueError
            See :func:`sparkdl.optim.groups.resolve_param_groups`.
        """
        groups, runs = resolve_param_groups(type(self).__name__, layout, param_groups)
        self._set_groups(groups, runs)
        self.layout = layout
        return self

    def _set_groups(self, groups: list[ParamGroup], runs: tuple) -> None:
        self.groups, self._runs, self._shard_cache = groups, runs, {}
        self._g_frozen = np.array([g.frozen for g in groups], bool)
        self._g_lr = np.array([np.nan if g.lr is None else g.lr for g in groups], np.float64)
        self._g_wd = np.array([self.weight_decay if g.weight_decay is None else g.weight_decay for g in groups],
                              np.float64)

    def param_groups_config(self) -> list[dict] | None:
        """The configured groups as JSON data (explicit name lists), or None without groups."""
        return [g.to_config() for g in self.groups[1:]] or None

    def segments(self, lo: int, hi: int, lr: float | None = None) -> Segments:
        """The non-frozen segments of shard ``[lo, hi)`` with their effective lr and weight decay."""
        current = self.lr if lr is None else lr
        key = (lo, hi)
        cached = self._shard_cache.get(key)
        if cached is None:
            starts, stops, gids = self._runs
            m = (stops > lo) & (starts < hi) & ~self._g_frozen[gids]
            cached = (np.maximum(starts[m], lo) - lo, np.minimum(stops[m], hi) - lo, gids[m])
            if len(self._shard_cache) < 1024:
                self._shard_cache[key] = cached
        seg_lo, seg_hi, gids = cached
        if len(self.groups) == 1:
            g_lr = np.array([current])
        else:
            scale = current / self.lr if self.lr > 0 else 1.0
            g_lr = np.where(np.isnan(self._g_lr), current, self._g_lr * scale)
        return Segments(seg_lo, seg_hi, g_lr[gids], self._g_wd[gids])

    # ------------------------------------------------------------------ state
    def _init_value(self, name: str) -> float:
        return 0.0

    def init_state(self, lo: int, hi: int, dtype=np.float32) -> dict:
        """Fresh state of shard ``[lo, hi)``: ``{"step": 0, <state_name>: array(hi - lo), ...}``."""
        lo, hi = self._check_bounds(lo, hi)
        state = {"step": 0}
        for name in self.state_names:
            state[name] = np.full(hi - lo, self._init_value(name), dtype=dtype)
        return state

    def _check_bounds(self, lo, hi) -> tuple[int, int]:
        name = type(self).__name__
        lo = check_int(name, "lo", lo, 0)
        hi = check_int(name, "hi", hi, lo)
        if self.layout is not None and hi > self.layout.size:
            raise ValueError(f"{name}: shard [{lo}, {hi}) exceeds the configured layout of {self.layout.size} "
                             f"elements")
        return lo, hi

    # ------------------------------------------------------------------ update
    def partial_sq_norm(self, grads: np.ndarray, lo: int = 0) -> float:
        """Squared L2 norm (float64) of the non-frozen part of gradient shard ``grads`` = ``g[lo:lo+n]``.

        Summed over all shards it is the global squared norm :meth:`update` needs for ``clip_norm``.
        """
        seg = self.segments(lo, lo + grads.shape[0])
        if len(seg.lo) == 1 and seg.lo[0] == 0 and seg.hi[0] == grads.shape[0]:
            return partial_sq_norm(grads)
        return math.fsum(partial_sq_norm(grads[a:b]) for a, b in zip(seg.lo, seg.hi))

    def update(self, params: np.ndarray, grads: np.ndarray, state: dict, lo: int = 0, lr: float | None = None,
               *, grad_sq_norm: float | None = None) -> None:
        """Update the parameter shard ``params`` (= ``flat[lo:lo+n]``) in place; increment ``state["step"]``.

        Parameters
        ----------
        params : ndarray, shape (n,), float32 (or float64), contiguous, writeable
        grads : ndarray, shape (n,), same dtype
            The averaged gradient of the same shard (not modified).
        state : dict
            From :meth:`init_state` for the same shard (or loaded back from ``np.savez``).
        lo : int
            Offset of the shard in the flat vector (selects parameter groups).
        lr : float, optional
            Learning rate for this step (the schedule's value); default ``self.lr``.
        grad_sq_norm : float, optional
            Global squared gradient norm (sum of :meth:`partial_sq_norm` over shards), needed with
            ``clip_norm`` unless the shard is the whole vector.

        Raises
        ------
        TypeError, ValueError
            On mismatched shapes/dtypes/state, a negative ``lr``, or ``clip_norm`` on a partial shard
            without ``grad_sq_norm``.
        """
        step, seg, gscale, gclip = self._prepare(params, grads, state, lo, lr, grad_sq_norm)
        self._apply(params, grads, state, step, seg, gscale, gclip)
        state["step"] = step

    def _prepare(self, params, grads, state, lo, lr, grad_sq_norm):
        """Validate an update's arguments; return its ``(step, segments, gscale, gclip)`` (state untouched)."""
        name = type(self).__name__
        n = self._check_update_args(params, grads, state)
        lo, hi = self._check_bounds(lo, lo + n)
        current = self.lr if lr is None else check_hyper(name, "lr", lr)
        gscale = 1.0
        if self.clip_norm is not None:
            if grad_sq_norm is None:
                if lo != 0 or (self.layout is not None and hi != self.layout.size):
                    raise ValueError(f"{name}: clip_norm on shard [{lo}, {hi}) needs grad_sq_norm, the sum over "
                                     f"all shards of opt.partial_sq_norm(grad_shard, lo)")
                grad_sq_norm = self.partial_sq_norm(grads, lo)
            gscale = clip_coef(grad_sq_norm, self.clip_norm)
        gclip = math.inf if self.clip_value is None else self.clip_value
        dt = params.dtype.type
        return int(state["step"]) + 1, self.segments(lo, hi, current), dt(gscale), dt(gclip)

    def _check_update_args(self, params, grads, state) -> int:
        name = type(self).__name__
        for arg, a in (("params", params), ("grads", grads)):
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{name}.update: {arg} must be a numpy.ndarray, got {type(a).__name__}")
            if a.dtype not in (np.float32, np.float64):
                raise TypeError(f"{name}.update: {arg} must be float32 or float64, got {a.dtype}")
            if a.ndim != 1 or not a.flags.c_contiguous:
                raise ValueError(f"{name}.update: {arg} must be a contiguous 1-D shard, got shape {a.shape}")
        if grads.shape != params.shape or grads.dtype != params.dtype:
            raise ValueError(f"{name}.update: grads {grads.shape}/{grads.dtype} must match params "
                             f"{params.shape}/{params.dtype}")
        if not params.flags.writeable:
            raise ValueError(f"{name}.update: params must be writeable (it is updated in place)")
        if not isinstance(state, dict) or "step" not in state:
            raise TypeError(f"{name}.update: state must be the dict from init_state (with 'step')")
        for key in self.state_names:
            s = state.get(key)
            if not isinstance(s, np.ndarray) or s.shape != params.shape or s.dtype != params.dtype \
                    or not s.flags.c_contiguous or not s.flags.writeable:
                got = "missing" if s is None else f"{getattr(s, 'shape', None)}/{getattr(s, 'dtype', type(s))}"
                raise ValueError(f"{name}.update: state[{key!r}] must be a writeable contiguous array of shape "
                                 f"{params.shape} and dtype {params.dtype}, got {got}")
        return params.shape[0]

    def _apply(self, params, grads, state, step: int, seg: Segments, gscale, gclip) -> None:
        """Run the kernel on ``seg`` (subclasses). ``gscale``/``gclip`` are in ``params.dtype``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ schedule and config
    def lr_at(self, iteration: int = 0, epoch: int = 0, metric: float | None = None) -> float:
        """Learning rate for a step: ``schedule.lr(self.lr, ...)``, or ``self.lr`` without a schedule."""
        if self.schedule is None:
            return self.lr
        return self.schedule.lr(self.lr, iteration=iteration, epoch=epoch, metric=metric)

    def _hyper(self) -> dict:
        """The constructor's named arguments, in signature order, as JSON data (the attributes of the same
        names; tuples as lists). ``schedule``, ``clip_value`` and ``clip_norm`` are keyword-only: not here."""
        names = [p.name for p in inspect.signature(type(self).__init__).parameters.values()
                 if p.kind is p.POSITIONAL_OR_KEYWORD][1:]  # without self
        return {n: list(v) if isinstance(v := getattr(self, n), tuple) else v for n in names}

    def get_config(self) -> dict:
        """Constructor keyword arguments as JSON data (the schedule as ``{"class", "config"}``)."""
        return {**self._hyper(), "schedule": None if self.schedule is None else schedule_config(self.schedule),
                "clip_value": self.clip_value, "clip_norm": self.clip_norm}

    @classmethod
    def from_config(cls, config: dict) -> "Optimizer":
        """Rebuild from :meth:`get_config` output."""
        config = dict(config)
        if config.get("schedule") is not None:
            config["schedule"] = schedule_from_config(config["schedule"])
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._hyper().items())
        return f"{type(self).__name__}({args})"


def optimizer_config(opt: Optimizer) -> dict:
    """Everything that rebuilds ``opt`` as JSON data: ``{"class", "config", "param_groups"}``."""
    return {"class": type(opt).__name__, "config": opt.get_config(), "param_groups": opt.param_groups_config()}


def optimizer_from_config(data: dict, layout: Layout | None = None) -> Optimizer:
    """Rebuild an optimizer from :func:`optimizer_config` output (configured on ``layout`` when given).

    Raises
    ------
    ValueError
        On an unknown class name, or saved param_groups without a ``layout`` to resolve them on.
    """
    cls = OPTIMIZER_REGISTRY.get(data.get("class"))
    if cls is None:
        raise ValueError(f"optimizer_from_config: unknown optimizer class {data.get('class')!r}; "
                         f"known: {sorted(OPTIMIZER_REGISTRY)}")
    opt = cls.from_config(data.get("config", {}))
    groups = data.get("param_groups")
    if groups and layout is None:
        raise ValueError("optimizer_from_config: the config has param_groups; pass layout= to resolve them")
    if layout is not None:
        opt.configure(layout, groups)
    return opt
