"""Adagrad: per-element learning rates from the accumulated squared gradients."""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.optim._elem import ElementwiseKernel, l2_grad
from sparkdl.optim.base import Optimizer

__all__ = ["Adagrad"]


@ElementwiseKernel
def _adagrad_kernel(p, g, acc, seg_lo, seg_hi, seg_neg_clr, seg_wd, eps, gscale, gclip):
    for s in range(seg_lo.size):
        neg_clr, wd = seg_neg_clr[s], seg_wd[s]
        for ii in prange(seg_lo[s], seg_hi[s]):
            i = np.uint64(ii)  # unsigned: see sparkdl.optim._elem
            pi = p[i]
            d = l2_grad(g[i], pi, wd, gscale, gclip)
            a = acc[i] + d * d
            acc[i] = a
            p[i] = pi + neg_clr * d / (np.sqrt(a) + eps)


class Adagrad(Optimizer):
    r"""Adagrad.

    .. math::

        g_t &= \nabla f(\theta_{t-1}) + \lambda \theta_{t-1}, \qquad
        \tilde\gamma_t = \frac{\gamma}{1 + (t - 1)\eta} \\
        s_t &= s_{t-1} + g_t^2, \qquad
        \theta_t = \theta_{t-1} - \tilde\gamma_t \frac{g_t}{\sqrt{s_t} + \epsilon}

    Parameters
    ----------
    lr : float, default 1e-2
        Learning rate :math:`\gamma \ge 0`.
    lr_decay : float, default 0
        Learning-rate decay :math:`\eta \ge 0` (per step).
    weight_decay : float, default 0
        L2 penalty :math:`\lambda \ge 0`.
    initial_accumulator_value : float, default 0
        Initial value :math:`s_0 \ge 0` of the accumulator.
    eps : float, default 1e-10
        :math:`\epsilon \ge 0`, added to :math:`\sqrt{s_t}`.
    schedule, clip_value, clip_norm
        See :class:`~sparkdl.optim.Optimizer`.

    State per shard: ``sum`` (:math:`s`, initialised to ``initial_accumulator_value``; frozen elements
    keep it).

    Raises
    ------
    TypeError, ValueError
        On a non-number or negative hyper-parameter (``lr``, ``lr_decay``, ``weight_decay``,
        ``initial_accumulator_value``, ``eps``).

    References
    ----------
    Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning and Stochastic
    Optimization", JMLR 2011. ``torch.optim.Adagrad``.
    """

    state_names = ("sum",)

    def __init__(self, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, **common):
        super().__init__(lr, weight_decay, **common)
        self._set_hyper(lr_decay=lr_decay, initial_accumulator_value=initial_accumulator_value, eps=eps)

    def _init_value(self, name):
        return self.initial_accumulator_value

    def _apply(self, params, grads, state, step, seg, gscale, gclip):
        f = params.dtype
        clr = seg.lr / (1 + (step - 1) * self.lr_decay)
        _adagrad_kernel(params.size, params, grads, state["sum"], seg.lo, seg.hi, (-clr).astype(f),
                        seg.weight_decay.astype(f), f.type(self.eps), gscale, gclip)
