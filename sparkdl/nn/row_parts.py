"""Sums across the row parts of one training batch, for layers whose training forward needs the whole batch.

:func:`sparkdl.step.split_gradient_sum` runs a batch's rows in ``k`` parts, one per thread, on one shared model. A
layer that computes batch statistics (BatchNorm) cannot work on its part alone: its mean and variance, and in
backward its two per-channel sums, are those of the whole batch. Such a layer asks :func:`current_part` whether
the calling thread runs a part; if so it exchanges its part's partial results with :meth:`RowParts.gather` (or
adds them with :meth:`RowParts.sum`) and computes the whole batch's from the ``k`` contributions in part order,
so every part computes bitwise the same result, whichever thread arrived first.

Every part must call :meth:`RowParts.gather` the same number of times in the same order (the same layers, forward in
module order and backward in reverse), which holds because the parts run the same model on the same graph. A part
that fails calls :meth:`RowParts.abort`, so that the parts waiting for it raise
:class:`threading.BrokenBarrierError` instead of waiting forever.
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

__all__ = ["RowParts", "row_part", "current_part"]

_local = threading.local()


class RowParts:
    """The meeting point of the ``parts`` threads that compute one batch's row parts.

    One barrier per :meth:`gather`; the contributions sit in two alternating slot lists, so a part can write its
    next call's contribution while a slower part still reads this call's (a part can be at most one call ahead:
    it cannot pass the next barrier before every part has arrived there, that is, finished reading).

    Parameters
    ----------
    parts : int
        Number of row parts (threads), >= 2.

    Raises
    ------
    ValueError
        If ``parts`` is not an integer >= 2.
    """

    def __init__(self, parts: int):
        if isinstance(parts, bool) or not isinstance(parts, int) or parts < 2:
            raise ValueError(f"RowParts: parts must be an integer >= 2, got {parts!r}")
        self.parts = parts
        self._barrier = threading.Barrier(parts)
        self._slots = ([None] * parts, [None] * parts)
        self._calls = [0] * parts

    def gather(self, index: int, value) -> list:
        """Every part's ``value``, in part order (a new list; the values themselves are not copied, so no part
        may modify a value it contributed or received). Blocks until every part has called.

        Raises
        ------
        threading.BrokenBarrierError
            If a part called :meth:`abort` (it failed) before or while this part waited.
        """
        slots = self._slots[self._calls[index] % 2]
        self._calls[index] += 1
        slots[index] = value
        self._barrier.wait()
        return list(slots)

    def sum(self, index: int, values) -> tuple:
        """The sums over all parts of ``values`` (a tuple of float64 arrays or floats, the same shapes in every
        part), added in part order: ``((v0 + v1) + v2) + ...``, as new float64 arrays; the same (bitwise) in every
        part. One :meth:`gather`."""
        contributions = self.gather(index, values)
        total = [np.array(v, np.float64, copy=True) for v in contributions[0]]
        for other in contributions[1:]:
            for t, v in zip(total, other):
                t += v
        return tuple(total)

    def abort(self) -> None:
        """Release every part waiting in :meth:`gather`, and every later caller, with ``BrokenBarrierError``."""
        self._barrier.abort()


@contextlib.contextmanager
def row_part(parts: RowParts, index: int):
    """Within the ``with`` block the calling thread computes part ``index`` of ``parts``
    (:func:`current_part`); on an error the other parts are released (:meth:`RowParts.abort`)."""
    previous = current_part()
    _local.part = (parts, index)
    try:
        yield
    except BaseException:
        parts.abort()
        raise
    finally:
        _local.part = previous


def current_part():
    """``(RowParts, index)`` if the calling thread computes a row part of a batch (:func:`row_part`), else None."""
    return getattr(_local, "part", None)
