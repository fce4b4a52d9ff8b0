"""Hyper-parameter validation shared by optimizers and schedules: errors name the owner, the argument,
the allowed range and the received value (like ``torch.optim``'s range checks)."""
from __future__ import annotations

import math
import numbers

__all__ = ["check_real", "check_int", "check_choice", "HYPER_RANGES", "check_hyper"]

_NON_NEGATIVE = {"low": 0.0}
_POSITIVE = {"low": 0.0, "low_open": True}

#: How every optimizer hyper-parameter is checked, by argument name: ``check_real`` bounds, ``bool`` (coerced
#: with ``bool()``) or ``"betas"`` (a pair of reals, each in ``[0, 1)``). One table for all optimizers.
HYPER_RANGES: dict = {
    "lr": _NON_NEGATIVE, "weight_decay": _NON_NEGATIVE, "eps": _NON_NEGATIVE, "momentum": _NON_NEGATIVE,
    "dampening": {}, "alpha": _NON_NEGATIVE, "rho": {"low": 0.0, "high": 1.0}, "lr_decay": _NON_NEGATIVE,
    "initial_accumulator_value": _NON_NEGATIVE, "trust_coefficient": _POSITIVE, "clip_value": _POSITIVE,
    "clip_norm": _POSITIVE, "betas": "betas", "nesterov": bool, "amsgrad": bool, "centered": bool,
}


def check_real(owner: str, arg: str, value, low: float | None = None, high: float | None = None, *,
               low_open: bool = False, high_open: bool = False) -> float:
    """Return ``float(value)`` after checking it is a real number in the given interval.

    Raises
    ------
    TypeError
        If ``value`` is not a real number (bools are rejected).
    ValueError
        If ``value`` is NaN or outside ``[low, high]`` (ends open when ``low_open``/``high_open``).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {arg} must be a real number, got {type(value).__name__} {value!r}")
    v = float(value)
    bad = math.isnan(v)
    if low is not None:
        bad |= v <= low if low_open else v < low
    if high is not None:
        bad |= v >= high if high_open else v > high
    if bad:
        lo_s = "-inf" if low is None else repr(float(low))
        hi_s = "inf" if high is None else repr(float(high))
        interval = ("(" if low_open or low is None else "[") + f"{lo_s}, {hi_s}" + (
            ")" if high_open or high is None else "]")
        raise ValueError(f"{owner}: {arg} must be in {interval}, got {value!r}")
    return v


def check_int(owner: str, arg: str, value, minimum: int = 0) -> int:
    """Return ``int(value)`` after checking it is an integer ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{owner}: {arg} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{owner}: {arg} must be >= {minimum}, got {value!r}")
    return int(value)


def check_choice(owner: str, arg: str, value, choices) -> str:
    """Check ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{owner}: {arg} must be one of {sorted(choices)}, got {value!r}")
    return value


def check_hyper(owner: str, arg: str, value):
    """``value`` checked and converted as :data:`HYPER_RANGES` says for ``arg``: a float, a bool, or for
    ``betas`` a tuple of two floats.

    Raises
    ------
    TypeError
        If a real number is expected and ``value`` is none (or ``betas`` is not a pair).
    ValueError
        If ``value`` is NaN or out of its range (``betas[0]``/``betas[1]`` named separately).
    """
    spec = HYPER_RANGES[arg]
    if spec is bool:
        return bool(value)
    if spec == "betas":
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            raise TypeError(f"{owner}: betas must be a pair (beta1, beta2), got {value!r}")
        return tuple(check_real(owner, f"betas[{i}]", b, 0.0, 1.0, high_open=True) for i, b in enumerate(value))
    return check_real(owner, arg, value, **spec)
