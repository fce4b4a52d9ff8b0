"""Activation layers (no parameters).

Element-wise activations take inputs of any shape and return the input's shape; :class:`Softmax` and
:class:`LogSoftmax` normalise along one axis ``dim``. All follow PyTorch's names, defaults and gradients
(``torch.nn.<Name>``); none has an ``inplace`` option (sparkdl never writes into a layer's input).
"""
from __future__ import annotations

import numbers

import numpy as np

from sparkdl.kernels import activation as K
from sparkdl.nn._checks import check_array, check_positive_int
from sparkdl.nn.module import Module

__all__ = ["ReLU", "LeakyReLU", "ELU", "GELU", "Tanh", "Sigmoid", "SiLU", "Softplus", "PReLU", "Softmax",
           "LogSoftmax"]


def _flat(x):
    """A contiguous 1-D view (or copy, if ``x`` is not contiguous) of ``x``."""
    return np.ascontiguousarray(x).reshape(-1)


def _real(layer_name: str, arg: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{layer_name}: {arg} must be a real number, got {type(value).__name__}")
    return float(value)


class _Elementwise(Module):
    """Shared forward/backward plumbing. A subclass is a row of a table: its kernels, what backward keeps and
    its real-valued hyper-parameters.

    ``_kernels`` is ``(forward(flat_x, *params), backward(flat_cache, flat_grad_y, *params))``;
    ``_cache_output`` selects whether backward needs the output (True) or the input (False); ``_params`` names
    the hyper-parameters passed to both kernels, in order (also the layer's config), converted to the input's
    dtype when ``_params_in_dtype``.
    """

    _kernels: tuple = ()
    _cache_output = True
    _params: tuple = ()
    _params_in_dtype = False

    def _set_params(self, **values) -> None:
        """Check every hyper-parameter is a real number (TypeError naming it otherwise) and store it."""
        for arg, value in values.items():
            setattr(self, arg, _real(type(self).__name__, arg, value))

    def _args(self, dtype) -> list:
        values = [getattr(self, p) for p in self._params]
        return [dtype.type(v) for v in values] if self._params_in_dtype else values

    def _fwd(self, x):
        return self._kernels[0](x, *self._args(x.dtype))

    def _bwd(self, saved, grad_y):
        return self._kernels[1](saved, grad_y, *self._args(saved.dtype))

    def forward(self, x, *, training=False, rng=None):
        check_array(self, x)
        xf = _flat(x)
        y = self._fwd(xf).reshape(x.shape)
        return y, (y if self._cache_output else xf.reshape(x.shape))

    def backward(self, cache, grad_y, grad_params):
        return self._bwd(cache.reshape(-1), _flat(grad_y)).reshape(cache.shape)

    def get_config(self):
        return {p: getattr(self, p) for p in self._params}


class ReLU(_Elementwise):
    r"""Rectified linear unit, :math:`y = \max(0, x)`. Shape: (*) → (*). Reference: ``torch.nn.ReLU``."""

    _kernels = (K.relu_forward, K.relu_backward)


class LeakyReLU(_Elementwise):
    r"""Leaky ReLU, :math:`y = x` for :math:`x > 0`, else :math:`\text{negative\_slope} \cdot x`.

    Parameters
    ----------
    negative_slope : float, default 0.01
        Slope for negative inputs (any real, as in PyTorch).

    Shape: (*) → (*). Raises TypeError if ``negative_slope`` is not a real number.
    References: Maas et al., 2013, "Rectifier Nonlinearities Improve Neural Network Acoustic Models";
    ``torch.nn.LeakyReLU``.
    """

    _cache_output = False

    _kernels = (K.leaky_relu_forward, K.leaky_relu_backward)
    _params = ("negative_slope",)

    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self._set_params(negative_slope=negative_slope)


class ELU(_Elementwise):
    r"""Exponential linear unit, :math:`y = x` for :math:`x > 0`, else :math:`\alpha (e^x - 1)`.

    Parameters
    ----------
    alpha : float, default 1.0
        Saturation value :math:`-\alpha` for large negative inputs.

    Shape: (*) → (*). Raises TypeError if ``alpha`` is not a real number.
    References: Clevert et al., 2016, "Fast and Accurate Deep Network Learning by Exponential Linear Units";
    ``torch.nn.ELU``.
    """

    _cache_output = False

    _kernels = (K.elu_forward, K.elu_backward)
    _params = ("alpha",)

    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self._set_params(alpha=alpha)


class GELU(_Elementwise):
    r"""Gaussian error linear unit, :math:`y = x \Phi(x)` with the standard normal CDF :math:`\Phi`.

    Parameters
    ----------
    approximate : {'none', 'tanh'}, default 'none'
        ``'none'``: exact, :math:`\Phi(x) = (1 + \mathrm{erf}(x/\sqrt2))/2`; ``'tanh'``:
        :math:`y = \tfrac{x}{2}(1 + \tanh(\sqrt{2/\pi}(x + 0.044715 x^3)))`.

    Shape: (*) → (*). Raises ValueError for any other ``approximate``.
    References: Hendrycks & Gimpel, 2016, "Gaussian Error Linear Units (GELUs)"; ``torch.nn.GELU``.
    """

    _cache_output = False

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate
        self._kernels = ((K.gelu_tanh_forward, K.gelu_tanh_backward) if approximate == "tanh"
                         else (K.gelu_forward, K.gelu_backward))

    def _fwd(self, x):
        return (K.gelu_kernels(x.dtype)[0] if self.approximate == "none" else self._kernels[0])(x)

    def _bwd(self, saved, grad_y):
        return (K.gelu_kernels(saved.dtype)[1] if self.approximate == "none" else self._kernels[1])(saved, grad_y)

    def get_config(self):
        return {"approximate": self.approximate}


class Tanh(_Elementwise):
    r"""Hyperbolic tangent, :math:`y = \tanh(x)`. Shape: (*) → (*). Reference: ``torch.nn.Tanh``."""

    _kernels = (K.tanh_forward, K.tanh_backward)


class Sigmoid(_Elementwise):
    r"""Logistic sigmoid, :math:`y = 1 / (1 + e^{-x})`, without overflow for large :math:`|x|`.

    Shape: (*) → (*). Reference: ``torch.nn.Sigmoid``.
    """

    _kernels = (K.sigmoid_forward, K.sigmoid_backward)


class SiLU(_Elementwise):
    r"""Sigmoid linear unit (swish), :math:`y = x \sigma(x)`.

    Shape: (*) → (*). References: Elfwing et al., 2018, "Sigmoid-Weighted Linear Units for Neural Network
    Function Approximation in Reinforcement Learning"; Ramachandran et al., 2017, "Searching for Activation
    Functions"; ``torch.nn.SiLU``.
    """

    _cache_output = False

    _kernels = (K.silu_forward, K.silu_backward)


class Softplus(_Elementwise):
    r"""Smooth ReLU, :math:`y = \frac{1}{\beta} \log(1 + e^{\beta x})`, and :math:`y = x` where
    :math:`\beta x > \text{threshold}` (numerical stability, as PyTorch).

    Parameters
    ----------
    beta : float, default 1
        Sharpness :math:`\beta`, any non-zero real.
    threshold : float, default 20
        Above ``beta * x > threshold`` the layer is the identity.

    Shape: (*) → (*). Raises TypeError if an argument is not a real number, ValueError if ``beta == 0``.
    Reference: ``torch.nn.Softplus``.
    """

    _cache_output = False
    _kernels = (K.softplus_forward, K.softplus_backward)
    _params = ("beta", "threshold")
    _params_in_dtype = True

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self._set_params(beta=beta, threshold=threshold)
        if self.beta == 0:
            raise ValueError("Softplus: beta must be non-zero (it divides the output), got 0")


class PReLU(Module):
    r"""Parametric ReLU, :math:`y = x` for :math:`x > 0`, else :math:`a_c x` with a learned slope.

    Parameters
    ----------
    num_parameters : int, default 1
        1 (one slope shared by every channel) or the number of channels C (one slope per channel, axis 1).
    init : float, default 0.25
        Initial value of every slope.

    Shapes
    ------
    - input: (*) when ``num_parameters == 1``, else (N, C, *); output: same shape
    - ``weight``: (num_parameters,), init ``init``

    Raises
    ------
    TypeError, ValueError
        A non-integer or non-positive ``num_parameters``, a non-real ``init``; an input of the wrong dtype, or
        whose channel axis 1 does not have ``num_parameters`` entries.

    References
    ----------
    He et al., 2015, "Delving Deep into Rectifiers: Surpassing Human-Level Performance on ImageNet
    Classification"; ``torch.nn.PReLU``.
    """

    def __init__(self, num_parameters: int = 1, init: float = 0.25):
        super().__init__()
        # stored as the weight's length: ``num_parameters`` is Module.num_parameters(), the parameter count
        count = check_positive_int("PReLU", "num_parameters", num_parameters)
        self.init = _real("PReLU", "init", init)
        self.add_parameter("weight", (count,))
        self.reset_parameters(np.random.default_rng())

    def reset_parameters(self, rng):
        self.weight[...] = self.init

    def _view3(self, x):
        check_array(self, x)
        count = self.weight.shape[0]
        if count == 1:
            return np.ascontiguousarray(x).reshape(1, 1, -1)
        if x.ndim < 2 or x.shape[1] != count:
            raise ValueError(f"PReLU: num_parameters={count} slopes need an input (N, C, *) with C == {count} on "
                             f"axis 1, got shape {x.shape}")
        return np.ascontiguousarray(x).reshape(x.shape[0], x.shape[1], int(np.prod(x.shape[2:])))

    def forward(self, x, *, training=False, rng=None):
        x3 = self._view3(x)
        return K.prelu_forward(x3, self.weight).reshape(x.shape), (x3, x.shape)

    def backward(self, cache, grad_y, grad_params):
        x3, shape = cache
        gx, gw = K.prelu_backward(x3, np.ascontiguousarray(grad_y).reshape(x3.shape), self.weight)
        self.grad_views(grad_params)["weight"][...] = gw
        return gx.reshape(shape)

    def get_config(self):
        return {"num_parameters": self.weight.shape[0], "init": self.init}


class _AlongDim(Module):
    """Plumbing for kernels that normalise along one axis: the input is viewed as (outer, D, inner)."""

    _kernels = (None, None)

    def __init__(self, dim: int):
        super().__init__()
        name = type(self).__name__
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise TypeError(f"{name}: dim must be an int (PyTorch's implicit dim choice is not supported), "
                            f"got {type(dim).__name__}")
        self.dim = int(dim)

    def forward(self, x, *, training=False, rng=None):
        check_array(self, x)
        if not -x.ndim <= self.dim < x.ndim:
            raise ValueError(f"{type(self).__name__}: dim={self.dim} is out of range for a {x.ndim}-D input "
                             f"of shape {x.shape}; expected -{x.ndim} <= dim < {x.ndim}")
        d = self.dim % x.ndim
        shape3 = (int(np.prod(x.shape[:d])), x.shape[d], int(np.prod(x.shape[d + 1:])))
        y = self._kernels[0](np.ascontiguousarray(x).reshape(shape3)).reshape(x.shape)
        return y, (y, shape3)

    def backward(self, cache, grad_y, grad_params):
        y, shape3 = cache
        return self._kernels[1](y.reshape(shape3), np.ascontiguousarray(grad_y).reshape(shape3)).reshape(y.shape)

    def get_config(self):
        return {"dim": self.dim}


class Softmax(_AlongDim):
    r"""Softmax along ``dim``, :math:`y_i = e^{x_i - m} / \sum_j e^{x_j - m}` with :math:`m = \max_j x_j`.

    Parameters
    ----------
    dim : int
        Axis to normalise (negative counts from the end). Required: PyTorch's deprecated implicit choice
        for ``dim=None`` is not supported.

    Shape: (*) → (*). Raises TypeError if ``dim`` is not an int; ValueError if it is out of range for the
    input. Reference: ``torch.nn.Softmax``.
    """

    _kernels = (K.softmax, K.softmax_backward)


class LogSoftmax(_AlongDim):
    r"""Log-softmax along ``dim``, :math:`y_i = x_i - m - \log\sum_j e^{x_j - m}`, :math:`m = \max_j x_j`.

    Parameters
    ----------
    dim : int
        Axis to normalise (negative counts from the end). Required.

    Shape: (*) → (*). Raises TypeError if ``dim`` is not an int; ValueError if it is out of range for the
    input. Reference: ``torch.nn.LogSoftmax``.
    """

    _kernels = (K.log_softmax_forward, K.log_softmax_backward)
