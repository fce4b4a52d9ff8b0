"""RMSprop, optionally centered and with momentum."""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.optim._elem import ElementwiseKernel, l2_grad, lerp, sq_avg
from sparkdl.optim.base import Optimizer

__all__ = ["RMSprop"]


@ElementwiseKernel
def _rmsprop_kernel(p, g, sq, gavg, buf, seg_lo, seg_hi, seg_neg_lr, seg_wd, alpha, one_minus_alpha, w_lerp,
                    eps, momentum, centered, gscale, gclip):
    for s in range(seg_lo.size):
        neg_lr, wd = seg_neg_lr[s], seg_wd[s]
        for ii in prange(seg_lo[s], seg_hi[s]):
            i = np.uint64(ii)  # unsigned: see sparkdl.optim._elem
            pi = p[i]
            d = l2_grad(g[i], pi, wd, gscale, gclip)
            v = sq_avg(sq[i], d, alpha, one_minus_alpha)
            sq[i] = v
            if centered:
                ga = lerp(gavg[i], d, one_minus_alpha, w_lerp)
                gavg[i] = ga
                avg = np.sqrt(v - ga * ga) + eps
            else:
                avg = np.sqrt(v) + eps
            if momentum > 0:
                b = buf[i] * momentum + d / avg
                buf[i] = b
                p[i] = pi + neg_lr * b
            else:
                p[i] = pi + neg_lr * d / avg


class RMSprop(Optimizer):
    r"""RMSprop.

    .. math::

        g_t &= \nabla f(\theta_{t-1}) + \lambda \theta_{t-1}, \qquad
        v_t = \alpha v_{t-1} + (1 - \alpha) g_t^2 \\
        \bar g_t &= \alpha \bar g_{t-1} + (1 - \alpha) g_t, \qquad
        \sigma_t = \sqrt{v_t - \bar g_t^2} + \epsilon \text{ (centered) else } \sqrt{v_t} + \epsilon \\
        b_t &= \mu b_{t-1} + g_t / \sigma_t, \qquad
        \theta_t = \theta_{t-1} - \gamma b_t \ (\mu > 0) \text{ else } \theta_{t-1} - \gamma g_t / \sigma_t

    Parameters
    ----------
    lr : float, default 1e-2
        Learning rate :math:`\gamma \ge 0`.
    alpha : float, default 0.99
        Smoothing constant :math:`\alpha \ge 0`.
    eps : float, default 1e-8
        :math:`\epsilon \ge 0`, added to the square root in :math:`\sigma_t`.
    weight_decay : float, default 0
        L2 penalty :math:`\lambda \ge 0`.
    momentum : float, default 0
        Momentum :math:`\mu \ge 0`.
    centered : bool, default False
        Normalise by the estimated variance (subtract the squared running mean of the gradient).
    schedule, clip_value, clip_norm
        See :class:`~sparkdl.optim.Optimizer`.

    State per shard: ``square_avg``, ``grad_avg`` (centered only), ``momentum_buffer`` (momentum only).

    Raises
    ------
    TypeError, ValueError
        On a non-number or negative hyper-parameter (``lr``, ``alpha``, ``eps``, ``weight_decay``,
        ``momentum``).

    References
    ----------
    Hinton, Lecture 6e of "Neural Networks for Machine Learning" (2012); Graves, "Generating Sequences
    With Recurrent Neural Networks", 2013 (centered). ``torch.optim.RMSprop``.
    """

    def __init__(self, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
                 momentum: float = 0.0, centered: bool = False, **common):
        super().__init__(lr, weight_decay, **common)
        self._set_hyper(alpha=alpha, eps=eps, momentum=momentum, centered=centered)

    @property
    def state_names(self):
        return (("square_avg",) + (("grad_avg",) if self.centered else ())
                + (("momentum_buffer",) if self.momentum > 0 else ()))

    def _apply(self, params, grads, state, step, seg, gscale, gclip):
        f = params.dtype
        dt = f.type
        empty = np.empty(0, f)
        w = dt(1 - self.alpha)
        _rmsprop_kernel(params.size, params, grads, state["square_avg"], state.get("grad_avg", empty),
                        state.get("momentum_buffer", empty), seg.lo, seg.hi, (-seg.lr).astype(f),
                        seg.weight_decay.astype(f), dt(self.alpha), w, dt(1) - w, dt(self.eps),
                        dt(self.momentum), self.centered, gscale, gclip)
