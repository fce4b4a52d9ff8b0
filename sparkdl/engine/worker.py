"""Executor-side computation of one partition's share of an iteration — plain numpy, no Spark imports.

:func:`local_gradient` is what every stage-1 task runs; it is also what the single-process reference
computes on the union of the local batches, which is why the two agree.
"""
from __future__ import annotations

import numpy as np

__all__ = ["local_gradient", "dropout_rng", "sum_loss"]


def dropout_rng(seed: int, epoch: int, iteration: int, partition: int) -> np.random.Generator:
    """The generator for randomness inside the forward pass (Dropout) of one partition and iteration.

    Derived only from explicit numbers, so a retried task draws exactly what the failed attempt drew.
    """
    return np.random.default_rng([seed, epoch, iteration, partition, 0xD80])


def local_gradient(model, loss, x: np.ndarray, y: np.ndarray, rng: np.random.Generator):
    """Sum-reduced loss and gradient of ``model`` on one local batch.

    Parameters
    ----------
    model : sparkdl.nn.Module
        With the iteration's weights already in ``model.flat_parameters``.
    loss : sparkdl.nn.loss.Loss
        With ``reduction='sum'`` (see :func:`sum_loss`), so partitions can be added.
    x, y : ndarray
        The local batch (N_local >= 1 rows).

    Returns
    -------
    grad_sum : ndarray, float32, shape (P,)
        Gradient of the summed loss.
    loss_sum : float
        Summed loss.
    normalizer : float
        The denominator that ``reduction='mean'`` would divide by (``loss.normalizer(y)``).
    """
    out, cache = model.forward(x, training=True, rng=rng)
    loss_sum, lcache = loss.forward(out, y)
    grad_out = loss.backward(lcache, 1.0)
    grad = model.zeros_like_parameters()
    model.backward(cache, grad_out, grad)
    return grad, float(loss_sum), float(loss.normalizer(y))


def sum_loss(loss):
    """A copy of ``loss`` with ``reduction='sum'`` (rebuilt from its config)."""
    return type(loss)(**{**loss.get_config(), "reduction": "sum"})
