"""Shared pieces of the zoo builders: argument checks that name the argument, a chain of named nodes as a
:class:`~sparkdl.nn.Graph` (so parameter names are PyTorch's attribute paths, not Sequential's 0, 1, ...) and the
Conv2d-BatchNorm2d(-activation) unit of torchvision's ``Conv2dNormActivation``."""
from __future__ import annotations

import numbers

from sparkdl import nn
from sparkdl.nn._checks import check_bool, check_positive_int as check_int

__all__ = ["check_int", "check_bool", "check_probability", "check_choice", "check_widths", "chain", "conv_bn"]


def check_probability(builder: str, arg: str, value) -> float:
    """``value`` as a float in [0, 1) (a dropout probability)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
        raise ValueError(f"{builder}: {arg} must be a number in [0, 1), got {value!r}")
    return float(value)


def check_choice(builder: str, arg: str, value, allowed) -> str:
    if value not in allowed:
        raise ValueError(f"{builder}: {arg} must be one of {list(allowed)}, got {value!r}")
    return value


def check_widths(builder: str, arg: str, value, min_len: int = 1) -> tuple:
    """A non-empty tuple of positive ints (layer widths)."""
    if not isinstance(value, (tuple, list)) or len(value) < min_len:
        raise TypeError(f"{builder}: {arg} must be a tuple of at least {min_len} positive ints, got {value!r}")
    return tuple(check_int(builder, f"{arg}[{i}]", v) for i, v in enumerate(value))


def chain(nodes, inputs="x") -> nn.Graph:
    """A Graph applying ``nodes`` ((name, module) pairs) one after the other to ``inputs``."""
    out, prev = [], inputs
    for name, module in nodes:
        out.append((name, module, prev))
        prev = name
    return nn.Graph(inputs, out, prev)


def conv_bn(cin: int, cout: int, kernel_size: int = 3, stride: int = 1, groups: int = 1, activation=None,
            eps: float = 1e-5, momentum: float = 0.1) -> nn.Sequential:
    """``Sequential(Conv2d(bias=False, padding=(k-1)//2), BatchNorm2d[, activation])``: children 0, 1, 2 as in
    torchvision's ``Conv2dNormActivation``."""
    layers = [nn.Conv2d(cin, cout, kernel_size, stride, (kernel_size - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout, eps=eps, momentum=momentum)]
    if activation is not None:
        layers.append(activation())
    return nn.Sequential(*layers)
