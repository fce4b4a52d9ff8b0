"""Dropout: zero random elements in training, identity in evaluation."""
from __future__ import annotations

import numbers

import numpy as np

from sparkdl.nn.module import Module

__all__ = ["Dropout"]


class Dropout(Module):
    r"""Randomly zero elements with probability ``p`` during training, scaling the rest by :math:`1/(1-p)`.

    :math:`y = x \odot m / (1 - p)` with :math:`m_i \sim \mathrm{Bernoulli}(1 - p)` drawn from the ``rng``
    passed to :meth:`forward` (element ``i`` is kept when ``u_i >= p`` for ``u = rng.random(x.shape)``), so
    the same generator state gives the same mask; ``p == 1`` zeroes everything. With ``training=False`` (or
    ``p == 0``) the layer is the identity and needs no ``rng``.

    Parameters
    ----------
    p : float, default 0.5
        Probability of zeroing an element, ``0 <= p <= 1``.

    Shapes
    ------
    - input: (*), any shape; output: same shape

    Raises
    ------
    TypeError
        If ``p`` is not a real number, or the input is not an array of the layer's dtype.
    ValueError
        If ``p`` is outside [0, 1], or ``training=True`` and ``p > 0`` with ``rng=None``.

    References
    ----------
    Srivastava et al., 2014, "Dropout: A Simple Way to Prevent Neural Networks from Overfitting";
    ``torch.nn.Dropout`` (the same distribution; masks differ because the random streams differ).
    """

    def __init__(self, p: float = 0.5):
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, numbers.Real):
            raise TypeError(f"Dropout: p must be a real number in [0, 1], got {type(p).__name__}")
        if not 0 <= p <= 1:
            raise ValueError(f"Dropout: p (the drop probability) must be in [0, 1], got {p!r}")
        self.p = float(p)

    def forward(self, x, *, training=False, rng=None):
        if not isinstance(x, np.ndarray):
            raise TypeError(f"Dropout: input must be a numpy.ndarray, got {type(x).__name__}")
        if x.dtype != self.dtype:
            raise TypeError(f"Dropout: input dtype must be {self.dtype} (the layer's dtype), got {x.dtype}; "
                            f"convert with x.astype(np.{self.dtype})")
        if not training or self.p == 0:
            return x, None
        if rng is None:
            raise ValueError("Dropout: training=True with p > 0 needs a random generator: pass "
                             "rng=numpy.random.default_rng(seed) to forward (or use training=False)")
        if self.p == 1:
            mask = np.zeros(x.shape, x.dtype)
        else:
            mask = rng.random(x.shape, dtype=x.dtype) >= x.dtype.type(self.p)
            mask = mask.astype(x.dtype)
            mask *= x.dtype.type(1.0 / (1.0 - self.p))
        return x * mask, mask

    def backward(self, cache, grad_y, grad_params):
        mask = cache
        return grad_y if mask is None else grad_y * mask

    def get_config(self):
        return {"p": self.p}
