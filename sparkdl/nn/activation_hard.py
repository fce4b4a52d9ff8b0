"""Piecewise-linear activation layers (no parameters): :class:`Hardtanh`, :class:`ReLU6`, :class:`Hardsigmoid`,
:class:`Hardswish` -- the activations of MobileNetV2 (ReLU6) and MobileNetV3 (Hardswish, Hardsigmoid in its
squeeze-excitation blocks).

They follow PyTorch's names, defaults and gradients (``torch.nn.<Name>``), including the gradient at the kinks;
none has an ``inplace`` option. Input: any shape of the layer's dtype; output: the same shape.
"""
from __future__ import annotations

import math

from sparkdl.kernels import activation_hard as K
from sparkdl.nn.activation import _Elementwise, _real

__all__ = ["Hardtanh", "ReLU6", "Hardsigmoid", "Hardswish"]


class Hardtanh(_Elementwise):
    r"""Clamp to a range, :math:`y = \min(\max(x, \text{min\_val}), \text{max\_val})`.

    Parameters
    ----------
    min_val : float or None, default -1
        Lower bound (``None`` or ``-inf`` for none).
    max_val : float or None, default 1
        Upper bound (``None`` or ``inf`` for none); must be greater than ``min_val``.

    Shape: (*) → (*). The gradient passes where ``min_val < x < max_val`` (0 at the bounds, as PyTorch).

    Raises
    ------
    TypeError
        If a bound is not a real number or None, or the input is not an array of the layer's dtype.
    ValueError
        If a bound is NaN or ``max_val <= min_val``.

    References
    ----------
    ``torch.nn.Hardtanh``; the ONNX ``Clip`` operator (which imports as this layer).
    """

    _cache_output = False
    _kernels = (K.hardtanh_forward, K.hardtanh_backward)
    _params = ("min_val", "max_val")

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0):
        super().__init__()
        name = type(self).__name__
        self.min_val = -math.inf if min_val is None else _real(name, "min_val", min_val)
        self.max_val = math.inf if max_val is None else _real(name, "max_val", max_val)
        if math.isnan(self.min_val) or math.isnan(self.max_val) or not self.max_val > self.min_val:
            raise ValueError(f"{name}: max_val must be greater than min_val (neither NaN), got min_val="
                             f"{self.min_val}, max_val={self.max_val}")

    def get_config(self):
        # JSON has no infinity: an unbounded side is None
        return {p: None if math.isinf(getattr(self, p)) else getattr(self, p) for p in self._params}


class ReLU6(Hardtanh):
    r"""ReLU capped at 6, :math:`y = \min(\max(x, 0), 6)` (MobileNetV2's activation): a :class:`Hardtanh`
    from 0 to 6.

    Shape: (*) → (*). Reference: Sandler et al., 2018, "MobileNetV2: Inverted Residuals and Linear
    Bottlenecks"; ``torch.nn.ReLU6``.
    """

    def __init__(self):
        super().__init__(0.0, 6.0)

    def get_config(self):
        return {}


class Hardsigmoid(_Elementwise):
    r"""Piecewise-linear sigmoid, :math:`y = \mathrm{ReLU6}(x + 3) / 6`: 0 below -3, 1 above 3.

    Shape: (*) → (*). The gradient is 1/6 strictly inside (-3, 3), else 0.
    References: Howard et al., 2019, "Searching for MobileNetV3"; ``torch.nn.Hardsigmoid``; the ONNX
    ``HardSigmoid`` operator with ``alpha = 1/6, beta = 1/2``.
    """

    _cache_output = False
    _kernels = (K.hardsigmoid_forward, K.hardsigmoid_backward)


class Hardswish(_Elementwise):
    r"""Piecewise-quadratic swish, :math:`y = x \cdot \mathrm{ReLU6}(x + 3) / 6`: 0 below -3, ``x`` above 3.

    Shape: (*) → (*). References: Howard et al., 2019, "Searching for MobileNetV3"; ``torch.nn.Hardswish``;
    the ONNX ``HardSwish`` operator.
    """

    _cache_output = False
    _kernels = (K.hardswish_forward, K.hardswish_backward)
