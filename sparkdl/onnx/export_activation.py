"""ONNX exporters of the activations beyond :mod:`sparkdl.onnx.export_ops`, registered into its
:data:`~sparkdl.onnx.export_ops.EXPORTERS`, each as ``torch.onnx.export`` writes the PyTorch layer:

- :class:`~sparkdl.nn.Hardtanh` and :class:`~sparkdl.nn.ReLU6` -> ``Clip`` with constant bounds (an unbounded
  side has no input);
- :class:`~sparkdl.nn.Hardsigmoid` -> ``HardSigmoid(alpha=1/6, beta=1/2)``; :class:`~sparkdl.nn.Hardswish` ->
  ``HardSwish`` (opset 14 and later; ``x * HardSigmoid(x)`` at opset 13);
- :class:`~sparkdl.nn.SiLU` -> ``x * Sigmoid(x)``; :class:`~sparkdl.nn.PReLU` -> ``PRelu`` with the slopes
  shaped ``(C, 1, ..., 1)`` to broadcast over axis 1;
- :class:`~sparkdl.nn.Softplus` -> ``Softplus`` (beta 1, threshold 20 or more: the threshold then changes the
  output by less than float32 rounding), else ``Where(beta * x > threshold, x, Softplus(beta * x) / beta)``.
"""
from __future__ import annotations

import math

import numpy as np

from sparkdl import nn
from sparkdl.onnx.export_ops import EXPORTERS, _join, _param

__all__: list[str] = []  # exporters register themselves


def _hardtanh(m, path, x, shape, em):
    bounds = [em.tensor(_join(path, name), np.float32(v)) if not math.isinf(v) else ""
              for name, v in (("min", m.min_val), ("max", m.max_val))]
    while bounds and bounds[-1] == "":
        bounds.pop()
    return em.node("Clip", [x, *bounds], path)


def _hardsigmoid(m, path, x, shape, em):
    return em.node("HardSigmoid", [x], path, alpha=1.0 / 6.0, beta=0.5)


def _hardswish(m, path, x, shape, em):
    if em.opset < 14:
        return em.node("Mul", [x, _hardsigmoid(m, path, x, shape, em)], path)
    return em.node("HardSwish", [x], path)


def _silu(m, path, x, shape, em):
    return em.node("Mul", [x, em.node("Sigmoid", [x], path)], path)


def _prelu(m, path, x, shape, em):
    count = m.weight.shape[0]
    slope = m.weight if count == 1 else np.asarray(m.weight).reshape((count,) + (1,) * (len(shape) - 2))
    return em.node("PRelu", [x, em.tensor(_join(path, "weight"), slope)], path)


def _softplus(m, path, x, shape, em):
    if m.beta == 1.0 and m.threshold >= 20.0:
        return em.node("Softplus", [x], path)
    z = em.node("Mul", [x, em.tensor(_join(path, "beta"), np.float32(m.beta))], path)
    soft = em.node("Div", [em.node("Softplus", [z], path), em.tensor(_join(path, "beta"), np.float32(m.beta))],
                   path)
    linear = em.node("Greater", [z, em.tensor(_join(path, "threshold"), np.float32(m.threshold))], path)
    return em.node("Where", [linear, x, soft], path)


EXPORTERS.update({nn.Hardtanh: _hardtanh, nn.ReLU6: _hardtanh, nn.Hardsigmoid: _hardsigmoid,
                  nn.Hardswish: _hardswish, nn.SiLU: _silu, nn.PReLU: _prelu, nn.Softplus: _softplus})
