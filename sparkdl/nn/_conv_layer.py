"""The set-up every convolution layer shares (:class:`~sparkdl.nn.Conv1d`, :class:`~sparkdl.nn.Conv2d`,
:class:`~sparkdl.nn.ConvTranspose2d`): channel and group checks, the bias flag, the weight and bias parameters
with PyTorch's default initialisation, and the bias gradient."""
from __future__ import annotations

import numpy as np

from sparkdl.kernels import conv as K
from sparkdl.nn import init
from sparkdl.nn._checks import check_bool, check_positive_int
from sparkdl.nn.module import Module

__all__ = ["_ConvLayer"]


class _ConvLayer(Module):
    """Base of the convolution layers (private: not an architecture of its own).

    A subclass's ``__init__`` calls :meth:`_check_channels` first, checks its window arguments, then calls
    :meth:`_check_groups` and :meth:`_add_parameters`. Error messages name the subclass.
    """

    def _check_channels(self, in_channels, out_channels) -> None:
        """Set ``in_channels`` and ``out_channels`` (positive ints; TypeError/ValueError otherwise)."""
        name = type(self).__name__
        self.in_channels = check_positive_int(name, "in_channels", in_channels)
        self.out_channels = check_positive_int(name, "out_channels", out_channels)

    def _check_groups(self, groups) -> None:
        """Set ``groups`` (a positive int dividing both channel counts; TypeError/ValueError otherwise)."""
        name = type(self).__name__
        self.groups = check_positive_int(name, "groups", groups)
        for arg, value in (("in_channels", self.in_channels), ("out_channels", self.out_channels)):
            if value % self.groups:
                raise ValueError(f"{name}: {arg} must be divisible by groups, got {arg}={value}, groups={self.groups}")

    def _add_parameters(self, weight_shape: tuple, bias) -> None:
        """Register ``weight`` of ``weight_shape`` and, if ``bias`` (a bool; TypeError otherwise), ``bias``
        (C_out,); then initialise them (:meth:`reset_parameters`)."""
        self.use_bias = check_bool(type(self).__name__, "bias", bias)
        self.add_parameter("weight", weight_shape)
        if self.use_bias:
            self.add_parameter("bias", (self.out_channels,))
        self.reset_parameters(np.random.default_rng())

    def reset_parameters(self, rng):
        init.default_layer_init_(self.weight, self.bias if self.use_bias else None, rng)

    def _bias_or_empty(self) -> np.ndarray:
        """The bias, or an empty array of the layer's dtype without one (as the im2col kernels take it)."""
        return self.bias if self.use_bias else np.zeros(0, self.dtype)

    def _grad_views_with_bias(self, grad_y: np.ndarray, grad_params) -> dict:
        """``grad_views(grad_params)``, with the bias gradient (``grad_y`` (N, C_out, H, W), contiguous, summed
        over N, H, W) written when the layer has a bias."""
        views = self.grad_views(grad_params)
        if self.use_bias:
            K.channel_sum(grad_y, views["bias"])
        return views

