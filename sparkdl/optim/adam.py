"""Adam and AdamW (decoupled weight decay), with optional AMSGrad."""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.optim._elem import ElementwiseKernel, lerp, prep_grad, sq_avg
from sparkdl.optim.base import Optimizer

__all__ = ["Adam", "AdamW"]


@ElementwiseKernel
def _adam_kernel(p, g, m, v, vmax, seg_lo, seg_hi, seg_neg_step, seg_wd, seg_decay, decoupled, w1, one_minus_w1,
                 beta2, one_minus_beta2, bc2_sqrt, eps, amsgrad, gscale, gclip):
    for s in range(seg_lo.size):
        neg_step = seg_neg_step[s]
        wd = seg_wd[s]
        decay = seg_decay[s]
        for ii in prange(seg_lo[s], seg_hi[s]):
            i = np.uint64(ii)  # unsigned: see sparkdl.optim._elem
            d = prep_grad(g[i], gscale, gclip)
            pi = p[i]
            if decoupled:
                pi = pi * decay
            elif wd != 0:
                d = d + wd * pi
            mi = lerp(m[i], d, w1, one_minus_w1)
            vi = sq_avg(v[i], d, beta2, one_minus_beta2)
            m[i] = mi
            v[i] = vi
            if amsgrad:
                vi = max(vmax[i], vi)
                vmax[i] = vi
            denom = np.sqrt(vi) / bc2_sqrt + eps
            p[i] = pi + neg_step * mi / denom


class Adam(Optimizer):
    r"""Adam: adaptive moment estimation.

    .. math::

        g_t &= \nabla f(\theta_{t-1}) + \lambda \theta_{t-1} \\
        m_t &= \beta_1 m_{t-1} + (1 - \beta_1) g_t, \qquad v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2 \\
        \hat v_t &= \max(\hat v_{t-1}, v_t) \text{ (amsgrad) else } v_t \\
        \theta_t &= \theta_{t-1} - \frac{\gamma}{1 - \beta_1^t} \,
                    \frac{m_t}{\sqrt{\hat v_t} / \sqrt{1 - \beta_2^t} + \epsilon}

    (bias corrections as in PyTorch: :math:`\epsilon` is added *after* dividing by
    :math:`\sqrt{1-\beta_2^t}`).

    Parameters
    ----------
    lr : float, default 1e-3
        Learning rate :math:`\gamma \ge 0`.
    betas : (float, float), default (0.9, 0.999)
        :math:`(\beta_1, \beta_2)`, each in ``[0, 1)``: decay rates of the two moment averages.
    eps : float, default 1e-8
        :math:`\epsilon \ge 0`, added to the denominator.
    weight_decay : float, default 0
        L2 penalty :math:`\lambda \ge 0` added to the gradient.
    amsgrad : bool, default False
        Use the running maximum of :math:`v_t` (AMSGrad).
    schedule, clip_value, clip_norm
        See :class:`~sparkdl.optim.Optimizer`.

    State per shard: ``exp_avg`` (:math:`m`), ``exp_avg_sq`` (:math:`v`), ``max_exp_avg_sq`` (amsgrad only).

    Raises
    ------
    TypeError, ValueError
        On a non-number hyper-parameter, a beta outside ``[0, 1)``, ``betas`` not a pair, or a negative
        ``lr``, ``eps`` or ``weight_decay``.

    References
    ----------
    Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015; Reddi et al., "On the
    Convergence of Adam and Beyond", ICLR 2018 (AMSGrad). ``torch.optim.Adam``.
    """

    _decoupled = False

    def __init__(self, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 amsgrad: bool = False, **common):
        super().__init__(lr, weight_decay, **common)
        self._set_hyper(betas=betas, eps=eps, amsgrad=amsgrad)

    @property
    def state_names(self):
        return ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if self.amsgrad else ())

    def _apply(self, params, grads, state, step, seg, gscale, gclip):
        dt, f = params.dtype.type, params.dtype
        beta1, beta2 = self.betas
        bc1 = 1 - beta1 ** step
        bc2_sqrt = (1 - beta2 ** step) ** 0.5
        vmax = state["max_exp_avg_sq"] if self.amsgrad else np.empty(0, f)
        if self._decoupled:
            wd, decay = np.zeros(len(seg.lo), f), (1 - seg.lr * seg.weight_decay).astype(f)
        else:
            wd, decay = seg.weight_decay.astype(f), np.ones(len(seg.lo), f)
        _adam_kernel(params.size, params, grads, state["exp_avg"], state["exp_avg_sq"], vmax, seg.lo, seg.hi,
                     (-(seg.lr / bc1)).astype(f), wd, decay, self._decoupled, dt(1 - beta1), dt(1) - dt(1 - beta1),
                     dt(beta2), dt(1 - beta2), dt(bc2_sqrt), dt(self.eps), self.amsgrad, gscale, gclip)


class AdamW(Adam):
    r"""Adam with decoupled weight decay.

    Identical to :class:`Adam` except that weight decay shrinks the parameters directly instead of being
    added to the gradient: :math:`\theta \leftarrow \theta (1 - \gamma \lambda)` before the Adam step, so it
    does not enter the moments.

    Parameters
    ----------
    lr, betas, eps, amsgrad
        As :class:`Adam`.
    weight_decay : float, default 1e-2
        Decoupled decay :math:`\lambda \ge 0` (multiplied by the current, per-group learning rate).

    References
    ----------
    Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019. ``torch.optim.AdamW``.
    """

    _decoupled = True

    def __init__(self, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False, **common):
        super().__init__(lr, betas, eps, weight_decay, amsgrad, **common)
