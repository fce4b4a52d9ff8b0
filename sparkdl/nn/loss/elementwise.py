"""Element-wise regression and binary losses: MSE, L1, smooth L1, binary cross-entropy (from logits and from
probabilities)."""
from __future__ import annotations

import numbers

import numpy as np

from sparkdl.kernels import loss as K
from sparkdl.nn.loss.base import Loss, _broadcasts, _check_float_input, _float_vector

__all__ = ["MSELoss", "L1Loss", "SmoothL1Loss", "BCEWithLogitsLoss", "BCELoss"]

class _ElementwiseLoss(Loss):
    """Losses on input and target of one shape, averaged over all elements."""

    def _pair(self, input, target):
        name = type(self).__name__
        _check_float_input(name, input, 1)
        if not isinstance(target, np.ndarray) or target.dtype.kind not in "fiub":
            what = target.dtype if isinstance(target, np.ndarray) else type(target).__name__
            raise TypeError(f"{name}: target must be a real-valued numpy.ndarray, got {what}")
        if target.shape != input.shape:
            raise ValueError(f"{name}: target shape {target.shape} must equal input shape {input.shape} "
                             f"(no broadcasting; reshape one of them)")
        return np.ascontiguousarray(target, dtype=input.dtype)

    def normalizer(self, target: np.ndarray) -> float:
        """Number of elements of ``target``."""
        if not isinstance(target, np.ndarray):
            raise TypeError(f"{type(self).__name__}: target must be a numpy.ndarray, got {type(target).__name__}")
        return float(target.size)

    def normalizer_weights(self, target: np.ndarray) -> np.ndarray:
        """1 per element."""
        if not isinstance(target, np.ndarray):
            raise TypeError(f"{type(self).__name__}: target must be a numpy.ndarray, got {type(target).__name__}")
        return np.ones(target.shape, np.float64)

    def _compute(self, input, target):
        t = self._pair(input, target)
        d = input - t
        losses, state = self._elementwise(d)
        return losses, float(d.size), state

    @staticmethod
    def _scaled(local_grad, g):
        return (local_grad * g).astype(local_grad.dtype, copy=False)


class MSELoss(_ElementwiseLoss):
    r"""Squared error :math:`\ell = (x - y)^2` per element. Shapes: input (*), target (*) of the same shape,
    float input. ``'mean'`` divides by the element count. Reference: ``torch.nn.MSELoss``."""

    def _elementwise(self, d):
        return np.square(d, dtype=np.float64), d

    def _backward(self, d, g):
        return self._scaled(d, 2.0 * g)


class L1Loss(_ElementwiseLoss):
    r"""Absolute error :math:`\ell = |x - y|` per element (gradient ``sign(x - y)``, 0 at 0).
    Shapes and reduction as :class:`MSELoss`. Reference: ``torch.nn.L1Loss``."""

    def _elementwise(self, d):
        return np.abs(d, dtype=np.float64), d

    def _backward(self, d, g):
        return self._scaled(np.sign(d), g)


class SmoothL1Loss(_ElementwiseLoss):
    r"""Huber-like loss: :math:`\ell = 0.5\, d^2 / \beta` if :math:`|d| < \beta` else :math:`|d| - 0.5\beta`,
    :math:`d = x - y`; ``beta=0`` is :class:`L1Loss`. Shapes and reduction as :class:`MSELoss`.

    Raises ValueError for ``beta < 0``. References: Girshick (2015), "Fast R-CNN"; ``torch.nn.SmoothL1Loss``.
    """

    def __init__(self, beta: float = 1.0, reduction: str = "mean"):
        super().__init__(reduction)
        if isinstance(beta, bool) or not isinstance(beta, numbers.Real):
            raise TypeError(f"SmoothL1Loss: beta must be a float, got {type(beta).__name__}")
        if not beta >= 0:
            raise ValueError(f"SmoothL1Loss: beta must be >= 0, got {beta}")
        self.beta = float(beta)

    def _elementwise(self, d):
        a = np.abs(d, dtype=np.float64)
        if self.beta == 0.0:
            return a, d
        quad = a < self.beta
        return np.where(quad, 0.5 * a * a / self.beta, a - 0.5 * self.beta), d

    def _backward(self, d, g):
        local = np.sign(d)
        if self.beta > 0.0:
            quad = np.abs(d) < self.beta
            local[quad] = d[quad] / d.dtype.type(self.beta)
        return self._scaled(local, g)

    def get_config(self):
        return {"beta": self.beta, **super().get_config()}


