"""Element-wise activation kernels over flat (raveled) arrays, parallel over elements."""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.config import njit_parallel


@njit_parallel
def relu_forward(x):
    out = np.empty_like(x)
    for i in prange(x.size):
        v = x[i]
        out[i] = v if v > 0 else 0
    return out


@njit_parallel
def relu_backward(y, grad_y):
    """Gradient of ReLU from its *output* y (y > 0 exactly where x > 0)."""
    out = np.empty_like(grad_y)
    for i in prange(y.size):
        out[i] = grad_y[i] if y[i] > 0 else 0
    return out
