"""One optimisation step of one process: the batch's mean gradient, then the optimizer's update of the whole vector.

This is what one synchronous data-parallel iteration of the Spark engine computes on the union of the
partitions' mini-batches::

    y            = model.forward(xb, training=True, rng)
    L_sum        = loss_sum(y, yb)                          # the loss with reduction='sum'
    g            = d L_sum / d params  /  loss.normalizer(yb)  # the global mean gradient
    params      <- optimizer.update(params, g, state, lo=0, lr)  # clips g over the whole flat vector

The engine computes the same gradient per partition (:func:`sparkdl.step.task_gradient_sum`) and applies the
update shard by shard on the executors.
"""
from __future__ import annotations

import numpy as np

from sparkdl.nn.module import Module
from sparkdl.step.gradient import gradient_sum, grouped_gradient_sum, sum_reduction

__all__ = ["train_step"]


def train_step(model: Module, loss, optimizer, opt_state, xb: np.ndarray, yb: np.ndarray, lr: float | None,
               rng, *, grad_buffer: np.ndarray | None = None, groups=None) -> float:
    """One optimisation step on the batch ``(xb, yb)``; updates ``model`` and ``opt_state`` in place.

    Parameters
    ----------
    model : Module
    loss : sparkdl loss
        Any reduction; the step differentiates its ``reduction='sum'`` form and divides by
        ``loss.normalizer(yb)``, which equals the mean gradient (and is what the distributed engine does).
    optimizer : sparkdl.optim.Optimizer
        Already ``configure``\\ d for ``model.parameter_layout()``; updates the whole vector (``lo=0``), applying
        its own gradient clipping (``clip_norm``/``clip_value``) to the whole flat mean gradient.
    opt_state : dict
        ``optimizer.init_state(0, model.num_parameters())``.
    xb, yb : ndarray
        The batch: (N, ...) inputs of ``model.dtype`` and the loss's targets.
    lr : float or None
        Learning rate for this step (``None``: the optimizer's own).
    rng : numpy.random.Generator or None
        Randomness of the forward pass (Dropout); with ``groups``, a sequence of one generator (or None) per group.
    grad_buffer : ndarray, optional
        Reused flat gradient storage (saves an allocation per step).
    groups : sequence of int, optional
        Compute the step as the distributed engine does with one group per Spark partition: the batch is
        the concatenation of ``len(groups)`` consecutive groups of ``groups[g]`` rows, each run forward and
        backward separately (BatchNorm statistics per group; see :func:`grouped_gradient_sum`). Default: one
        group.

    Returns
    -------
    float
        The batch's mean loss (``sum / normalizer``).
    """
    grads = model.zeros_like_parameters() if grad_buffer is None else grad_buffer
    if groups is None:
        total, count = gradient_sum(model, sum_reduction(loss), xb, yb, rng, grads)
    else:
        total, count = grouped_gradient_sum(model, sum_reduction(loss), xb, yb, rng, groups, grads)
    if count <= 0:
        raise ValueError(f"train_step: loss.normalizer(yb) must be > 0, got {count}")
    grads /= count
    optimizer.update(model.flat_parameters, grads, opt_state, lo=0, lr=lr)
    return total / count
