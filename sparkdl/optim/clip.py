"""Gradient clipping by value (element-wise) and by global L2 norm, for whole or sharded gradients.

Clipping by value is shard-local. Clipping by norm needs the norm of the *whole* gradient; when the
gradient is split into shards ``g = [g_0, g_1, ..., g_{B-1}]`` (the engine's AllReduce blocks),

.. math::

    \\|g\\|_2 = \\sqrt{\\textstyle\\sum_b \\|g_b\\|_2^2},

so each shard computes :func:`partial_sq_norm` (float64 accumulation), the partial squares are summed
(one float per shard), and every shard scales by the same :func:`clip_coef`. Frozen elements are left out
by :meth:`sparkdl.optim.Optimizer.partial_sq_norm`, like parameters without ``.grad`` in PyTorch.

References: ``torch.nn.utils.clip_grad_norm_``, ``torch.nn.utils.clip_grad_value_``.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from sparkdl.config import njit_parallel

__all__ = ["partial_sq_norm", "clip_coef", "clip_grad_norm", "clip_grad_value"]

_BLOCK = 8192


@njit_parallel
def _block_sq_sums(g, block):
    nblocks = (g.size + block - 1) // block
    out = np.zeros(nblocks, np.float64)
    for b in prange(nblocks):
        s = 0.0
        for i in range(b * block, min(g.size, (b + 1) * block)):
            v = np.float64(g[i])
            s += v * v
        out[b] = s
    return out


def _check_grad(fn: str, grad) -> None:
    if not isinstance(grad, np.ndarray) or grad.dtype not in (np.float32, np.float64):
        raise TypeError(f"{fn}: grad must be a float32/float64 numpy.ndarray, got "
                        f"{type(grad).__name__} {getattr(grad, 'dtype', '')}")


def partial_sq_norm(grad_shard: np.ndarray) -> float:
    """Sum of squares of a gradient shard, accumulated in float64.

    Deterministic: fixed blocks of 8192 elements are summed in parallel, then the block sums in order,
    so the result does not depend on the thread count.

    Parameters
    ----------
    grad_shard : ndarray, float32 or float64, any shape

    Returns
    -------
    float
    """
    _check_grad("partial_sq_norm", grad_shard)
    g = np.ascontiguousarray(grad_shard).reshape(-1)
    if g.size == 0:
        return 0.0
    return float(np.sum(_block_sq_sums(g, _BLOCK)))


def clip_coef(total_sq_norm: float, max_norm: float) -> float:
    """Scale factor of clipping by norm: ``min(1, max_norm / (sqrt(total_sq_norm) + 1e-6))``.

    ``total_sq_norm`` is the global squared norm (the sum over shards of :func:`partial_sq_norm`).
    A non-finite norm gives a non-finite or zero factor (PyTorch's ``error_if_nonfinite=False`` behaviour).

    Raises
    ------
    ValueError
        If ``max_norm <= 0`` or ``total_sq_norm < 0``.
    """
    if not max_norm > 0:
        raise ValueError(f"clip_coef: max_norm must be > 0, got {max_norm!r}")
    if total_sq_norm < 0:
        raise ValueError(f"clip_coef: total_sq_norm must be >= 0, got {total_sq_norm!r}")
    coef = float(max_norm) / (math.sqrt(total_sq_norm) + 1e-6)
    return min(coef, 1.0)


def clip_grad_norm(grad: np.ndarray, max_norm: float) -> float:
    """Clip a whole gradient vector by its L2 norm, in place; return the norm before clipping.

    Equivalent to ``torch.nn.utils.clip_grad_norm_(params, max_norm)`` with ``grad`` the concatenation
    of the parameters' gradients.
    """
    _check_grad("clip_grad_norm", grad)
    total = partial_sq_norm(grad)
    grad *= grad.dtype.type(clip_coef(total, max_norm))
    return math.sqrt(total)


def clip_grad_value(grad: np.ndarray, clip_value: float) -> None:
    """Clamp every element of ``grad`` to ``[-clip_value, clip_value]`` in place (any shard)."""
    _check_grad("clip_grad_value", grad)
    if not clip_value > 0:
        raise ValueError(f"clip_grad_value: clip_value must be > 0, got {clip_value!r}")
    np.clip(grad, -clip_value, clip_value, out=grad)
