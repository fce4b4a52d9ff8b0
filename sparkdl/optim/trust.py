"""Per-tensor norms across shards, exactly, for layer-wise trust ratios (LARS, LAMB).

A trust ratio needs :math:`\\|w_t\\|` and :math:`\\|u_t\\|` of every *whole* parameter tensor t, but the
engine's AllReduce blocks cut the flat vector anywhere, so one tensor may be split over shards. As for
global-norm clipping (:mod:`sparkdl.optim.clip`), each shard computes *partial* sums of squares, here one pair
per tensor it touches (:meth:`TrustRatioOptimizer.partial_tensor_norms`), the driver adds the partials of each
tensor (:func:`combine_tensor_norms`), and every shard applies the same ratios.

Exactness: for float32 vectors the partial sums are **exact** integers. The square of a float32
``m * 2**(e - 150)`` (24-bit significand m) is ``m**2 * 2**(2e - 300)`` with ``m**2 < 2**48``: squares are
accumulated per exponent e in int64 (split in two 24-bit halves, so 2**39 elements cannot overflow), and
each partial is the Python int ``sum / 2**-298``. Integer addition is associative, so the combined sum is
the same whatever the cut points, the shard order and the thread count, and is rounded to float64 once:
updating the whole vector equals updating it shard by shard, bit for bit. float64 vectors (tests, float64
models) use float64 partial sums (``math.fsum`` over shards): exact up to float64 rounding only.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from sparkdl.config import njit_parallel
from sparkdl.optim.base import Optimizer

__all__ = ["square_sum", "sum_to_float", "combine_tensor_norms", "tensor_pieces", "TrustRatioOptimizer"]

_CHUNK = 1 << 16
_SCALE = -298  # exponent of one unit of the exact float32 sums


@njit_parallel
def _square_bins(bits):
    """Per-exponent int64 sums (low, high 24-bit halves) of the squared significands of float32 ``bits``;
    the last row counts infinities (column 0) and NaNs (column 1)."""
    nchunks = (bits.size + _CHUNK - 1) // _CHUNK
    parts = np.zeros((nchunks, 257, 2), np.int64)
    for c in prange(nchunks):
        for i in range(c * _CHUNK, min(bits.size, (c + 1) * _CHUNK)):
            b = bits[i]
            e = (b >> 23) & 0xFF
            m = np.int64(b & 0x7FFFFF)
            if e == 0xFF:
                parts[c, 256, 1 if m != 0 else 0] += 1
                continue
            if e == 0:
                e = 1  # subnormal: no implicit bit, exponent of the smallest normal
            else:
                m |= 0x800000
            m2 = m * m
            parts[c, e, 0] += m2 & 0xFFFFFF
            parts[c, e, 1] += m2 >> 24
    return parts.sum(axis=0)


def square_sum(a: np.ndarray):
    """Sum of squares of ``a`` as an exact int (float32 input, in units of ``2**-298``) or a float (float64).

    Partial sums of the same kind add exactly with ``+``; :func:`sum_to_float` converts the total.
    """
    a = np.ascontiguousarray(a).reshape(-1)
    if a.dtype != np.float32:
        return math.fsum(np.square(a, dtype=np.float64))
    if a.size == 0:
        return 0
    bins = _square_bins(a.view(np.uint32))
    if bins[256, 1]:
        return math.nan
    if bins[256, 0]:
        return math.inf
    total = 0
    for e in np.flatnonzero(bins[:256, 0] | bins[:256, 1]):
        total += (int(bins[e, 0]) + (int(bins[e, 1]) << 24)) << (2 * int(e) - 2)
    return total


def sum_to_float(s) -> float:
    """The float value of a :func:`square_sum` (or of a sum of them), correctly rounded for exact sums."""
    if isinstance(s, int):
        try:
            return s / (1 << -_SCALE)  # int / int is correctly rounded
        except OverflowError:
            return math.inf
    return float(s)


def combine_tensor_norms(partials) -> dict:
    """Add per-tensor partial sums of squares over shards and take square roots.

    Parameters
    ----------
    partials : iterable of dict
        One dict per shard, ``{tensor index: (sum of squares of w, sum of squares of u)}`` as returned by
        :meth:`TrustRatioOptimizer.partial_tensor_norms`.

    Returns
    -------
    dict
        ``{tensor index: (||w||, ||u||)}`` (floats), to pass as ``tensor_norms`` to the update of every shard.
    """
    sums: dict = {}
    for part in partials:
        for t, (w, u) in part.items():
            if t in sums:
                sums[t] = (_add(sums[t][0], w), _add(sums[t][1], u))
            else:
                sums[t] = (w, u)
    return {t: (math.sqrt(sum_to_float(w)), math.sqrt(sum_to_float(u))) for t, (w, u) in sums.items()}


def _add(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return sum_to_float(a) + sum_to_float(b)


def tensor_pieces(layout, lo: int, seg) -> tuple:
    """Split the segments of shard ``[lo, ...)`` at tensor boundaries.

    Parameters
    ----------
    layout : Layout or None
        Without a layout the whole flat vector is one tensor (index 0).
    seg : Segments
        From :meth:`Optimizer.segments` (shard-relative bounds, per-segment lr and weight decay).

    Returns
    -------
    (lo, hi, lr, weight_decay, tensor) : arrays
        Shard-relative int64 bounds, float64 hyper-parameters and the int64 index of the tensor (its position
        in ``layout``) of every piece.
    """
    if layout is None:
        return seg.lo, seg.hi, seg.lr, seg.weight_decay, np.zeros(len(seg.lo), np.int64)
    starts = np.array([e.offset for e in layout], np.int64)
    los, his, lrs, wds, ts = [], [], [], [], []
    for a, b, lr, wd in zip(seg.lo, seg.hi, seg.lr, seg.weight_decay):
        t = int(np.searchsorted(starts, lo + a, side="right")) - 1
        while a < b:
            stop = min(b, (starts[t + 1] if t + 1 < len(starts) else layout.size) - lo)
            if stop > a:
                los.append(a), his.append(stop), lrs.append(lr), wds.append(wd), ts.append(t)
            a = stop
            t += 1
    return (np.array(los, np.int64), np.array(his, np.int64), np.array(lrs, np.float64), np.array(wds, np.float64),
            np.array(ts, np.int64))


class TrustRatioOptimizer(Optimizer):
    """Base of the layer-wise adaptive optimizers: the update of tensor t is scaled by a trust ratio computed
    from the norms of the whole tensor (see the module docstring for the cross-shard protocol).

    Subclasses implement :meth:`_direction` (the vector whose per-tensor norm enters the ratio, computed
    without touching the state), :meth:`_ratio` and :meth:`_apply_pieces`.

    Parameters
    ----------
    always_adapt : bool
        Apply the trust ratio to every tensor; if False (default, as in timm) only tensors whose weight
        decay is non-zero are adapted, so a ``weight_decay=0`` parameter group (biases, normalization
        weights: :func:`~sparkdl.optim.no_weight_decay_on_bias_and_norm`) gets a ratio of 1.
    """

    needs_tensor_norms = True

    def __init__(self, lr, weight_decay, always_adapt: bool = False, **common):
        super().__init__(lr, weight_decay, **common)
        if not isinstance(always_adapt, (bool, np.bool_)):
            raise TypeError(f"{type(self).__name__}: always_adapt must be a bool, got {type(always_adapt).__name__}")
        self.always_adapt = bool(always_adapt)

    def _adapted(self, weight_decay: np.ndarray) -> np.ndarray:
        return np.ones(len(weight_decay), bool) if self.always_adapt else weight_decay != 0

    def partial_tensor_norms(self, params, grads, state, lo: int = 0, lr: float | None = None, *,
                             grad_sq_norm: float | None = None) -> dict:
        """This shard's partial sums of squares ``{tensor index: (sum w**2, sum u**2)}`` of every adapted tensor
        it overlaps (exact ints for float32, see the module docstring); the state is not modified.

        Arguments as :meth:`update`. Add the results of all shards with :func:`combine_tensor_norms`.
        """
        step, seg, gscale, gclip = self._prepare(params, grads, state, lo, lr, grad_sq_norm)
        pieces = tensor_pieces(self.layout, lo, seg)
        u = self._direction(params, grads, state, step, pieces, gscale, gclip)
        out: dict = {}
        for a, b, t, adapt in zip(pieces[0], pieces[1], pieces[4], self._adapted(pieces[3])):
            if adapt:
                sums = (square_sum(params[a:b]), square_sum(u[a:b]))
                t = int(t)
                out[t] = sums if t not in out else (_add(out[t][0], sums[0]), _add(out[t][1], sums[1]))
        return out

    def update(self, params, grads, state, lo: int = 0, lr: float | None = None, *, grad_sq_norm=None,
               tensor_norms: dict | None = None) -> None:
        """As :meth:`Optimizer.update`, plus ``tensor_norms``: the :func:`combine_tensor_norms` result of every
        shard's :meth:`partial_tensor_norms`, needed unless the shard is the whole vector.

        Raises
        ------
        ValueError
            Also when ``tensor_norms`` is missing for a partial shard, or lacks a tensor this shard adapts.
        """
        name = type(self).__name__
        step, seg, gscale, gclip = self._prepare(params, grads, state, lo, lr, grad_sq_norm)
        pieces = tensor_pieces(self.layout, lo, seg)
        hi = lo + params.shape[0]
        if tensor_norms is None:
            if lo != 0 or (self.layout is not None and hi != self.layout.size):
                raise ValueError(f"{name}: shard [{lo}, {hi}) needs tensor_norms, the combine_tensor_norms() of "
                                 f"opt.partial_tensor_norms(...) over all shards (trust ratios use whole tensors)")
            tensor_norms = combine_tensor_norms([self.partial_tensor_norms(params, grads, state, lo, lr,
                                                                           grad_sq_norm=grad_sq_norm)])
        ratios = np.ones(len(pieces[0]), np.float64)
        for k, (t, wd, adapt) in enumerate(zip(pieces[4], pieces[3], self._adapted(pieces[3]))):
            if adapt:
                if int(t) not in tensor_norms:
                    what = "" if self.layout is None else f" ({self.layout.names()[int(t)]!r})"
                    raise ValueError(f"{name}: tensor_norms has no entry for tensor {int(t)}{what} of shard "
                                     f"[{lo}, {hi})")
                ratios[k] = self._ratio(*tensor_norms[int(t)], float(wd))
        self._apply_pieces(params, grads, state, step, pieces, ratios, gscale, gclip)
        state["step"] = step

    def _direction(self, params, grads, state, step, pieces, gscale, gclip) -> np.ndarray:
        raise NotImplementedError

    def _ratio(self, w_norm: float, u_norm: float, weight_decay: float) -> float:
        raise NotImplementedError

    def _apply_pieces(self, params, grads, state, step, pieces, ratios, gscale, gclip) -> None:
        raise NotImplementedError
