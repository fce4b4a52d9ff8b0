"""Variable-length sequences between layers: :class:`PaddedSequence` (a padded batch with its lengths),
:class:`SequenceLengths` (reads the lengths of right-padded token-id rows) and :class:`RNNOutput` (picks
what a recurrent layer's ``(output, h_n)`` hands on, so RNNs compose in :class:`~sparkdl.nn.Sequential`).

A network for token sequences reads, e.g.::

    Sequential(SequenceLengths(), Embedding(V, 128, padding_idx=0), LSTM(128, 128, batch_first=True),
               RNNOutput("last"), Linear(128, 2))

``SequenceLengths`` turns an ``(N, T)`` id matrix padded with ``-1`` (what the Spark ML stages produce for an
``array<int>`` column) into ``PaddedSequence(ids, lengths)``; ``Embedding`` keeps the lengths, and the LSTM
skips the padded steps (PyTorch's ``pack_padded_sequence``).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sparkdl.nn.module import Module

__all__ = ["PaddedSequence", "SequenceLengths", "RNNOutput", "check_lengths"]


class PaddedSequence(NamedTuple):
    """A batch of sequences padded to a common length T, with the true length of each.

    Attributes
    ----------
    data : ndarray
        (N, T, *) when batch-first (what :class:`SequenceLengths` and :class:`~sparkdl.nn.Embedding` produce),
        or (T, N, *) for a recurrent layer with ``batch_first=False``.
    lengths : ndarray of int64, shape (N,)
        Valid steps per sequence, ``0 <= lengths[n] <= T``; steps ``t >= lengths[n]`` are padding.
    """

    data: np.ndarray
    lengths: np.ndarray


def check_lengths(layer: str, lengths, n: int, t: int) -> np.ndarray:
    """``lengths`` as int64 of shape (n,) with values in [0, t]; TypeError/ValueError naming ``layer`` otherwise."""
    if not isinstance(lengths, np.ndarray) or lengths.dtype.kind not in "iu":
        raise TypeError(f"{layer}: PaddedSequence.lengths must be an integer numpy array, got "
                        f"{getattr(lengths, 'dtype', type(lengths).__name__)}")
    if lengths.shape != (n,):
        raise ValueError(f"{layer}: PaddedSequence.lengths must have shape ({n},) (one per sequence), "
                         f"got {lengths.shape}")
    bad = (lengths < 0) | (lengths > t)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{layer}: lengths[{i}] = {int(lengths[i])} is outside [0, {t}] (the padded length T)")
    return lengths.astype(np.int64, copy=False)


class SequenceLengths(Module):
    """Read the length of each right-padded row of token ids: ``(N, T)`` ids -> ``PaddedSequence(ids, lengths)``.

    A row's length is the number of entries before its first ``padding_value``; every entry after it must be
    ``padding_value`` too. Padded positions are set to id 0 in the output (layers that take a
    ``PaddedSequence`` ignore them).

    Parameters
    ----------
    padding_value : int, default -1
        The filler of padded positions; must be negative so that it cannot be a token id.

    Shapes
    ------
    - input: (N, T), integer or floating dtype holding integral values (e.g. the float32 blocks of the Spark
      data path; exact for ids < 2**24)
    - output: ``PaddedSequence(ids int64 (N, T), lengths int64 (N,))``; no gradient flows back to the input

    Raises
    ------
    TypeError
        If the input is not a numeric 2-D array.
    ValueError
        Naming row and position: a non-integral or negative id, or an id after padding.
    """

    def __init__(self, padding_value: int = -1):
        super().__init__()
        if isinstance(padding_value, bool) or not isinstance(padding_value, (int, np.integer)):
            raise TypeError(f"SequenceLengths: padding_value must be an int, got {type(padding_value).__name__}")
        if padding_value >= 0:
            raise ValueError(f"SequenceLengths: padding_value must be negative (ids are >= 0), got {padding_value}")
        self.padding_value = int(padding_value)

    def forward(self, x, *, training=False, rng=None):
        if not isinstance(x, np.ndarray) or x.dtype.kind not in "iuf":
            raise TypeError(f"SequenceLengths: input dtype must be numeric (integral token ids), got "
                            f"{getattr(x, 'dtype', type(x).__name__)}")
        if x.ndim != 2:
            raise ValueError(f"SequenceLengths: expected 2-D input (N, T) of token ids, got shape {x.shape}")
        pad = x == self.padding_value
        bad = ~np.isfinite(x) | (x < 0) | (x != np.floor(x)) if x.dtype.kind == "f" else x < 0
        bad &= ~pad
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise ValueError(f"SequenceLengths: row {r}, position {c}: {x[r, c].item()!r} is not a token id (ids are "
                             f"integers >= 0; padding is {self.padding_value})")
        lengths = np.where(pad.any(axis=1), np.argmax(pad, axis=1), x.shape[1]).astype(np.int64)
        after = np.arange(x.shape[1]) >= lengths[:, None]
        if (after & ~pad).any():
            r, c = np.argwhere(after & ~pad)[0]
            raise ValueError(f"SequenceLengths: row {r}: id {x[r, c].item()!r} at position {c} follows padding at "
                             f"position {lengths[r]}; pad rows at the end only")
        ids = np.where(pad, 0, x).astype(np.int64)
        return PaddedSequence(ids, lengths), None

    def backward(self, cache, grad_y, grad_params):
        return None

    def get_config(self):
        return {"padding_value": self.padding_value}


class RNNOutput(Module):
    """Select what a recurrent layer (:class:`~sparkdl.nn.RNN`, ``LSTM``, ``GRU``) passes to the next layer.

    Parameters
    ----------
    select : {'last', 'output'}, default 'last'
        ``'last'``: the final hidden state of the last layer, directions concatenated (forward, reverse) —
        ``torch.cat([h_n[-2], h_n[-1]], 1)`` when bidirectional, ``h_n[-1]`` otherwise; for padded sequences
        this is the state at each row's last valid step. ``'output'``: the per-step output as a plain array
        (zero at padded steps).

    Shapes
    ------
    - input: ``(output, h_n)`` or ``(output, (h_n, c_n))`` as the recurrent layers return; ``h_n``
      (num_layers * D, N, H)
    - output: (N, D * H) for ``'last'``; the layer's output array (N, T, D * H) or (T, N, D * H) for ``'output'``
    """

    _SELECT = ("last", "output")

    def __init__(self, select: str = "last"):
        super().__init__()
        if select not in self._SELECT:
            raise ValueError(f"RNNOutput: select must be one of {self._SELECT}, got {select!r}")
        self.select = select

    def forward(self, x, *, training=False, rng=None):
        if not (isinstance(x, tuple) and len(x) == 2):
            raise TypeError("RNNOutput: input must be the (output, h_n) or (output, (h_n, c_n)) pair of a recurrent "
                            f"layer, got {type(x).__name__}")
        out, state = x
        lstm = isinstance(state, tuple)
        h_n = state[0] if lstm else state
        data = out.data if isinstance(out, PaddedSequence) else out
        shapes = (data.shape, h_n.shape, state[1].shape if lstm else None)
        if self.select == "output":
            return data, ("output", lstm, shapes)
        d = data.shape[-1] // h_n.shape[2]
        last = h_n[-d:]
        return np.ascontiguousarray(last.transpose(1, 0, 2)).reshape(last.shape[1], -1), ("last", lstm, shapes, d)

    def backward(self, cache, grad_y, grad_params):
        kind, lstm, (out_shape, hn_shape, cn_shape) = cache[:3]
        if kind == "output":
            g_out, g_hn = grad_y, None
        else:
            d = cache[3]
            n, h = hn_shape[1], hn_shape[2]
            g_out = None
            g_hn = np.zeros(hn_shape, grad_y.dtype)
            g_hn[-d:] = grad_y.reshape(n, d, h).transpose(1, 0, 2)
        return (g_out, (g_hn, None)) if lstm else (g_out, g_hn)

    def get_config(self):
        return {"select": self.select}
