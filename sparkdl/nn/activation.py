"""Activation layers (no parameters). Inputs of any shape; output has the input's shape."""
from __future__ import annotations

import numpy as np

from sparkdl.kernels import activation as K
from sparkdl.nn.module import Module

__all__ = ["ReLU"]


def _check_float(layer, x):
    name = type(layer).__name__
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name}: input must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype != layer.dtype:
        raise TypeError(f"{name}: input dtype must be {layer.dtype}, got {x.dtype}")


class ReLU(Module):
    r"""Rectified linear unit, :math:`y = \max(0, x)`. Shape: (*) → (*). Reference: ``torch.nn.ReLU``."""

    def forward(self, x, *, training=False, rng=None):
        _check_float(self, x)
        x = np.ascontiguousarray(x)
        y = K.relu_forward(x.reshape(-1)).reshape(x.shape)
        return y, y

    def backward(self, cache, grad_y, grad_params):
        y = cache
        return K.relu_backward(y.reshape(-1), np.ascontiguousarray(grad_y).reshape(-1)).reshape(y.shape)
