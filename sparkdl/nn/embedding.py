"""Lookup tables: :class:`Embedding` (one vector per index) and :class:`EmbeddingBag` (sum or mean of the
vectors of each bag of indices). Every index is validated before any kernel reads the table."""
from __future__ import annotations

import numpy as np

from sparkdl.kernels import embedding as K
from sparkdl.nn import init
from sparkdl.nn._checks import check_positive_int
from sparkdl.nn.module import Module
from sparkdl.nn.sequence import PaddedSequence, check_lengths

__all__ = ["Embedding", "EmbeddingBag"]


def _padding_idx(name, padding_idx, num_embeddings):
    if padding_idx is None:
        return None
    if isinstance(padding_idx, bool) or not isinstance(padding_idx, (int, np.integer)):
        raise TypeError(f"{name}: padding_idx must be an int or None, got {type(padding_idx).__name__}")
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"{name}: padding_idx must be within [-{num_embeddings}, {num_embeddings - 1}] "
                         f"(num_embeddings={num_embeddings}), got {padding_idx}")
    return int(padding_idx) % num_embeddings


def _check_ids(layer, ids, what="input", where=None):
    """``ids`` as int64; TypeError unless integer, ValueError naming the first index outside the table."""
    name = type(layer).__name__
    if not isinstance(ids, np.ndarray):
        raise TypeError(f"{name}: {what} must be a numpy.ndarray of integer indices, got {type(ids).__name__}")
    if ids.dtype.kind not in "iu":
        raise TypeError(f"{name}: {what} dtype must be an integer type (indices into the table), got {ids.dtype}; "
                        "convert with x.astype(np.int64)")
    v = layer.num_embeddings
    bad = (ids < 0) | (ids >= v)
    if where is not None:
        bad &= where
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name}: index {int(ids[pos])} at {what} position {pos if len(pos) > 1 else pos[0]} is "
                         f"out of range; valid indices are 0..{v - 1} (num_embeddings={v})")
    return ids.astype(np.int64, copy=False)


class _Table(Module):
    """A (num_embeddings, embedding_dim) table initialised N(0, 1) with the padding row zero."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx):
        super().__init__()
        name = type(self).__name__
        self.num_embeddings = check_positive_int(name, "num_embeddings", num_embeddings)
        self.embedding_dim = check_positive_int(name, "embedding_dim", embedding_dim)
        self.padding_idx = _padding_idx(name, padding_idx, self.num_embeddings)
        self.add_parameter("weight", (self.num_embeddings, self.embedding_dim))
        self.reset_parameters(np.random.default_rng())

    def reset_parameters(self, rng):
        init.normal_(self.weight, rng)
        if self.padding_idx is not None:
            self.weight[self.padding_idx] = 0


class Embedding(_Table):
    r"""A lookup table: index ``i`` -> row ``weight[i]``.

    Parameters
    ----------
    num_embeddings : int
        Table size V (indices are 0..V-1).
    embedding_dim : int
        Size E of each vector.
    padding_idx : int, optional
        This row is initialised to zero and gets no gradient (negative values count from the end, as in
        PyTorch).

    Shapes
    ------
    - input: (*) integer indices, or a :class:`~sparkdl.nn.PaddedSequence` of (N, T) indices whose padded
      steps are not looked up (their output is zero, their index is not checked)
    - output: (*, E) in the layer's dtype (a ``PaddedSequence`` for a ``PaddedSequence`` input)
    - ``weight``: (V, E), init N(0, 1), the ``padding_idx`` row zero

    ``backward`` returns None (indices have no gradient).

    Raises
    ------
    TypeError
        Non-integer sizes; an input that is not an integer array.
    ValueError
        Non-positive sizes or a ``padding_idx`` outside the table; any index < 0 or >= V (the message names
        the index, its position and the valid range).

    References
    ----------
    ``torch.nn.Embedding`` (``max_norm``, ``scale_grad_by_freq`` and ``sparse`` are not supported).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None):
        super().__init__(num_embeddings, embedding_dim, padding_idx)

    def forward(self, x, *, training=False, rng=None):
        if isinstance(x, PaddedSequence):
            ids = x.data
            if not isinstance(ids, np.ndarray) or ids.ndim != 2:
                raise ValueError(f"Embedding: a PaddedSequence input must hold (N, T) indices, got "
                                 f"{getattr(ids, 'shape', type(ids).__name__)}")
            lengths = check_lengths("Embedding", x.lengths, *ids.shape)
            valid = np.arange(ids.shape[1]) < lengths[:, None]
            ids = np.where(valid, _check_ids(self, ids, where=valid), -1)
        else:
            ids = _check_ids(self, x)
        flat = ids.reshape(-1)
        out = self.weight[np.maximum(flat, 0)]
        out[flat < 0] = 0
        out = out.reshape(*ids.shape, self.embedding_dim)
        if isinstance(x, PaddedSequence):
            out = PaddedSequence(out, x.lengths)
        return out, flat

    def backward(self, cache, grad_y, grad_params):
        flat = cache
        if self.padding_idx is not None:
            flat = np.where(flat == self.padding_idx, -1, flat)
        if isinstance(grad_y, PaddedSequence):
            grad_y = grad_y.data
        g = self.grad_views(grad_params)["weight"]
        g[...] = 0
        K.embedding_backward(flat, np.ascontiguousarray(grad_y, dtype=self.dtype).reshape(-1, self.embedding_dim), g)
        return None

    def get_config(self):
        return {"num_embeddings": self.num_embeddings, "embedding_dim": self.embedding_dim,
                "padding_idx": self.padding_idx}


