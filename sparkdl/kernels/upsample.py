"""Upsampling kernels over planes ``x (P, H, W)``, forward and backward side by side, parallel over planes.

Both modes are separable: output row ``i`` reads input rows ``h0[i]`` and ``h1[i]`` with weights
``lh0[i]`` and ``lh1[i]`` (columns likewise), so one pair of kernels serves them, with the per-axis source
indices and weights computed by :mod:`sparkdl.nn.upsample` exactly as PyTorch's CPU kernels compute them.
Nearest neighbour reads only ``(h0, w0)``; bilinear is
``lh0 (lw0 x[h0, w0] + lw1 x[h0, w1]) + lh1 (lw0 x[h1, w0] + lw1 x[h1, w1])``. Backward scatter-adds the
output gradient with the same weights.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.config import njit_parallel

__all__ = ["upsample_forward", "upsample_backward"]


@njit_parallel
def upsample_forward(x, h0, h1, lh0, lh1, w0, w1, lw0, lw1, nearest):
    """``y (P, Ho, Wo)`` from ``x (P, H, W)``; ``Ho = h0.size``, ``Wo = w0.size``."""
    P = x.shape[0]
    Ho, Wo = h0.shape[0], w0.shape[0]
    y = np.empty((P, Ho, Wo), x.dtype)
    for p in prange(P):
        for i in range(Ho):
            a, b = h0[i], h1[i]
            if nearest:
                for j in range(Wo):
                    y[p, i, j] = x[p, a, w0[j]]
                continue
            la, lb = lh0[i], lh1[i]
            for j in range(Wo):
                c, d = w0[j], w1[j]
                y[p, i, j] = (la * (lw0[j] * x[p, a, c] + lw1[j] * x[p, a, d])
                              + lb * (lw0[j] * x[p, b, c] + lw1[j] * x[p, b, d]))
    return y


@njit_parallel
def upsample_backward(grad_y, H, W, h0, h1, lh0, lh1, w0, w1, lw0, lw1, nearest):
    """Adjoint of :func:`upsample_forward`: ``grad_x (P, H, W)``."""
    P, Ho, Wo = grad_y.shape
    gx = np.zeros((P, H, W), grad_y.dtype)
    for p in prange(P):
        for i in range(Ho):
            a, b = h0[i], h1[i]
            if nearest:
                for j in range(Wo):
                    gx[p, a, w0[j]] += grad_y[p, i, j]
                continue
            la, lb = lh0[i], lh1[i]
            for j in range(Wo):
                g = grad_y[p, i, j]
                c, d = w0[j], w1[j]
                gx[p, a, c] += la * lw0[j] * g
                gx[p, a, d] += la * lw1[j] * g
                gx[p, b, c] += lb * lw0[j] * g
                gx[p, b, d] += lb * lw1[j] * g
    return gx
