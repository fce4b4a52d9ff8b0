"""Fully connected layer."""
from __future__ import annotations


import numpy as np

from sparkdl.nn import init
from sparkdl.nn._checks import check_input, check_positive_int
from sparkdl.nn.gemm import matmul
from sparkdl.nn.module import Module

__all__ = ["Linear"]


class Linear(Module):
    r"""Affine map :math:`y = x W^T + b`.

    Parameters
    ----------
    in_features : int
        Size D_in of each input sample.
    out_features : int
        Size D_out of each output sample.
    bias : bool, default True
        Learn an additive bias.

    Shapes
    ------
    - input: (N, D_in) or (N, *, D_in) (any number of leading axes, as ``torch.nn.Linear``; the map applies to
      the last axis), any floating dtype equal to the layer's (float32 by default)
    - output: (N, D_out) or (N, *, D_out)
    - ``weight``: (D_out, D_in), init U(-k, k) with k = 1/sqrt(D_in) (PyTorch's default,
      ``kaiming_uniform_(a=sqrt(5))``)
    - ``bias``: (D_out,), init U(-k, k)

    Raises
    ------
    TypeError, ValueError
        On a non-integer/non-positive size, or an input of fewer than 2 axes, the wrong width or dtype.

    Notes
    -----
    Forward and backward are three BLAS GEMMs (numpy ``matmul``); numba would not beat BLAS here. An input of
    more than two axes runs as one (rows, D_in) GEMM.
    Reference: ``torch.nn.Linear``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features = check_positive_int("Linear", "in_features", in_features)
        self.out_features = check_positive_int("Linear", "out_features", out_features)
        self.use_bias = bool(bias)
        self.add_parameter("weight", (self.out_features, self.in_features))
        if self.use_bias:
            self.add_parameter("bias", (self.out_features,))
        self.reset_parameters(np.random.default_rng())

    def reset_parameters(self, rng):
        init.default_layer_init_(self.weight, self.bias if self.use_bias else None, rng)

    def forward(self, x, *, training=False, rng=None):
        check_input(self, x, tuple(range(2, max(x.ndim, 2) + 1)) if isinstance(x, np.ndarray) else 2, axis=-1,
                    size=self.in_features)
        x2 = x.reshape(-1, self.in_features) if x.ndim > 2 else x
        y = matmul(x2, self.weight.T)
        if self.use_bias:
            y += self.bias
        return (y.reshape(*x.shape[:-1], self.out_features) if x.ndim > 2 else y), x

    def backward(self, cache, grad_y, grad_params):
        if cache.ndim > 2:
            g2 = np.ascontiguousarray(grad_y).reshape(-1, self.out_features)
            self.backward_parameters(cache, g2, grad_params)
            return matmul(g2, self.weight).reshape(cache.shape)
        self.backward_parameters(cache, grad_y, grad_params)
        return matmul(grad_y, self.weight)

    def backward_parameters(self, cache, grad_y, grad_params):
        x = cache.reshape(-1, self.in_features) if cache.ndim > 2 else cache
        grad_y = grad_y.reshape(-1, self.out_features) if grad_y.ndim > 2 else grad_y
        g = self.grad_views(grad_params)
        matmul(grad_y.T, x, out=g["weight"])
        if self.use_bias:
            np.sum(grad_y, axis=0, out=g["bias"])

    def get_config(self):
        return {"in_features": self.in_features, "out_features": self.out_features, "bias": self.use_bias}
