"""Shape layers without parameters: :class:`Flatten`, :class:`Reshape` and :class:`Identity`."""
from __future__ import annotations

import numpy as np

from sparkdl.nn._checks import check_array
from sparkdl.nn.module import Module

__all__ = ["Flatten", "Reshape", "Identity"]


def _int(name: str, arg: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: {arg} must be an int, got {type(value).__name__}")
    return int(value)


class Flatten(Module):
    """Flatten the axes ``start_dim..end_dim`` (inclusive) into one.

    Parameters
    ----------
    start_dim : int, default 1
        First axis to flatten (negative counts from the end); the default keeps the batch axis N.
    end_dim : int, default -1
        Last axis to flatten.

    Shapes
    ------
    - input: (N, *) ; output with the defaults: (N, prod(*))

    Raises
    ------
    TypeError
        Non-integer dims; input not an array of the layer's dtype.
    ValueError
        If a dim is out of range for the input, or ``start_dim`` comes after ``end_dim``.

    References
    ----------
    ``torch.nn.Flatten``.
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim = _int("Flatten", "start_dim", start_dim)
        self.end_dim = _int("Flatten", "end_dim", end_dim)

    def forward(self, x, *, training=False, rng=None):
        check_array(self, x)
        nd = max(x.ndim, 1)
        for arg, d in (("start_dim", self.start_dim), ("end_dim", self.end_dim)):
            if not -nd <= d < nd:
                raise ValueError(f"Flatten: {arg}={d} is out of range for a {x.ndim}-D input of shape {x.shape}; "
                                 f"expected -{nd} <= {arg} < {nd}")
        lo, hi = self.start_dim % nd, self.end_dim % nd
        if lo > hi:
            raise ValueError(f"Flatten: start_dim={self.start_dim} comes after end_dim={self.end_dim} for a "
                             f"{x.ndim}-D input of shape {x.shape}")
        if x.ndim == 0:
            return x.reshape(1), x.shape
        shape = x.shape[:lo] + (int(np.prod(x.shape[lo:hi + 1])),) + x.shape[hi + 1:]
        return x.reshape(shape), x.shape

    def backward(self, cache, grad_y, grad_params):
        return grad_y.reshape(cache)

    def get_config(self):
        return {"start_dim": self.start_dim, "end_dim": self.end_dim}


class Reshape(Module):
    """Reshape each sample to ``shape``, keeping the batch axis: (N, *) → (N, *shape).

    Parameters
    ----------
    shape : int or sequence of int
        Per-sample target shape; one entry may be -1 (inferred from the sample size).

    Shapes
    ------
    - input: (N, *) with ``prod(*) == prod(shape)``; output: (N, *shape)

    Raises
    ------
    TypeError
        Non-integer entries; input not an array of the layer's dtype.
    ValueError
        An entry that is 0 or below -1, more than one -1, or a sample size that does not fit ``shape``.

    References
    ----------
    ``torch.Tensor.reshape(N, *shape)``; ``torch.nn.Unflatten`` for the single-axis case.
    """

    def __init__(self, shape):
        super().__init__()
        shape = (shape,) if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool) else shape
        if not isinstance(shape, (tuple, list)):
            raise TypeError(f"Reshape: shape must be an int or a sequence of ints, got {type(shape).__name__}")
        self.shape = tuple(_int("Reshape", "shape entry", s) for s in shape)
        if any(s == 0 or s < -1 for s in self.shape) or self.shape.count(-1) > 1:
            raise ValueError(f"Reshape: shape entries must be positive, with at most one -1, got {self.shape}")

    def forward(self, x, *, training=False, rng=None):
        check_array(self, x)
        if x.ndim < 1:
            raise ValueError(f"Reshape: expected an input with a batch axis (N, *), got shape {x.shape}")
        n, size = x.shape[0], int(np.prod(x.shape[1:]))
        known = int(np.prod([s for s in self.shape if s != -1]))
        if (-1 in self.shape and size % known) or (-1 not in self.shape and size != known):
            raise ValueError(f"Reshape: a sample of shape {x.shape[1:]} ({size} values) cannot be reshaped to "
                             f"{self.shape}")
        target = tuple(size // known if s == -1 else s for s in self.shape)
        return x.reshape((n,) + target), x.shape

    def backward(self, cache, grad_y, grad_params):
        return grad_y.reshape(cache)

    def get_config(self):
        return {"shape": list(self.shape)}


class Identity(Module):
    """Return the input unchanged (a placeholder, e.g. an explicit identity shortcut).

    Shape: (*) → (*). Raises TypeError if the input is not an array of the layer's dtype.
    Reference: ``torch.nn.Identity``.
    """

    def forward(self, x, *, training=False, rng=None):
        check_array(self, x)
        return x, None

    def backward(self, cache, grad_y, grad_params):
        return grad_y
