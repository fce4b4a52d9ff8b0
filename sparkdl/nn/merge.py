"""Merge layers: modules that take several tensors and return one, the joins of a :class:`~sparkdl.nn.Graph`.

A merge layer's ``forward`` takes a tuple ``(x_1, ..., x_k)`` (k >= 2) and ``backward`` returns the tuple of
input gradients, in the same order. :class:`Add` sums equally-shaped tensors (a residual join);
:class:`Concatenate` joins tensors along one axis (an Inception/DenseNet join). Neither has parameters.
(The containers :class:`~sparkdl.nn.Residual` and :class:`~sparkdl.nn.Concat` wrap branches instead; merge
layers join tensors that a graph has already computed.)
"""
from __future__ import annotations

import numpy as np

from sparkdl.nn.module import Module

__all__ = ["Add", "Concatenate"]


def _check_inputs(layer, xs) -> tuple:
    name = type(layer).__name__
    if not isinstance(xs, (tuple, list)) or len(xs) < 2:
        got = f"a {type(xs).__name__}" if not isinstance(xs, (tuple, list)) else f"{len(xs)} tensor(s)"
        raise TypeError(f"{name}: input must be a tuple of at least 2 arrays (a merge layer joins several "
                        f"tensors), got {got}")
    for i, x in enumerate(xs):
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{name}: input {i} must be a numpy.ndarray, got {type(x).__name__}")
        if x.dtype != layer.dtype:
            raise TypeError(f"{name}: input {i} dtype must be {layer.dtype} (the layer's dtype), got {x.dtype}; "
                            f"convert with x.astype(np.{layer.dtype})")
    return tuple(xs)


class Add(Module):
    r"""Element-wise sum of k >= 2 tensors of one shape, :math:`y = \sum_i x_i`.

    Shapes
    ------
    - input: a tuple of k arrays, each (*) with the same shape; output: (*)

    Raises
    ------
    TypeError
        If the input is not a tuple of >= 2 arrays of the layer's dtype.
    ValueError
        If the shapes differ (no broadcasting: a residual join adds tensors of one shape).

    References
    ----------
    ONNX ``Add``; Keras ``layers.Add``; BigDL ``CAddTable``.
    """

    def forward(self, x, *, training=False, rng=None):
        xs = _check_inputs(self, x)
        shapes = [a.shape for a in xs]
        if any(s != shapes[0] for s in shapes):
            raise ValueError(f"Add: all inputs must have the same shape, got {shapes}")
        y = xs[0] + xs[1]
        for a in xs[2:]:
            y += a
        return y, len(xs)

    def backward(self, cache, grad_y, grad_params):
        # Each input gets its own array, so a consumer's backward can never alias another's gradient.
        return (grad_y,) + tuple(grad_y.copy() for _ in range(cache - 1))


class Concatenate(Module):
    """Join k >= 2 tensors along ``dim`` (default 1, the channel axis): ``numpy.concatenate(xs, axis=dim)``.

    Parameters
    ----------
    dim : int, default 1
        The joined axis (negative counts from the end). Joining along the batch axis 0 is refused.

    Shapes
    ------
    - input: a tuple of arrays (N, ..., D_i, ...) equal except along ``dim``; output (N, ..., sum D_i, ...)

    Raises
    ------
    TypeError
        Non-integer ``dim``; an input that is not a tuple of >= 2 arrays of the layer's dtype.
    ValueError
        ``dim`` naming the batch axis or out of range; inputs that disagree on another axis.

    References
    ----------
    ``torch.cat``; ONNX ``Concat``; Keras ``layers.Concatenate``; BigDL ``JoinTable``.
    """

    def __init__(self, dim: int = 1):
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise TypeError(f"Concatenate: dim must be an int, got {type(dim).__name__}")
        if dim == 0:
            raise ValueError("Concatenate: dim=0 is the batch axis; samples cannot be joined across the batch")
        self.dim = int(dim)

    def forward(self, x, *, training=False, rng=None):
        xs = _check_inputs(self, x)
        nd = xs[0].ndim
        if not -nd <= self.dim < nd or self.dim % nd == 0:
            raise ValueError(f"Concatenate: dim={self.dim} is out of range or the batch axis for {nd}-D inputs; "
                             f"expected 1 <= dim < {nd} or -{nd - 1} <= dim < 0")
        shapes = [a.shape for a in xs]
        d = self.dim % nd
        if any(len(s) != nd or s[:d] + s[d + 1:] != shapes[0][:d] + shapes[0][d + 1:] for s in shapes):
            raise ValueError(f"Concatenate: input shapes {shapes} cannot be joined along dim {self.dim}")
        sizes = [s[d] for s in shapes]
        return np.concatenate(xs, axis=d), (d, sizes)

    def backward(self, cache, grad_y, grad_params):
        d, sizes = cache
        parts = np.split(grad_y, np.cumsum(sizes)[:-1], axis=d)
        return tuple(np.ascontiguousarray(p) for p in parts)

    def get_config(self):
        return {"dim": self.dim}
