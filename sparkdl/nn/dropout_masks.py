"""Dropout masks that do not depend on how a batch is split into parts.

Every layer that drops elements in training (:class:`~sparkdl.nn.Dropout`, the attention dropout of
:class:`~sparkdl.nn.MultiheadAttention`, the dropout between the layers of the recurrent layers) builds its mask
with :func:`dropout_mask`: one 64-bit seed drawn from the forward ``rng`` per call, whatever the shape, and
element ``(r, j)`` kept iff ``u(seed, r * row_size + j) >= p``, where ``r`` is the element's row (sample) in the
*whole* batch, ``j`` its flat position within the row, ``row_size`` the elements per row and ``u`` the
counter-based uniform of :func:`sparkdl.kernels.dropout.uniform24`. The row of an element is its index along the
layer's batch axis plus the row offset of the calling thread (:func:`row_offset`, 0 unless a caller that runs a
batch in parts sets it, as :func:`sparkdl.step.split_gradient_sum` does). So rows ``[lo, hi)`` run on
their own with offset ``lo`` and a generator in the same state draw exactly rows ``[lo, hi)`` of the whole batch's
mask.
"""
from __future__ import annotations

import contextlib
import math
import threading

import numpy as np

from sparkdl.kernels import dropout as K

__all__ = ["dropout_mask", "row_offset", "current_row_offset"]

_local = threading.local()


@contextlib.contextmanager
def row_offset(lo: int):
    """Within the ``with`` block, on the calling thread, row 0 of every batch axis is row ``lo`` of the batch.

    Parameters
    ----------
    lo : int
        The row of the whole batch that the part's first row is, >= 0.

    Raises
    ------
    ValueError
        If ``lo`` is not an integer >= 0.
    """
    if isinstance(lo, bool) or not isinstance(lo, (int, np.integer)) or lo < 0:
        raise ValueError(f"row_offset: lo must be an integer >= 0 (the first row of the part), got {lo!r}")
    previous = current_row_offset()
    _local.offset = int(lo)
    try:
        yield
    finally:
        _local.offset = previous


def current_row_offset() -> int:
    """The calling thread's row offset (see :func:`row_offset`); 0 outside any ``row_offset`` block."""
    return getattr(_local, "offset", 0)


def dropout_mask(rng: np.random.Generator, shape, p: float, dtype, batch_axis: int = 0) -> np.ndarray:
    """The scaled keep mask of an array of ``shape``: ``1 / (1 - p)`` where an element is kept, 0 where dropped.

    Parameters
    ----------
    rng : numpy.random.Generator
        One seed (uint64) is drawn from it per call, also for ``p == 1``.
    shape : tuple of int
        The shape of the array the mask multiplies; a 0-d shape is one row of one element.
    p : float
        Drop probability, ``0 <= p <= 1`` (``p == 1``: all zeros).
    dtype : numpy dtype
        Of the mask (the layer's dtype).
    batch_axis : int, default 0
        The axis of ``shape`` that indexes samples; a row is one sample, the product of the other axes long.

    Returns
    -------
    ndarray of ``dtype``, shape ``shape``
        Element ``(r, j)`` (``r`` = index along ``batch_axis`` + :func:`current_row_offset`, ``j`` = flat position
        in the row) is ``1 / (1 - p)`` iff ``uniform24(seed, r * row_size + j) >= p``
        (:func:`sparkdl.kernels.dropout.uniform24`), else 0.

    Notes
    -----
    The layers validate ``rng`` (not None), ``p`` and ``batch_axis`` with errors naming themselves; this function
    does not check them again.
    """
    seed = rng.integers(0, 2 ** 64, dtype=np.uint64)
    dtype = np.dtype(dtype)
    out = np.empty(shape, dtype)
    if p >= 1:
        out[...] = 0
        return out
    shape = out.shape or (1,)
    view = out.reshape(math.prod(shape[:batch_axis]), shape[batch_axis], math.prod(shape[batch_axis + 1:]))
    K.dropout_mask(seed, np.int64(current_row_offset()), float(p), dtype.type(1.0 / (1.0 - p)), view)
    return out
