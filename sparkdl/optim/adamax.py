"""Adamax: Adam with the infinity norm in place of the second moment."""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.optim._elem import ElementwiseKernel, l2_grad, lerp
from sparkdl.optim.base import Optimizer

__all__ = ["Adamax"]


@ElementwiseKernel
def _adamax_kernel(p, g, m, u, seg_lo, seg_hi, seg_neg_clr, seg_wd, w1, one_minus_w1, beta2, eps, gscale, gclip):
    for s in range(seg_lo.size):
        neg_clr, wd = seg_neg_clr[s], seg_wd[s]
        for ii in prange(seg_lo[s], seg_hi[s]):
            i = np.uint64(ii)  # unsigned: see sparkdl.optim._elem
            pi = p[i]
            d = l2_grad(g[i], pi, wd, gscale, gclip)
            mi = lerp(m[i], d, w1, one_minus_w1)
            m[i] = mi
            ui = max(u[i] * beta2, abs(d) + eps)
            u[i] = ui
            p[i] = pi + neg_clr * mi / ui


class Adamax(Optimizer):
    r"""Adamax.

    .. math::

        g_t &= \nabla f(\theta_{t-1}) + \lambda \theta_{t-1}, \qquad
        m_t = \beta_1 m_{t-1} + (1 - \beta_1) g_t \\
        u_t &= \max(\beta_2 u_{t-1}, |g_t| + \epsilon), \qquad
        \theta_t = \theta_{t-1} - \frac{\gamma}{1 - \beta_1^t} \frac{m_t}{u_t}

    Parameters
    ----------
    lr : float, default 2e-3
        Learning rate :math:`\gamma \ge 0`.
    betas : (float, float), default (0.9, 0.999)
        :math:`(\beta_1, \beta_2)`, each in ``[0, 1)``: decay rates of :math:`m` and of the infinity norm.
    eps : float, default 1e-8
        :math:`\epsilon \ge 0`, added to :math:`|g_t|` (the least :math:`u_t`).
    weight_decay : float, default 0
        L2 penalty :math:`\lambda \ge 0`.
    schedule, clip_value, clip_norm
        See :class:`~sparkdl.optim.Optimizer`.

    State per shard: ``exp_avg`` (:math:`m`), ``exp_inf`` (:math:`u`).

    Raises
    ------
    TypeError, ValueError
        On a non-number hyper-parameter, ``betas`` not a pair of numbers in ``[0, 1)``, or a negative ``lr``,
        ``eps`` or ``weight_decay``.

    References
    ----------
    Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015, section 7.1.
    ``torch.optim.Adamax``.
    """

    state_names = ("exp_avg", "exp_inf")

    def __init__(self, lr: float = 2e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 **common):
        super().__init__(lr, weight_decay, **common)
        self._set_hyper(betas=betas, eps=eps)

    def _apply(self, params, grads, state, step, seg, gscale, gclip):
        f = params.dtype
        dt = f.type
        beta1, beta2 = self.betas
        clr = seg.lr / (1 - beta1 ** step)
        w1 = dt(1 - beta1)
        _adamax_kernel(params.size, params, grads, state["exp_avg"], state["exp_inf"], seg.lo, seg.hi, (-clr).astype(f),
                       seg.weight_decay.astype(f), w1, dt(1) - w1, dt(beta2), dt(self.eps), gscale, gclip)
