"""Parameter groups: per-tensor overrides of ``lr`` / ``weight_decay`` and freezing, as segments of the flat vector.

A parameter group is a dict ::

    {"params": <selector>, "lr": 0.1, "weight_decay": 0.0, "frozen": False}

where the selector is a list of tensor names, a regular expression (``re.search`` on each name; anchor
with ``^...$`` for an exact match) or a callable ``name -> bool``. Every other key is optional. Names not
selected by any group use the optimizer's defaults. :func:`resolve_param_groups` turns the groups into
*runs*: maximal contiguous ranges ``[start, stop)`` of the flat vector that share one group, so any shard
``[lo, hi)`` is handled by slicing the runs (see :meth:`sparkdl.optim.Optimizer.update`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from sparkdl.nn.layout import Layout
from sparkdl.optim._checks import check_real

__all__ = ["ParamGroup", "resolve_param_groups", "no_weight_decay_on_bias_and_norm"]

_KEYS = ("params", "lr", "weight_decay", "frozen")


@dataclass(frozen=True)
class ParamGroup:
    """One resolved group: the selected names (flat order) and its overrides (``None`` = optimizer default)."""

    names: tuple
    lr: float | None = None
    weight_decay: float | None = None
    frozen: bool = False

    def to_config(self) -> dict:
        """JSON data that :func:`resolve_param_groups` accepts back."""
        out = {"params": list(self.names)}
        if self.lr is not None:
            out["lr"] = self.lr
        if self.weight_decay is not None:
            out["weight_decay"] = self.weight_decay
        if self.frozen:
            out["frozen"] = True
        return out


def _select(owner: str, index: int, selector, layout: Layout) -> list[str]:
    names = layout.names()
    if isinstance(selector, str):
        try:
            pattern = re.compile(selector)
        except re.error as exc:
            raise ValueError(f"{owner}: param_groups[{index}]['params'] is not a valid regex {selector!r}: {exc}")
        return [n for n in names if pattern.search(n)]
    if callable(selector):
        return [n for n in names if selector(n)]
    if isinstance(selector, (list, tuple)):
        wanted = list(selector)
        bad = [n for n in wanted if not isinstance(n, str)]
        if bad:
            raise TypeError(f"{owner}: param_groups[{index}]['params'] must list str names, got {bad[:5]!r}")
        unknown = [n for n in wanted if n not in layout]
        if unknown:
            raise ValueError(f"{owner}: param_groups[{index}] names unknown parameters {unknown[:10]}; "
                             f"known names are {names[:10]}{' ...' if len(names) > 10 else ''}")
        chosen = set(wanted)
        return [n for n in names if n in chosen]
    raise TypeError(f"{owner}: param_groups[{index}]['params'] must be a list of names, a regex str or a "
                    f"callable name -> bool, got {type(selector).__name__}")


def resolve_param_groups(owner: str, layout: Layout, param_groups) -> tuple[list[ParamGroup], tuple]:
    """Resolve group specs against ``layout``.

    Returns
    -------
    groups : list of ParamGroup
        ``groups[0]`` is the default group (every name no spec selected); ``groups[i + 1]`` is
        ``param_groups[i]``.
    runs : (starts, stops, group_ids)
        int64 arrays of maximal same-group ranges of the flat vector, in order, covering every element.

    Raises
    ------
    TypeError
        If ``param_groups`` is not a list of dicts, or a selector has the wrong type.
    ValueError
        On an unknown key or name, a group selecting nothing, a name selected by two groups, or a
        negative ``lr``/``weight_decay``.
    """
    if not isinstance(layout, Layout):
        raise TypeError(f"{owner}.configure: layout must be a sparkdl.nn.Layout, got {type(layout).__name__}")
    specs = [] if param_groups is None else param_groups
    if isinstance(specs, dict) or not isinstance(specs, (list, tuple)):
        raise TypeError(f"{owner}: param_groups must be a list of dicts, got {type(param_groups).__name__}")
    owner_of: dict[str, int] = {}
    groups = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, dict):
            raise TypeError(f"{owner}: param_groups[{i}] must be a dict, got {type(spec).__name__}")
        extra = sorted(set(spec) - set(_KEYS))
        if extra or "params" not in spec:
            raise ValueError(f"{owner}: param_groups[{i}] allows keys {list(_KEYS)} ('params' required), "
                             f"got {sorted(spec)}")
        names = _select(owner, i, spec["params"], layout)
        if not names:
            raise ValueError(f"{owner}: param_groups[{i}] selects no parameter (selector {spec['params']!r})")
        for n in names:
            if n in owner_of:
                raise ValueError(f"{owner}: parameter {n!r} is selected by param_groups[{owner_of[n]}] and "
                                 f"param_groups[{i}]; each name may belong to at most one group")
            owner_of[n] = i
        lr = spec.get("lr")
        wd = spec.get("weight_decay")
        groups.append(ParamGroup(
            names=tuple(names),
            lr=None if lr is None else check_real(owner, f"param_groups[{i}]['lr']", lr, 0.0),
            weight_decay=None if wd is None else check_real(owner, f"param_groups[{i}]['weight_decay']", wd, 0.0),
            frozen=bool(spec.get("frozen", False))))
    default = ParamGroup(names=tuple(n for n in layout.names() if n not in owner_of))
    starts, stops, gids = [], [], []
    for entry in layout:
        if entry.size == 0:
            continue
        g = owner_of.get(entry.name, -1) + 1
        if gids and gids[-1] == g and stops[-1] == entry.offset:
            stops[-1] = entry.stop
        else:
            starts.append(entry.offset)
            stops.append(entry.stop)
            gids.append(g)
    runs = (np.asarray(starts, np.int64), np.asarray(stops, np.int64), np.asarray(gids, np.int64))
    return [default] + groups, runs


def no_weight_decay_on_bias_and_norm(layout: Layout) -> list[dict]:
    """The usual preset: no weight decay on biases and normalization weights.

    Selects every tensor whose name ends in ``bias`` or that has at most one dimension (biases,
    BatchNorm/LayerNorm ``weight``/``bias``, scalars) and returns ``[{"params": names, "weight_decay": 0.0}]``,
    or ``[]`` when no tensor qualifies. Pass the result as ``param_groups`` to
    :meth:`~sparkdl.optim.Optimizer.configure` (extend the list with further groups if needed).
    """
    if not isinstance(layout, Layout):
        raise TypeError(f"no_weight_decay_on_bias_and_norm: layout must be a sparkdl.nn.Layout, "
                        f"got {type(layout).__name__}")
    names = [e.name for e in layout if e.name.endswith("bias") or len(e.shape) <= 1]
    return [{"params": names, "weight_decay": 0.0}] if names else []
