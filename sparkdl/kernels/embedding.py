"""Embedding lookup kernels, forward and backward side by side: row gather/scatter-add for ``Embedding`` and
the per-bag weighted sums of ``EmbeddingBag``.

Indices reaching these kernels are already validated by :mod:`sparkdl.nn.embedding`; an index of -1 marks an
entry to skip (padding). ``bags[k]`` is the bag (output row) of entry k.
"""
from __future__ import annotations

from sparkdl.config import njit

__all__ = ["embedding_backward", "bag_forward", "bag_backward"]


@njit
def embedding_backward(ids, grad_y, grad_weight):
    """``grad_weight[ids[k]] += grad_y[k]`` for every k with ``ids[k] >= 0``; ``grad_weight`` zeroed by the caller."""
    M, D = grad_y.shape
    for k in range(M):
        i = ids[k]
        if i < 0:
            continue
        for j in range(D):
            grad_weight[i, j] += grad_y[k, j]


@njit(inline="always")
def _bag_scatter(ids, bags, weights, scale, src, dst, to_bags):
    """For every entry k with ``ids[k] >= 0``, ``s = scale[bags[k]] * weights[k]`` (``weights`` empty: 1), then
    ``dst[bags[k]] += s * src[ids[k]]`` if ``to_bags`` (forward) else ``dst[ids[k]] += s * src[bags[k]]``."""
    D = src.shape[1]
    use_w = weights.shape[0] > 0
    for k in range(ids.shape[0]):
        i = ids[k]
        if i < 0:
            continue
        b = bags[k]
        s = scale[b] * (weights[k] if use_w else 1.0)
        r, c = (i, b) if to_bags else (b, i)
        for j in range(D):
            dst[c, j] += s * src[r, j]


@njit
def bag_forward(ids, bags, weights, scale, weight, out):
    """``out[b] = scale[b] * sum_{k in bag b} weights[k] * weight[ids[k]]`` (``weights`` empty: all ones);
    ``out`` zeroed by the caller."""
    _bag_scatter(ids, bags, weights, scale, weight, out, True)


@njit
def bag_backward(ids, bags, weights, scale, grad_y, grad_weight):
    """Adjoint of :func:`bag_forward` with respect to ``weight``; ``grad_weight`` zeroed by the caller."""
    _bag_scatter(ids, bags, weights, scale, grad_y, grad_weight, False)
