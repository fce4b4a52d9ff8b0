"""Per-sample normalization: :class:`LayerNorm` (over the trailing axes) and :class:`GroupNorm` (over channel
groups). Unlike BatchNorm they have no running statistics and behave the same in training and evaluation."""
from __future__ import annotations

import numbers

import numpy as np

from sparkdl.kernels import layer_norm as K
from sparkdl.nn._checks import check_bool, check_input, check_positive_int
from sparkdl.nn.module import Module

__all__ = ["LayerNorm", "GroupNorm"]


def _eps(name: str, eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"{name}: eps must be a real number, got {type(eps).__name__}")
    if not eps >= 0:
        raise ValueError(f"{name}: eps must be >= 0, got {eps!r}")
    return float(eps)


def _at_least(layer, x, k: int) -> int:
    """The input's rank if it is at least ``k`` (for :func:`check_input`), else a ValueError."""
    if isinstance(x, np.ndarray) and x.ndim < k:
        raise ValueError(f"{type(layer).__name__}: expected an input with at least {k} axes, got {x.ndim}-D "
                         f"with shape {x.shape}")
    return getattr(x, "ndim", k)


class LayerNorm(Module):
    r"""Layer normalization over the last ``len(normalized_shape)`` axes,
    :math:`y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \gamma + \beta`.

    Parameters
    ----------
    normalized_shape : int or sequence of int
        Shape D of the trailing axes to normalise over (statistics per sample and leading position).
    eps : float, default 1e-5
        Added to the (biased) variance.
    elementwise_affine : bool, default True
        Learn ``weight`` (:math:`\gamma`) and, if ``bias``, ``bias`` (:math:`\beta`).
    bias : bool, default True
        Learn ``bias`` (only with ``elementwise_affine``).

    Shapes
    ------
    - input: (*, *normalized_shape); output: same shape
    - ``weight``: normalized_shape, init 1; ``bias``: normalized_shape, init 0

    Raises
    ------
    TypeError, ValueError
        Bad constructor arguments; an input of the wrong dtype or whose trailing axes are not
        ``normalized_shape``.

    References
    ----------
    Ba, Kiros & Hinton, 2016, "Layer Normalization", arXiv:1607.06450; ``torch.nn.LayerNorm``.
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True):
        super().__init__()
        shape = normalized_shape if isinstance(normalized_shape, (tuple, list)) else (normalized_shape,)
        if not shape:
            raise ValueError("LayerNorm: normalized_shape must have at least one axis, got ()")
        self.normalized_shape = tuple(check_positive_int("LayerNorm", "normalized_shape", s) for s in shape)
        self.eps = _eps("LayerNorm", eps)
        self.elementwise_affine = check_bool("LayerNorm", "elementwise_affine", elementwise_affine)
        self.use_bias = check_bool("LayerNorm", "bias", bias)
        if self.elementwise_affine:
            self.add_parameter("weight", self.normalized_shape)
            if self.use_bias:
                self.add_parameter("bias", self.normalized_shape)
        self.reset_parameters(np.random.default_rng())

    def reset_parameters(self, rng):
        """Weight 1, bias 0 (as ``torch.nn.LayerNorm.reset_parameters``)."""
        if self.elementwise_affine:
            self.weight[...] = 1
            if self.use_bias:
                self.bias[...] = 0

    def _affine(self):
        empty = np.zeros(0, self.dtype)
        if not self.elementwise_affine:
            return empty, empty
        return self.weight.reshape(-1), self.bias.reshape(-1) if self.use_bias else empty

    def forward(self, x, *, training=False, rng=None):
        k = len(self.normalized_shape)
        check_input(self, x, _at_least(self, x, k))
        if x.shape[x.ndim - k:] != self.normalized_shape:
            raise ValueError(f"LayerNorm: expected input with trailing shape {self.normalized_shape} "
                             f"(normalized_shape), got shape {x.shape}")
        d = int(np.prod(self.normalized_shape))
        x2 = np.ascontiguousarray(x).reshape(-1, d)
        w, b = self._affine()
        y, mean, rstd = K.layer_norm_forward(x2, w, b, self.eps)
        return y.reshape(x.shape), (x2, mean, rstd, x.shape)

    def backward(self, cache, grad_y, grad_params):
        x2, mean, rstd, shape = cache
        w, _ = self._affine()
        gx, gw, gb = K.layer_norm_backward(x2, np.ascontiguousarray(grad_y).reshape(x2.shape), mean, rstd, w)
        if self.elementwise_affine:
            g = self.grad_views(grad_params)
            g["weight"][...] = gw.reshape(self.normalized_shape)
            if self.use_bias:
                g["bias"][...] = gb.reshape(self.normalized_shape)
        return gx.reshape(shape)

    def get_config(self):
        return {"normalized_shape": list(self.normalized_shape), "eps": self.eps,
                "elementwise_affine": self.elementwise_affine, "bias": self.use_bias}


class GroupNorm(Module):
    r"""Group normalization: channels split into ``num_groups`` groups, each normalised per sample over its
    channels and spatial positions, then a per-channel affine map.

    Parameters
    ----------
    num_groups : int
        Number of groups G; must divide ``num_channels``.
    num_channels : int
        Channels C of the input (axis 1).
    eps : float, default 1e-5
        Added to the (biased) variance.
    affine : bool, default True
        Learn per-channel ``weight`` and ``bias``.

    Shapes
    ------
    - input: (N, C, *); output: same shape
    - ``weight``: (C,), init 1; ``bias``: (C,), init 0

    Raises
    ------
    TypeError, ValueError
        Bad constructor arguments (including C not divisible by G); an input of the wrong dtype, rank
        (< 2) or channel count.

    References
    ----------
    Wu & He, 2018, "Group Normalization", ECCV; ``torch.nn.GroupNorm``.
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
        super().__init__()
        self.num_groups = check_positive_int("GroupNorm", "num_groups", num_groups)
        self.num_channels = check_positive_int("GroupNorm", "num_channels", num_channels)
        if self.num_channels % self.num_groups:
            raise ValueError(f"GroupNorm: num_channels must be divisible by num_groups, got num_channels="
                             f"{self.num_channels}, num_groups={self.num_groups}")
        self.eps = _eps("GroupNorm", eps)
        self.affine = check_bool("GroupNorm", "affine", affine)
        if self.affine:
            self.add_parameter("weight", (self.num_channels,))
            self.add_parameter("bias", (self.num_channels,))
        self.reset_parameters(np.random.default_rng())

    def reset_parameters(self, rng):
        """Weight 1, bias 0."""
        if self.affine:
            self.weight[...] = 1
            self.bias[...] = 0

    def _affine(self):
        if self.affine:
            return self.weight, self.bias
        empty = np.zeros(0, self.dtype)
        return empty, empty

    def forward(self, x, *, training=False, rng=None):
        check_input(self, x, _at_least(self, x, 2), axis=1, size=self.num_channels)
        x3 = np.ascontiguousarray(x).reshape(x.shape[0], x.shape[1], int(np.prod(x.shape[2:])))
        w, b = self._affine()
        y, mean, rstd = K.group_norm_forward(x3, self.num_groups, w, b, self.eps)
        return y.reshape(x.shape), (x3, mean, rstd, x.shape)

    def backward(self, cache, grad_y, grad_params):
        x3, mean, rstd, shape = cache
        w, _ = self._affine()
        gy = np.ascontiguousarray(grad_y).reshape(x3.shape)
        gx, gw, gb = K.group_norm_backward(x3, gy, self.num_groups, mean, rstd, w)
        if self.affine:
            g = self.grad_views(grad_params)
            g["weight"][...] = gw
            g["bias"][...] = gb
        return gx.reshape(shape)

    def get_config(self):
        return {"num_groups": self.num_groups, "num_channels": self.num_channels, "eps": self.eps,
                "affine": self.affine}
