"""LARS: layer-wise adaptive rate scaling (SGD with momentum and a per-tensor trust ratio)."""
from __future__ import annotations

import numpy as np
from numba import prange

from sparkdl.optim._elem import ElementwiseKernel, l2_grad, prep_grad
from sparkdl.optim.trust import TrustRatioOptimizer

__all__ = ["LARS"]


@ElementwiseKernel
def _grad_kernel(g, out, seg_lo, seg_hi, gscale, gclip):
    """``out = clip(g) * gscale`` on the pieces (the gradient whose norm enters the trust ratio)."""
    for s in range(seg_lo.size):
        for ii in prange(seg_lo[s], seg_hi[s]):
            i = np.uint64(ii)  # unsigned: see sparkdl.optim._elem
            out[i] = prep_grad(g[i], gscale, gclip)


@ElementwiseKernel
def _lars_kernel(p, g, buf, seg_lo, seg_hi, seg_neg_lr, seg_wd, seg_ratio, momentum, one_minus_dampening, nesterov,
                 first, gscale, gclip):
    for s in range(seg_lo.size):
        neg_lr = seg_neg_lr[s]
        wd = seg_wd[s]
        ratio = seg_ratio[s]
        for ii in prange(seg_lo[s], seg_hi[s]):
            i = np.uint64(ii)  # unsigned: see sparkdl.optim._elem
            pi = p[i]
            d = l2_grad(g[i], pi, wd, gscale, gclip) * ratio
            if momentum != 0:
                b = d if first else buf[i] * momentum + one_minus_dampening * d
                buf[i] = b
                d = d + momentum * b if nesterov else b
            p[i] = pi + neg_lr * d


class LARS(TrustRatioOptimizer):
    r"""LARS (You, Gitman & Ginsburg, 2017): SGD whose step for each parameter tensor is scaled by its
    trust ratio, for large-batch training.

    For every tensor :math:`w` with gradient :math:`g` (after clipping):

    .. math::

        \rho &= \eta \frac{\|w\|}{\|g\| + \lambda \|w\| + \epsilon}
               \quad (\rho = 1 \text{ if } \|w\| = 0 \text{ or } \|g\| = 0) \\
        d_t &= \rho\, (g + \lambda w) \\
        b_t &= d_t \ (t = 1), \qquad b_t = \mu b_{t-1} + (1 - \tau) d_t \ (t > 1) \\
        w &\leftarrow w - \gamma\, (d_t + \mu b_t \text{ if nesterov else } b_t)

    This is the paper's Algorithm 1 (:math:`v = m v + \gamma \lambda^l (\nabla L + \beta w)`) with the
    learning rate applied after the momentum buffer, as SGD in PyTorch and ``timm.optim.Lars`` do (the two
    are equal for a constant learning rate).

    Parameters
    ----------
    lr : float, default 1.0
        Learning rate :math:`\gamma \ge 0` (the global rate; the trust ratio supplies the per-layer scale).
    momentum : float, default 0
        :math:`\mu \ge 0`.
    dampening : float, default 0
        :math:`\tau`.
    weight_decay : float, default 0
        :math:`\lambda \ge 0`, added to the gradient and to the ratio's denominator.
    nesterov : bool, default False
        Nesterov momentum (needs ``momentum > 0`` and ``dampening == 0``).
    trust_coefficient : float, default 0.001
        :math:`\eta > 0`.
    eps : float, default 1e-8
        :math:`\epsilon \ge 0` in the ratio's denominator.
    always_adapt : bool, default False
        See :class:`~sparkdl.optim.trust.TrustRatioOptimizer`: by default tensors with zero weight decay are
        not adapted (:math:`\rho = 1`).
    schedule, clip_value, clip_norm
        See :class:`~sparkdl.optim.Optimizer`.

    State per shard: ``momentum_buffer`` (with ``momentum > 0``).

    Raises
    ------
    TypeError, ValueError
        On a non-number hyper-parameter, a negative ``lr``, ``momentum``, ``weight_decay`` or ``eps``,
        ``trust_coefficient <= 0``, Nesterov without momentum or with dampening, or a non-bool ``always_adapt``.

    References
    ----------
    You, Gitman & Ginsburg, 2017, "Large Batch Training of Convolutional Networks", arXiv:1708.03888;
    ``timm.optim.Lars``.
    """

    def __init__(self, lr: float = 1.0, momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False, trust_coefficient: float = 0.001, eps: float = 1e-8,
                 always_adapt: bool = False, **common):
        super().__init__(lr, weight_decay, always_adapt, **common)
        self._set_hyper(momentum=momentum, dampening=dampening, nesterov=nesterov)
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ValueError(f"{type(self).__name__}: nesterov needs momentum > 0 and dampening == 0, got "
                             f"momentum={momentum}, dampening={dampening}")
        self._set_hyper(trust_coefficient=trust_coefficient, eps=eps)

    @property
    def state_names(self):
        return ("momentum_buffer",) if self.momentum != 0 else ()

    def _direction(self, params, grads, state, step, pieces, gscale, gclip):
        out = np.zeros_like(grads)
        _grad_kernel(params.size, grads, out, pieces[0], pieces[1], gscale, gclip)
        return out

    def _ratio(self, w_norm, g_norm, weight_decay):
        if w_norm > 0 and g_norm > 0:
            return self.trust_coefficient * w_norm / (g_norm + weight_decay * w_norm + self.eps)
        return 1.0

    def _apply_pieces(self, params, grads, state, step, pieces, ratios, gscale, gclip):
        f = params.dtype
        buf = state["momentum_buffer"] if self.momentum != 0 else np.empty(0, f)
        lo, hi, lr, wd, _ = pieces
        _lars_kernel(params.size, params, grads, buf, lo, hi, (-lr).astype(f), wd.astype(f), ratios.astype(f),
                     f.type(self.momentum), f.type(1 - self.dampening), self.nesterov, step == 1, gscale, gclip)
