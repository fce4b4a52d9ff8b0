"""Per-sample weights around any loss."""
from __future__ import annotations

import numpy as np

from sparkdl.nn.loss.base import LOSS_REGISTRY, Loss

__all__ = ["SampleWeightedLoss"]


class SampleWeightedLoss(Loss):
    r"""``loss`` with one weight per sample, for data that carry their weights next to their targets.

    With per-element losses :math:`\ell_{ij}` and normalizer shares :math:`n_{ij}` of the wrapped loss (for
    ``'none'`` and :meth:`Loss.normalizer_weights`: 1 per element, or the class weight of the target), and
    sample weights :math:`w_i \ge 0`:

    * ``'sum'``: :math:`\sum_{ij} w_i \ell_{ij}`;
    * ``'mean'``: :math:`\sum_{ij} w_i \ell_{ij} / \sum_{ij} w_i n_{ij}` — PySpark's weighted mean
      (``sum_i w_i loss_i / sum_i w_i`` for one loss element per sample); with all weights 1 it equals the wrapped
      loss, and an integer weight :math:`k` equals :math:`k` copies of the sample;
    * ``'none'``: :math:`w_i \ell_{ij}`.

    Parameters
    ----------
    loss : Loss or dict
        The wrapped loss (its own ``reduction`` is ignored), or ``{"class": name, "config": {...}}``.
    target_shape : sequence of int, default ()
        Per-sample shape of the wrapped loss's target, e.g. ``()`` for class indices, ``(K,)`` for K targets.
    target_dtype : str, default 'int64'
        dtype the wrapped target is converted to.
    reduction : {'mean', 'sum', 'none'}

    Shapes
    ------
    - input: what the wrapped loss takes, (N, ...)
    - target: (N, prod(target_shape) + 1) float: the flattened targets, then the weight in the last column

    Raises
    ------
    ValueError
        A target of the wrong shape, or a weight that is negative, NaN or infinite (naming the first one).
    """

    def __init__(self, loss, target_shape=(), target_dtype: str = "int64", reduction: str = "mean"):
        super().__init__(reduction)
        if isinstance(loss, dict):
            loss = LOSS_REGISTRY[loss["class"]].from_config(loss["config"])
        if not isinstance(loss, Loss):
            raise TypeError(f"SampleWeightedLoss: loss must be a sparkdl Loss, got {type(loss).__name__}")
        self.loss = loss
        self.target_shape = tuple(int(d) for d in target_shape)
        self.target_dtype = np.dtype(target_dtype).name

    def _split(self, target):
        if not isinstance(target, np.ndarray) or target.dtype.kind not in "fiu":
            raise TypeError(f"SampleWeightedLoss: target must be a numeric numpy.ndarray, got "
                            f"{getattr(target, 'dtype', type(target).__name__)}")
        m = int(np.prod(self.target_shape))
        if target.ndim != 2 or target.shape[1] != m + 1:
            raise ValueError(f"SampleWeightedLoss: target must have shape (N, {m + 1}) (the {m} target values of "
                             f"each sample, then its weight), got {target.shape}")
        w = target[:, m].astype(np.float64)
        bad = ~(np.isfinite(w) & (w >= 0))
        if bad.any():
            r = int(np.argmax(bad))
            raise ValueError(f"SampleWeightedLoss: sample weights must be finite and >= 0, got {w[r]} for sample {r}")
        t = target[:, :m].reshape(len(target), *self.target_shape).astype(self.target_dtype)
        return t, w

    @staticmethod
    def _per_element(w, like):
        return w.reshape(len(w), *([1] * (like.ndim - 1)))

    def normalizer_weights(self, target):
        t, w = self._split(target)
        share = self.loss.normalizer_weights(t)
        return share * self._per_element(w, share)

    def normalizer(self, target):
        """The summed weighted normalizer shares, :math:`\\sum_{ij} w_i n_{ij}`."""
        return float(np.sum(self.normalizer_weights(target)))

    def _compute(self, input, target):
        t, w = self._split(target)
        losses, _, state = self.loss._compute(input, t)
        scale = self._per_element(w, losses)
        share = self.loss.normalizer_weights(t)
        return losses * scale, float(np.sum(share * self._per_element(w, share))), (state, scale, losses.shape)

    def _backward(self, state, g):
        inner, scale, shape = state
        scaled = np.broadcast_to(np.asarray(g, np.float64) * scale, shape)
        return self.loss._backward(inner, np.ascontiguousarray(scaled))

    def get_config(self):
        return {"loss": {"class": type(self.loss).__name__, "config": self.loss.get_config()},
                "target_shape": list(self.target_shape), "target_dtype": self.target_dtype,
                "reduction": self.reduction}
