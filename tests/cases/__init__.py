"""Registry of layer and loss test cases; every generic test is driven from here.

Each module in this package defines ``CASES`` (a list of :class:`LayerCase`) and/or ``LOSS_CASES``.
Add a layer by adding a case; the generic tests (shapes, gradient check, PyTorch parity, dtype errors)
pick it up.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class LayerCase:
    """One configuration of one layer.

    make        -> a fresh sparkdl module (float32)
    input_shape -> the input shape used
    out_shape   -> the expected output shape
    torch_make  -> a fresh equivalent ``torch.nn.Module`` with the same state-dict key names, or None
    training    -> run in training mode
    positive    -> draw inputs from U(0.5, 2) instead of N(0, 1) (e.g. for sqrt/log domains)
    gradcheck   -> run the float64 finite-difference check
    inputs      -> ``inputs(rng, dtype)`` builds the input instead of N(0, 1) / U(0.5, 2) (e.g. token ids)
    integer_input -> the input is indices: no input gradient is checked (``backward`` returns None)
    bad_dtype   -> the input is cast to this dtype for the wrong-dtype test (default int64)
    """

    id: str
    make: Callable
    input_shape: tuple
    out_shape: tuple
    torch_make: Callable | None = None
    training: bool = False
    positive: bool = False
    gradcheck: bool = True
    rtol: float = 1e-5
    atol: float = 1e-6
    inputs: Callable | None = None
    integer_input: bool = False
    bad_dtype: str = "int64"
    extra: dict = field(default_factory=dict)


@dataclass
class LossCase:
    """One configuration of one loss: ``make()`` -> loss; ``inputs(rng)`` -> (input float32, target);
    ``torch_make`` -> equivalent torch loss; ``torch_target`` converts the target for torch."""

    id: str
    make: Callable
    inputs: Callable
    torch_make: Callable | None = None
    torch_target: Callable | None = None
    rtol: float = 1e-5
    atol: float = 1e-6


def _collect(attr):
    out = []
    for info in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{info.name}")
        out.extend(getattr(mod, attr, []))
    return out


def all_layer_cases():
    return _collect("CASES")


def all_loss_cases():
    return _collect("LOSS_CASES")
