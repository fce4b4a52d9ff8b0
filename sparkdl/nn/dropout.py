"""Dropout: zero random elements in training, identity in evaluation."""
from __future__ import annotations

import numbers

import numpy as np

from sparkdl.nn.dropout_masks import dropout_mask
from sparkdl.nn.module import Module

__all__ = ["Dropout"]


class Dropout(Module):
    r"""Randomly zero elements with probability ``p`` during training, scaling the rest by :math:`1/(1-p)`.

    :math:`y = x \odot m / (1 - p)` with :math:`m_i \sim \mathrm{Bernoulli}(1 - p)`. Each training call with
    ``p > 0`` draws one 64-bit seed from the ``rng`` passed to :meth:`forward` (one draw whatever the shape) and
    keeps element :math:`(r, j)` when :math:`u(\mathrm{seed}, r \cdot R + j) \ge p`: ``r`` is the element's row
    (sample) along ``batch_axis`` counted in the whole batch, ``j`` its flat position within the row, ``R`` the
    elements per row and ``u`` a counter-based uniform (SplitMix64, see :mod:`sparkdl.kernels.dropout`). The same
    generator state therefore gives the same mask, and the mask does not depend on how a batch is split into parts
    (a part of rows ``[lo, hi)`` run with ``sparkdl.nn.dropout_masks.row_offset(lo)`` draws rows ``[lo, hi)``
    of the whole batch's mask; :mod:`sparkdl.step.threads` relies on it). ``p == 1`` zeroes everything. With
    ``training=False`` (or ``p == 0``) the layer is the identity and needs no ``rng``.

    Parameters
    ----------
    p : float, default 0.5
        Probability of zeroing an element, ``0 <= p <= 1``.

    Shapes
    ------
    - input: (*), any shape, samples along ``batch_axis`` (a keyword of :meth:`forward`, default 0); output: same
      shape

    Raises
    ------
    TypeError
        If ``p`` is not a real number, or the input is not an array of the layer's dtype.
    ValueError
        If ``p`` is outside [0, 1], ``training=True`` and ``p > 0`` with ``rng=None``, or ``batch_axis`` is not an
        axis of the input.

    References
    ----------
    Srivastava et al., 2014, "Dropout: A Simple Way to Prevent Neural Networks from Overfitting";
    Steele, Lea & Flood, 2014, "Fast splittable pseudorandom number generators"; ``torch.nn.Dropout`` (the same
    distribution; masks differ because the random streams differ).
    """

    def __init__(self, p: float = 0.5):
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, numbers.Real):
            raise TypeError(f"Dropout: p must be a real number in [0, 1], got {type(p).__name__}")
        if not 0 <= p <= 1:
            raise ValueError(f"Dropout: p (the drop probability) must be in [0, 1], got {p!r}")
        self.p = float(p)

    def forward(self, x, *, training=False, rng=None, batch_axis=0):
        """``(y, mask)``; ``batch_axis``: the input's sample axis (layers that hold their activations as
        (L, N, E) pass 1)."""
        if not isinstance(x, np.ndarray):
            raise TypeError(f"Dropout: input must be a numpy.ndarray, got {type(x).__name__}")
        if x.dtype != self.dtype:
            raise TypeError(f"Dropout: input dtype must be {self.dtype} (the layer's dtype), got {x.dtype}; "
                            f"convert with x.astype(np.{self.dtype})")
        if isinstance(batch_axis, bool) or not isinstance(batch_axis, (int, np.integer)) or \
                not 0 <= batch_axis < max(x.ndim, 1):
            raise ValueError(f"Dropout: batch_axis must be an axis of the input, 0 <= batch_axis < {max(x.ndim, 1)} "
                             f"for shape {x.shape}, got {batch_axis!r}")
        if not training or self.p == 0:
            return x, None
        if rng is None:
            raise ValueError("Dropout: training=True with p > 0 needs a random generator: pass "
                             "rng=numpy.random.default_rng(seed) to forward (or use training=False)")
        mask = dropout_mask(rng, x.shape, self.p, x.dtype, int(batch_axis))
        return x * mask, mask

    def backward(self, cache, grad_y, grad_params):
        mask = cache
        return grad_y if mask is None else grad_y * mask

    def get_config(self):
        return {"p": self.p}
