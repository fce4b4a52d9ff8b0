"""Registry cases: Hardtanh, ReLU6, Hardsigmoid, Hardswish (gradients, PyTorch parity, persistence).

Inputs are N(0, 1) scaled by 4 (``inputs``), so every linear piece and both saturated ends are exercised."""
import numpy as np
import torch

from sparkdl import nn
from tests.cases import LayerCase


def _spread(scale):
    """Inputs ~ N(0, scale^2), kept 1e-3 away from the kinks (the finite differences would straddle them)."""
    kinks = np.array([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 6.0])

    def make(rng, dtype, shape):
        x = rng.standard_normal(shape) * scale
        near = np.abs(x[..., None] - kinks).min(-1) < 1e-3
        return np.where(near, x + 2e-3, x).astype(dtype)
    return make


def _act(id, make, torch_make, shape=(3, 4, 5), scale=4.0):
    spread = _spread(scale)
    return LayerCase(id, make, shape, shape, torch_make, inputs=lambda rng, dtype: spread(rng, dtype, shape))


CASES = [
    _act("hardtanh", lambda: nn.Hardtanh(), lambda: torch.nn.Hardtanh(), scale=2.0),
    _act("hardtanh-range", lambda: nn.Hardtanh(-0.5, 3.0), lambda: torch.nn.Hardtanh(-0.5, 3.0), (7, 3)),
    _act("hardtanh-no-upper", lambda: nn.Hardtanh(0.0, float("inf")), lambda: torch.nn.Hardtanh(0.0, float("inf")),
         (5,)),
    _act("relu6", lambda: nn.ReLU6(), lambda: torch.nn.ReLU6(), (2, 3, 4, 5)),
    _act("hardsigmoid", lambda: nn.Hardsigmoid(), lambda: torch.nn.Hardsigmoid()),
    _act("hardsigmoid-4d", lambda: nn.Hardsigmoid(), lambda: torch.nn.Hardsigmoid(), (2, 3, 1, 1)),
    _act("hardswish", lambda: nn.Hardswish(), lambda: torch.nn.Hardswish()),
    _act("hardswish-4d", lambda: nn.Hardswish(), lambda: torch.nn.Hardswish(), (2, 4, 3, 3)),
]
