"""The gradient of one batch: forward and backward with the loss's ``reduction='sum'`` form, whole or group by group.

The single-process trainer (:func:`sparkdl.step.train_step`) and every gradient task of the Spark engine
(:func:`sparkdl.step.task_gradient_sum`) compute a batch's gradient with :func:`gradient_sum`, which is why the
two agree bitwise. The global mean gradient is the sum divided by the loss's normalizer
(``loss.normalizer(yb)``, summed over the partitions by the engine).
"""
from __future__ import annotations

import numpy as np

from sparkdl.step.tree_sum import TreeSum

__all__ = ["sum_reduction", "gradient_sum", "grouped_gradient_sum"]


def sum_reduction(loss):
    """``loss`` itself if its reduction is ``'sum'``, else a copy of it with ``reduction='sum'``."""
    if getattr(loss, "reduction", None) == "sum":
        return loss
    if not hasattr(loss, "get_config"):
        raise TypeError(f"loss {type(loss).__name__} needs get_config() to derive its reduction='sum' form")
    return type(loss)(**{**loss.get_config(), "reduction": "sum"})


def gradient_sum(model, loss_sum, xb, yb, rng, grad_out):
    """Forward/backward of ``model`` on one batch with a ``reduction='sum'`` loss (training mode).

    Writes the gradient of the summed loss into ``grad_out`` (flat, the model's layout) and returns
    ``(loss_sum, normalizer)``. The single-process step and every Spark task of the distributed engine
    compute gradients with this one function."""
    y, cache = model.forward(xb, training=True, rng=rng)
    value, lcache = loss_sum.forward(y, yb)
    grad_y = loss_sum.backward(lcache, 1.0)
    model.backward_parameters(cache, grad_y, grad_out)  # the batch is data: no input gradient
    return float(value), float(loss_sum.normalizer(yb))


def grouped_gradient_sum(model, loss_sum, xb, yb, rngs, groups, grad_out):
    """:func:`gradient_sum` the way the distributed engine computes it, one group of rows at a time.

    Group ``g`` is the next ``groups[g]`` rows of the batch (a Spark partition's share of a global batch). Each
    non-empty group runs forward/backward on its own, with its own ``rngs[g]`` and from the same starting
    buffers, so layers that use batch statistics (BatchNorm) see that group only; the gradient sums are added
    in the order of the binary tree over group indices that the engine uses for partitions
    (:mod:`sparkdl.step.tree_sum`; group ``g`` is partition ``g``) in the model's dtype, the loss sums and
    normalizers likewise in float64, and the buffers (BatchNorm running statistics) become the row-weighted average
    of the groups' buffers (their weighted sum in the same tree order). Returns ``(loss_sum, normalizer)``.
    """
    sizes = [int(g) for g in groups]
    if any(g < 0 for g in sizes) or sum(sizes) != len(xb):
        raise ValueError(f"groups must be non-negative row counts summing to the batch size {len(xb)}, got {sizes}")
    rngs = [None] * len(sizes) if rngs is None else list(rngs)
    if len(rngs) != len(sizes):
        raise ValueError(f"with groups, rng must be None or one generator per group ({len(sizes)}), got {len(rngs)}")
    start_buffers = model.flat_buffers.copy()
    dtype = model.dtype.type
    grads = TreeSum(lambda a, b: (np.add(a[0], b[0], out=a[0]), a[1] + b[1], a[2] + b[2]))
    buffers = TreeSum(lambda a, b: np.add(a, b, out=a))
    lo = rows = 0
    for g, (size, rng) in enumerate(zip(sizes, rngs)):
        if size == 0:
            continue
        model.flat_buffers[...] = start_buffers
        grad = np.empty_like(grad_out)
        value, count = gradient_sum(model, loss_sum, xb[lo:lo + size], yb[lo:lo + size], rng, grad)
        grads.push(g, 0, (grad, value, count))
        buffers.push(g, 0, model.flat_buffers * dtype(size))
        lo, rows = lo + size, rows + size
    root = grads.result()
    grad_out[...] = 0
    total = norm = 0.0
    if root is not None:
        grad_out += root[0]
        total, norm = total + root[1], norm + root[2]
    weighted = buffers.result()
    if weighted is not None and weighted.size:
        model.flat_buffers[...] = weighted / dtype(rows)
    return total, norm
