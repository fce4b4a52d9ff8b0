"""LAMB: layer-wise adaptive moments (Adam with decoupled weight decay and a per-tensor trust ratio)."""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.config import njit
from sparkdl.optim._elem import ElementwiseKernel, lerp, prep_grad, sq_avg
from sparkdl.optim.trust import TrustRatioOptimizer

__all__ = ["LAMB"]


@njit(inline="always")
def _moments(g, m, v, gscale, gclip, w1, one_minus_w1, beta2, one_minus_beta2):
    d = prep_grad(g, gscale, gclip)
    return lerp(m, d, w1, one_minus_w1), sq_avg(v, d, beta2, one_minus_beta2)


@njit(inline="always")
def _step(mi, vi, pi, inv_bc1, bc2_sqrt, eps, wd):
    """``m_hat / (sqrt(v_hat) + eps) + wd * p``: the update whose norm enters the trust ratio."""
    u = (mi * inv_bc1) / (np.sqrt(vi) / bc2_sqrt + eps)
    return u + wd * pi if wd != 0 else u


@ElementwiseKernel
def _lamb_direction(p, g, m, v, out, seg_lo, seg_hi, seg_wd, w1, one_minus_w1, beta2, one_minus_beta2, inv_bc1,
                    bc2_sqrt, eps, gscale, gclip):
    for s in range(seg_lo.size):
        wd = seg_wd[s]
        for ii in prange(seg_lo[s], seg_hi[s]):
            i = np.uint64(ii)  # unsigned: see sparkdl.optim._elem
            mi, vi = _moments(g[i], m[i], v[i], gscale, gclip, w1, one_minus_w1, beta2, one_minus_beta2)
            out[i] = _step(mi, vi, p[i], inv_bc1, bc2_sqrt, eps, wd)


@ElementwiseKernel
def _lamb_kernel(p, g, m, v, seg_lo, seg_hi, seg_neg_step, seg_wd, w1, one_minus_w1, beta2, one_minus_beta2,
                 inv_bc1, bc2_sqrt, eps, gscale, gclip):
    for s in range(seg_lo.size):
        wd = seg_wd[s]
        neg_step = seg_neg_step[s]
        for ii in prange(seg_lo[s], seg_hi[s]):
            i = np.uint64(ii)  # unsigned: see sparkdl.optim._elem
            mi, vi = _moments(g[i], m[i], v[i], gscale, gclip, w1, one_minus_w1, beta2, one_minus_beta2)
            m[i] = mi
            v[i] = vi
            pi = p[i]
            p[i] = pi + neg_step * _step(mi, vi, pi, inv_bc1, bc2_sqrt, eps, wd)


class LAMB(TrustRatioOptimizer):
    r"""LAMB (You et al., 2019): Adam moments, decoupled weight decay, and a per-tensor trust ratio, for
    large-batch training.

    For every tensor :math:`w` with gradient :math:`g` (after clipping), at step t:

    .. math::

        m_t &= \beta_1 m_{t-1} + (1 - \beta_1) g, \qquad v_t = \beta_2 v_{t-1} + (1 - \beta_2) g^2 \\
        u_t &= \frac{m_t / (1 - \beta_1^t)}{\sqrt{v_t} / \sqrt{1 - \beta_2^t} + \epsilon} + \lambda w \\
        w &\leftarrow w - \gamma \frac{\|w\|}{\|u_t\|} u_t
             \quad (\text{ratio } 1 \text{ if } \|w\| = 0 \text{ or } \|u_t\| = 0)

    (the paper's Algorithm 2 with :math:`\phi` the identity; bias corrections and :math:`\epsilon` placement
    as PyTorch's Adam and ``timm.optim.Lamb``).

    Parameters
    ----------
    lr : float, default 1e-3
        Learning rate :math:`\gamma \ge 0` (scaled per tensor by the trust ratio).
    betas : (float, float), default (0.9, 0.999)
        :math:`(\beta_1, \beta_2)`, each in ``[0, 1)``.
    eps : float, default 1e-6
        :math:`\epsilon \ge 0`, added to the denominator of :math:`u_t`.
    weight_decay : float, default 0.01
        Decoupled weight decay :math:`\lambda \ge 0`.
    always_adapt : bool, default False
        See :class:`~sparkdl.optim.trust.TrustRatioOptimizer` (tensors with zero weight decay get ratio 1,
        i.e. a plain Adam step, unless True).
    schedule, clip_value, clip_norm
        See :class:`~sparkdl.optim.Optimizer` (``timm``'s Lamb clips the global gradient norm at 1 by
        default; here clipping is off unless ``clip_norm`` is set).

    State per shard: ``exp_avg`` (:math:`m`), ``exp_avg_sq`` (:math:`v`).

    Raises
    ------
    TypeError, ValueError
        On a non-number hyper-parameter, a beta outside ``[0, 1)``, a negative ``lr``, ``eps`` or
        ``weight_decay``, or an ``always_adapt`` that is not a bool.

    References
    ----------
    You et al., 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes",
    arXiv:1904.00962 (ICLR 2020); ``timm.optim.Lamb``.
    """

    state_names = ("exp_avg", "exp_avg_sq")

    def __init__(self, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.01,
                 always_adapt: bool = False, **common):
        super().__init__(lr, weight_decay, always_adapt, **common)
        self._set_hyper(betas=betas, eps=eps)

    def _scalars(self, step, dt):
        beta1, beta2 = self.betas
        return (dt(1 - beta1), dt(1) - dt(1 - beta1), dt(beta2), dt(1 - beta2), dt(1 / (1 - beta1 ** step)),
                dt((1 - beta2 ** step) ** 0.5), dt(self.eps))

    def _direction(self, params, grads, state, step, pieces, gscale, gclip):
        out = np.zeros_like(params)
        _lamb_direction(params.size, params, grads, state["exp_avg"], state["exp_avg_sq"], out, pieces[0], pieces[1],
                        pieces[3].astype(params.dtype), *self._scalars(step, params.dtype.type), gscale, gclip)
        return out

    def _ratio(self, w_norm, u_norm, weight_decay):
        return w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0

    def _apply_pieces(self, params, grads, state, step, pieces, ratios, gscale, gclip):
        f = params.dtype
        lo, hi, lr, wd, _ = pieces
        _lamb_kernel(params.size, params, grads, state["exp_avg"], state["exp_avg_sq"], lo, hi,
                     (-(lr * ratios)).astype(f), wd.astype(f), *self._scalars(step, f.type), gscale, gclip)
