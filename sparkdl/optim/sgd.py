"""Stochastic gradient descent with momentum, dampening, Nesterov momentum and L2 weight decay."""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.optim._elem import ElementwiseKernel, l2_grad
from sparkdl.optim.base import Optimizer

__all__ = ["SGD"]


@ElementwiseKernel
def _sgd_kernel(p, g, buf, seg_lo, seg_hi, seg_neg_lr, seg_wd, momentum, one_minus_dampening, nesterov, first,
                gscale, gclip):
    """One loop per case (no momentum, first step, momentum): the momentum buffer is read and written only where it
    exists and is read only after the first step."""
    for s in range(seg_lo.size):
        neg_lr, wd = seg_neg_lr[s], seg_wd[s]
        if momentum == 0:
            for ii in prange(seg_lo[s], seg_hi[s]):
                i = np.uint64(ii)  # unsigned: see sparkdl.optim._elem
                pi = p[i]
                p[i] = pi + neg_lr * l2_grad(g[i], pi, wd, gscale, gclip)
        elif first:  # b_1 = g_1
            for ii in prange(seg_lo[s], seg_hi[s]):
                i = np.uint64(ii)  # unsigned: see sparkdl.optim._elem
                pi = p[i]
                d = l2_grad(g[i], pi, wd, gscale, gclip)
                buf[i] = d
                p[i] = pi + neg_lr * (d + momentum * d if nesterov else d)
        else:
            for ii in prange(seg_lo[s], seg_hi[s]):
                i = np.uint64(ii)  # unsigned: see sparkdl.optim._elem
                pi = p[i]
                d = l2_grad(g[i], pi, wd, gscale, gclip)
                b = buf[i] * momentum + one_minus_dampening * d
                buf[i] = b
                p[i] = pi + neg_lr * (d + momentum * b if nesterov else b)


class SGD(Optimizer):
    r"""Stochastic gradient descent (optionally with momentum).

    .. math::

        g_t &= \nabla f(\theta_{t-1}) + \lambda \theta_{t-1} \\
        b_t &= g_t \ (t = 1), \qquad b_t = \mu b_{t-1} + (1 - \tau) g_t \ (t > 1) \\
        \theta_t &= \theta_{t-1} - \gamma (g_t + \mu b_t \text{ if nesterov else } b_t)

    (without momentum, :math:`\theta_t = \theta_{t-1} - \gamma g_t`).

    Parameters
    ----------
    lr : float, default 0.01
        Learning rate :math:`\gamma \ge 0`.
    momentum : float, default 0
        Momentum factor :math:`\mu \ge 0`.
    dampening : float, default 0
        Dampening :math:`\tau` for momentum.
    nesterov : bool, default False
        Nesterov momentum (needs ``momentum > 0`` and ``dampening == 0``).
    weight_decay : float, default 0
        L2 penalty :math:`\lambda \ge 0`.
    schedule, clip_value, clip_norm
        See :class:`~sparkdl.optim.Optimizer`.

    State per shard: ``momentum_buffer`` (only with ``momentum > 0``).

    Raises
    ------
    TypeError, ValueError
        On a non-number or out-of-range hyper-parameter, or Nesterov without momentum / with dampening.

    References
    ----------
    Sutskever et al., "On the importance of initialization and momentum in deep learning", ICML 2013.
    ``torch.optim.SGD`` (same update and defaults).
    """

    def __init__(self, lr: float = 0.01, momentum: float = 0.0, dampening: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, **common):
        super().__init__(lr, weight_decay, **common)
        self._set_hyper(momentum=momentum, dampening=dampening, nesterov=nesterov)
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ValueError(f"SGD: nesterov=True requires momentum > 0 and dampening == 0, got "
                             f"momentum={momentum}, dampening={dampening}")

    @property
    def state_names(self):
        return ("momentum_buffer",) if self.momentum != 0 else ()

    def _apply(self, params, grads, state, step, seg, gscale, gclip):
        dt = params.dtype.type
        buf = state["momentum_buffer"] if self.momentum != 0 else np.empty(0, params.dtype)
        _sgd_kernel(params.size, params, grads, buf, seg.lo, seg.hi, (-seg.lr).astype(params.dtype),
                    seg.weight_decay.astype(params.dtype), dt(self.momentum), dt(1.0 - self.dampening),
                    self.nesterov, step == 1, gscale, gclip)
