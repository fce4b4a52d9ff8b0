"""Adadelta: learning rates from running averages of squared gradients and squared updates."""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.optim._elem import ElementwiseKernel, l2_grad, sq_avg
from sparkdl.optim.base import Optimizer

__all__ = ["Adadelta"]


@ElementwiseKernel
def _adadelta_kernel(p, g, sq, acc, seg_lo, seg_hi, seg_neg_lr, seg_wd, rho, one_minus_rho, eps, gscale, gclip):
    for s in range(seg_lo.size):
        neg_lr, wd = seg_neg_lr[s], seg_wd[s]
        for ii in prange(seg_lo[s], seg_hi[s]):
            i = np.uint64(ii)  # unsigned: see sparkdl.optim._elem
            pi = p[i]
            d = l2_grad(g[i], pi, wd, gscale, gclip)
            v = sq_avg(sq[i], d, rho, one_minus_rho)
            sq[i] = v
            a = acc[i]
            delta = np.sqrt(a + eps) / np.sqrt(v + eps) * d
            acc[i] = sq_avg(a, delta, rho, one_minus_rho)
            p[i] = pi + neg_lr * delta


class Adadelta(Optimizer):
    r"""Adadelta.

    .. math::

        g_t &= \nabla f(\theta_{t-1}) + \lambda \theta_{t-1}, \qquad
        v_t = \rho v_{t-1} + (1 - \rho) g_t^2 \\
        \Delta_t &= \frac{\sqrt{u_{t-1} + \epsilon}}{\sqrt{v_t + \epsilon}} g_t, \qquad
        u_t = \rho u_{t-1} + (1 - \rho) \Delta_t^2, \qquad
        \theta_t = \theta_{t-1} - \gamma \Delta_t

    Parameters
    ----------
    lr : float, default 1.0
        Coefficient :math:`\gamma \ge 0` that scales the update.
    rho : float, default 0.9
        Running-average coefficient :math:`\rho \in [0, 1]`.
    eps : float, default 1e-6
        :math:`\epsilon \ge 0`, added under both square roots (numerical stability).
    weight_decay : float, default 0
        L2 penalty :math:`\lambda \ge 0`.
    schedule, clip_value, clip_norm
        See :class:`~sparkdl.optim.Optimizer`.

    State per shard: ``square_avg`` (:math:`v`) and ``acc_delta`` (:math:`u`), both starting at zero.

    Raises
    ------
    TypeError, ValueError
        On a non-number hyper-parameter, ``rho`` outside ``[0, 1]``, or a negative ``lr``, ``eps`` or
        ``weight_decay``.

    References
    ----------
    Zeiler, "ADADELTA: An Adaptive Learning Rate Method", 2012. ``torch.optim.Adadelta``.
    """

    state_names = ("square_avg", "acc_delta")

    def __init__(self, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0.0, **common):
        super().__init__(lr, weight_decay, **common)
        self._set_hyper(rho=rho, eps=eps)

    def _apply(self, params, grads, state, step, seg, gscale, gclip):
        f = params.dtype
        dt = f.type
        _adadelta_kernel(params.size, params, grads, state["square_avg"], state["acc_delta"], seg.lo, seg.hi,
                         (-seg.lr).astype(f), seg.weight_decay.astype(f), dt(self.rho), dt(1 - self.rho),
                         dt(self.eps), gscale, gclip)