class EmbeddingBag(_Table):
    r"""Sum or mean of the table rows of each bag of indices, without materialising the (*, E) lookups.

    Parameters
    ----------
    num_embeddings, embedding_dim, padding_idx
        As :class:`Embedding`; entries equal to ``padding_idx`` are left out of their bag (and of the count a
        mean divides by).
    mode : {'mean', 'sum'}, default 'mean'

    Shapes
    ------
    The input is one of (indices always integer):

    - (B, L): B bags of L indices each;
    - ``(input, offsets)`` or ``(input, offsets, per_sample_weights)``: 1-D ``input`` of all indices, bag b
      is ``input[offsets[b]:offsets[b + 1]]`` (the last runs to the end); ``offsets[0] == 0``, non-decreasing;
      ``per_sample_weights`` (same shape as ``input``, layer dtype, ``mode='sum'`` only) scales each entry and
      is treated as a constant;
    - a :class:`~sparkdl.nn.PaddedSequence` of (B, T) indices: bag b is its first ``lengths[b]`` entries.

    Output: (B, E); an empty bag gives zeros. ``weight``: (V, E), init N(0, 1), the ``padding_idx`` row zero.
    ``backward`` returns None.

    Raises
    ------
    TypeError, ValueError
        As :class:`Embedding`, plus: bad ``mode``, malformed offsets, ``per_sample_weights`` with ``mode='mean'``
        or of the wrong shape/dtype.

    References
    ----------
    ``torch.nn.EmbeddingBag`` (``mode='max'``, ``include_last_offset`` and ``max_norm`` are not supported).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, mode: str = "mean", padding_idx: int | None = None):
        if mode not in ("mean", "sum"):
            raise ValueError(f"EmbeddingBag: mode must be 'mean' or 'sum', got {mode!r}")
        self.mode = mode
        super().__init__(num_embeddings, embedding_dim, padding_idx)

    def _bags(self, x):
        """(flat ids with -1 for skipped entries, bag of each entry, per-entry weights, number of bags)."""
        weights = np.zeros(0, self.dtype)
        if isinstance(x, PaddedSequence):
            ids = x.data
            if not isinstance(ids, np.ndarray) or ids.ndim != 2:
                raise ValueError("EmbeddingBag: a PaddedSequence input must hold (B, T) indices")
            lengths = check_lengths("EmbeddingBag", x.lengths, *ids.shape)
            valid = np.arange(ids.shape[1]) < lengths[:, None]
            ids = np.where(valid, _check_ids(self, ids, where=valid), -1)
            return ids.reshape(-1), np.repeat(np.arange(ids.shape[0]), ids.shape[1]), weights, ids.shape[0]
        if isinstance(x, tuple):
            if len(x) not in (2, 3):
                raise ValueError("EmbeddingBag: a tuple input must be (input, offsets) or (input, offsets, "
                                 f"per_sample_weights), got {len(x)} items")
            ids = _check_ids(self, x[0])
            if ids.ndim != 1:
                raise ValueError(f"EmbeddingBag: with offsets, input must be 1-D, got shape {ids.shape}")
            offsets = x[1]
            if not isinstance(offsets, np.ndarray) or offsets.dtype.kind not in "iu" or offsets.ndim != 1 \
                    or offsets.size == 0:
                raise TypeError("EmbeddingBag: offsets must be a non-empty 1-D integer numpy array")
            if offsets[0] != 0 or (np.diff(offsets) < 0).any() or offsets[-1] > ids.size:
                raise ValueError(f"EmbeddingBag: offsets must start at 0, be non-decreasing and be <= "
                                 f"len(input) = {ids.size}, got {offsets.tolist()[:10]}")
            if len(x) == 3 and x[2] is not None:
                if self.mode != "sum":
                    raise ValueError("EmbeddingBag: per_sample_weights are only supported with mode='sum' "
                                     f"(as in PyTorch), got mode={self.mode!r}")
                weights = x[2]
                if not isinstance(weights, np.ndarray) or weights.dtype != self.dtype or weights.shape != ids.shape:
                    raise TypeError(f"EmbeddingBag: per_sample_weights must be a {self.dtype} array of shape "
                                    f"{ids.shape} (like input), got {getattr(weights, 'dtype', type(weights))} "
                                    f"{getattr(weights, 'shape', '')}")
            bags = np.repeat(np.arange(offsets.size), np.diff(np.append(offsets, ids.size)))
            return ids, bags, weights, offsets.size
        ids = _check_ids(self, x)
        if ids.ndim != 2:
            raise ValueError(f"EmbeddingBag: expected 2-D input (B, L) without offsets, got shape {ids.shape}")
        return ids.reshape(-1), np.repeat(np.arange(ids.shape[0]), ids.shape[1]), weights, ids.shape[0]

    def forward(self, x, *, training=False, rng=None):
        ids, bags, weights, b = self._bags(x)
        if self.padding_idx is not None:
            ids = np.where(ids == self.padding_idx, -1, ids)
        scale = np.ones(b, self.dtype)
        if self.mode == "mean":
            counts = np.bincount(bags[ids >= 0], minlength=b)
            scale = (1.0 / np.maximum(counts, 1)).astype(self.dtype)
        out = np.zeros((b, self.embedding_dim), self.dtype)
        K.bag_forward(ids, bags, weights, scale, self.weight, out)
        return out, (ids, bags, weights, scale)

    def backward(self, cache, grad_y, grad_params):
        ids, bags, weights, scale = cache
        g = self.grad_views(grad_params)["weight"]
        g[...] = 0
        K.bag_backward(ids, bags, weights, scale, np.ascontiguousarray(grad_y, dtype=self.dtype), g)
        return None

    def get_config(self):
        return {"num_embeddings": self.num_embeddings, "embedding_dim": self.embedding_dim, "mode": self.mode,
                "padding_idx": self.padding_idx}