class BCEWithLogitsLoss(_ElementwiseLoss):
    r"""Sigmoid + binary cross-entropy, fused and stable:
    :math:`\ell = w\,[(1 - y)\,x + (1 + (p - 1) y)\,\mathrm{softplus}(-x)]`, i.e.
    :math:`-w\,[p\,y \log\sigma(x) + (1-y) \log(1-\sigma(x))]`.

    Parameters
    ----------
    weight : array_like, optional
        Per-element rescaling :math:`w`, broadcastable to the input shape (it never changes the input shape).
    pos_weight : sequence of C floats, optional
        Weight :math:`p` of positive examples per class, along the input's last axis (size C).
    reduction : {'mean', 'sum', 'none'}
        ``'mean'`` divides by the element count (as PyTorch; not by the weights).

    Shapes: input (*, C) float logits; target of the same shape with values in [0, 1].

    Raises
    ------
    TypeError, ValueError
        Non-float input; shape mismatch; ``weight`` not broadcastable; ``pos_weight`` not of size C.

    Reference: ``torch.nn.BCEWithLogitsLoss``.
    """

    def __init__(self, weight=None, pos_weight=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.weight = None if weight is None else np.array(weight, dtype=np.float64)
        if self.weight is not None and not np.all(np.isfinite(self.weight)):
            raise ValueError("BCEWithLogitsLoss: weight must be finite")
        self.pos_weight = _float_vector("BCEWithLogitsLoss", "pos_weight", pos_weight)

    def _compute(self, input, target):
        t = self._pair(input, target)
        x = np.ascontiguousarray(input)
        if self.weight is not None and not _broadcasts(self.weight, x.shape):
            raise ValueError(f"BCEWithLogitsLoss: weight of shape {self.weight.shape} does not broadcast to "
                             f"the input shape {x.shape}")
        pw = np.zeros(0, np.float64) if self.pos_weight is None else self.pos_weight
        if pw.size and pw.size != x.shape[-1]:
            raise ValueError(f"BCEWithLogitsLoss: pos_weight has {pw.size} entries but the input's last axis "
                             f"has C = {x.shape[-1]}")
        losses = K.bce_with_logits_forward(x.reshape(-1), t.reshape(-1), pw).reshape(x.shape)
        if self.weight is not None:
            losses = losses * self.weight
        return losses, float(x.size), (x, t, pw)

    def _backward(self, state, g):
        x, t, pw = state
        s = np.asarray(g, np.float64)
        if self.weight is not None:
            s = s * self.weight
        s = np.ascontiguousarray(np.broadcast_to(s, x.shape)).reshape(-1) if s.ndim else s.reshape(1)
        return K.bce_with_logits_backward(x.reshape(-1), t.reshape(-1), pw, s).reshape(x.shape)

    def get_config(self):
        return {"weight": None if self.weight is None else self.weight.tolist(),
                "pos_weight": None if self.pos_weight is None else self.pos_weight.tolist(),
                "reduction": self.reduction}


class BCELoss(_ElementwiseLoss):
    r"""Binary cross-entropy of probabilities:
    :math:`\ell = -w\,[y \max(\log x, -100) + (1 - y) \max(\log(1 - x), -100)]`.

    The logarithms are clamped at -100 as in PyTorch, so probabilities of exactly 0 or 1 (a saturated float32
    ``Sigmoid``) give a finite loss; the gradient is PyTorch's :math:`w (x - y) / \max(x (1 - x), 10^{-12})`.
    :class:`BCEWithLogitsLoss` on the logits is the stabler fused form.

    Parameters
    ----------
    weight : array_like, optional
        Per-element rescaling :math:`w`, broadcastable to the input shape.
    reduction : {'mean', 'sum', 'none'}
        ``'mean'`` divides by the element count (as PyTorch; not by the weights).

    Shapes: input (*) float probabilities in [0, 1]; target of the same shape with values in [0, 1].

    Raises
    ------
    TypeError, ValueError
        Non-float input; shape mismatch; ``weight`` not broadcastable or not finite; an input value outside
        [0, 1] (NaN included), naming the first one.

    Reference: ``torch.nn.BCELoss``.
    """

    def __init__(self, weight=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.weight = None if weight is None else np.array(weight, dtype=np.float64)
        if self.weight is not None and not np.all(np.isfinite(self.weight)):
            raise ValueError("BCELoss: weight must be finite")

    def _compute(self, input, target):
        t = self._pair(input, target)
        p = np.ascontiguousarray(input)
        outside = ~((p >= 0) & (p <= 1))
        if outside.any():
            first = int(np.argmax(outside.reshape(-1)))
            index = ", ".join(str(int(i)) for i in np.unravel_index(first, p.shape))
            raise ValueError(f"BCELoss: input must hold probabilities in [0, 1], got input[{index}] = "
                             f"{p.reshape(-1)[first]}; apply a Sigmoid first, or use BCEWithLogitsLoss on the logits")
        if self.weight is not None and not _broadcasts(self.weight, p.shape):
            raise ValueError(f"BCELoss: weight of shape {self.weight.shape} does not broadcast to the input shape "
                             f"{p.shape}")
        losses = K.bce_forward(p.reshape(-1), t.reshape(-1)).reshape(p.shape)
        if self.weight is not None:
            losses = losses * self.weight
        return losses, float(p.size), (p, t)

    def _backward(self, state, g):
        p, t = state
        s = np.asarray(g, np.float64)
        if self.weight is not None:
            s = s * self.weight
        s = np.ascontiguousarray(np.broadcast_to(s, p.shape)).reshape(-1) if s.ndim else s.reshape(1)
        return K.bce_backward(p.reshape(-1), t.reshape(-1), s).reshape(p.shape)

    def get_config(self):
        return {"weight": None if self.weight is None else self.weight.tolist(), "reduction": self.reduction}
