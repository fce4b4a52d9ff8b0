"""Recurrence kernels of RNN (tanh/relu) and GRU for one layer and one direction, forward and backward side by
side, structured as the LSTM's (:mod:`sparkdl.kernels.recurrent`, whose conventions they share).

As in the LSTM kernels: the biases are added in the gate loops (no pass over the input projection ``xp``); each
element loop works on one row, writes at most two arrays and indexes with ``np.uint64`` (LLVM vectorises a loop
only when it can check the overlap of its arrays at run time with few comparisons, and signed indices add
negative-wrap selects); float32 arithmetic stays float32 (a float64 literal would promote it); caches are not
zero-filled: invalid steps write zero outputs and pre-activation gradients, and leave the gate caches unwritten
(nothing reads them). Gate block k of a row is ``[k*H, (k+1)*H)``; GRU gates are PyTorch's (r, z, n).
"""
from __future__ import annotations

import numpy as np

from sparkdl.config import njit
from sparkdl.kernels.recurrent import _carry, _sigmoid, _tanh

__all__ = ["rnn_forward", "rnn_backward", "gru_forward", "gru_backward"]


# ---------------------------------------------------------------------------------------------- time loops
# RNN and GRU share their time loops (inlined into the kernels); ``kind`` selects the row computation.
_TANH, _RELU, _GRU = 0, 1, 2


@njit(inline="always")
def _steps_forward(xp, whh_t, bih, bhh, lengths, reverse, kind, H, hs, gates, hhn, hprev):
    """The time loop of :func:`rnn_forward` (``bih`` is the summed bias) and :func:`gru_forward`."""
    T, N, G = xp.shape
    h = np.zeros((N, H), xp.dtype)
    a = np.empty((N, G), xp.dtype)
    for s in range(T):
        t = T - 1 - s if reverse else s
        hprev[t] = h
        np.dot(h, whh_t, a)
        for n in range(N):
            if t >= lengths[n]:
                hs[t, n] = 0
            elif kind == _GRU:
                _gru_cell(xp[t, n], bih, a[n], bhh, gates[t, n], hhn[t, n], h[n], hs[t, n])
            else:
                _rnn_cell(xp[t, n], bih, a[n], h[n], hs[t, n], kind == _RELU)
    return h


@njit(inline="always")
def _steps_backward(whh, lengths, reverse, kind, hs, gates, hhn, hprev, grad_hs, grad_hn, dax, dah):
    """The time loop of :func:`rnn_backward` (``dax`` is ``dah``, ``da``) and :func:`gru_backward`."""
    T, N, H = dah.shape[0], dah.shape[1], grad_hn.shape[1]
    dh = grad_hn.copy()
    direct = np.zeros((N if kind == _GRU else 0, H), dah.dtype)  # the part of dh not through W_hh (GRU)
    tmp = np.empty((N, H), dah.dtype)
    for s in range(T):
        t = s if reverse else T - 1 - s
        for n in range(N):
            if t >= lengths[n]:
                dax[t, n] = 0
                dah[t, n] = 0
            elif kind == _GRU:
                _gru_cell_backward(gates[t, n], hhn[t, n], hprev[t, n], grad_hs[t, n], dh[n], direct[n], dax[t, n],
                                   dah[t, n])
            else:
                _rnn_cell_backward(hs[t, n], grad_hs[t, n], dh[n], dax[t, n], kind == _RELU)
        np.dot(dah[t], whh, tmp)
        if kind == _GRU:
            tmp += direct
        _carry(dh, tmp, lengths, t)
    return dh


# ---------------------------------------------------------------------------------------------- RNN
@njit
def _rnn_cell(x, b, a, h, hs, relu):
    """One row: ``h = act(x + b + a)`` (in place), copied to the output row ``hs``."""
    H = np.uint64(h.shape[0])
    zero = h.dtype.type(0.0)
    if relu:
        for j in range(H):
            v = x[j] + b[j] + a[j]
            h[j] = v if v > zero else zero
    else:
        for j in range(H):
            h[j] = _tanh(x[j] + b[j] + a[j])
    for j in range(H):
        hs[j] = h[j]


@njit
def rnn_forward(xp, whh_t, bias, lengths, reverse, relu, hs, hprev):
    """``h_t = act(xp[t] + bias + h_{t-1} @ W_hh^T)``; fills ``hs`` (zero at invalid steps) and ``hprev``; returns
    h_n.

    ``xp`` (T, N, H) is ``x W_ih^T`` without biases, ``bias`` (H,) is ``b_ih + b_hh``; ``whh_t`` is ``W_hh^T``
    (H, H), contiguous.
    """
    none = np.empty((0, 0, 0), xp.dtype)  # the GRU-only arguments
    return _steps_forward(xp, whh_t, bias, bias, lengths, reverse, _RELU if relu else _TANH, xp.shape[2], hs, none,
                          none, hprev)


@njit
def _rnn_cell_backward(h, g_h, dh, da, relu):
    """One row: ``dh += g_h`` (in place), then the pre-activation gradient ``da`` from the output ``h``."""
    H = np.uint64(dh.shape[0])
    zero, one = da.dtype.type(0.0), da.dtype.type(1.0)
    for j in range(H):
        dh[j] += g_h[j]
    if relu:
        for j in range(H):
            da[j] = dh[j] if h[j] > zero else zero
    else:
        for j in range(H):
            da[j] = dh[j] * (one - h[j] * h[j])


@njit
def rnn_backward(hs, whh, lengths, reverse, relu, grad_hs, grad_hn, da):
    """Pre-activation gradients ``da`` (T, N, H; zero at invalid steps) from output gradients ``grad_hs`` and
    ``grad_hn``. ``whh`` is ``W_hh`` (H, H), contiguous. Returns the gradient with respect to the initial state.
    """
    none = np.empty((0, 0, 0), hs.dtype)  # the GRU-only arguments
    return _steps_backward(whh, lengths, reverse, _RELU if relu else _TANH, hs, none, none, none, grad_hs, grad_hn,
                           da, da)


# ---------------------------------------------------------------------------------------------- GRU
@njit
def _gru_cell(x, bih, a, bhh, gt, hn, h, hs):
    """One row: ``r, z = sigmoid(x + b_ih + a + b_hh)``, ``hn = a_n + b_hh_n``, ``n = tanh(x_n + b_ih_n + r hn)``
    into ``gt`` (r, z, n) and ``hn``; ``h = (1 - z) n + z h`` (in place), copied to the output row ``hs``."""
    H = np.uint64(h.shape[0])
    H2 = H + H
    one = h.dtype.type(1.0)
    for k in range(H2):
        gt[k] = _sigmoid(x[k] + bih[k] + a[k] + bhh[k])
    for j in range(H):
        hn[j] = a[H2 + j] + bhh[H2 + j]
    for j in range(H):
        gt[H2 + j] = _tanh(x[H2 + j] + bih[H2 + j] + gt[j] * hn[j])
    for j in range(H):
        h[j] = (one - gt[H + j]) * gt[H2 + j] + gt[H + j] * h[j]
    for j in range(H):
        hs[j] = h[j]


@njit
def gru_forward(xp, whh_t, bih, bhh, lengths, reverse, hs, gates, hhn, hprev):
    """GRU steps: ``r, z = sigmoid(xp + b_ih + h W_hh^T + b_hh)``, ``n = tanh(xp_n + b_ih_n + r * (h W_hn^T +
    b_hn))``, ``h' = (1 - z) n + z h``. Fills ``hs`` (zero at invalid steps), ``gates`` (r, z, n), ``hhn``
    (``h W_hn^T + b_hn``) and ``hprev``; returns h_n.

    ``xp`` (T, N, 3H) is ``x W_ih^T`` without biases; ``whh_t`` is ``W_hh^T`` (H, 3H), contiguous; ``bih``,
    ``bhh`` (3H,). ``gates`` and ``hhn`` are left unwritten at invalid steps.
    """
    return _steps_forward(xp, whh_t, bih, bhh, lengths, reverse, _GRU, xp.shape[2] // 3, hs, gates, hhn, hprev)


@njit
def _gru_cell_backward(gt, hn, hp, g_h, dh, direct, dx, dhh):
    """One row: ``dh += g_h`` (in place: the gradient reaching h), the pre-activation gradients of the input
    side ``dx`` and the hidden side ``dhh`` (3H each), and ``direct``, the part of the gradient reaching the
    previous state other than through ``W_hh`` (``dh * z``)."""
    H = np.uint64(dh.shape[0])
    H2 = H + H
    one = dx.dtype.type(1.0)
    for j in range(H):
        dh[j] += g_h[j]
    for j in range(H):
        dx[H2 + j] = dh[j] * (one - gt[H + j]) * (one - gt[H2 + j] * gt[H2 + j])
    for j in range(H):
        dx[j] = dx[H2 + j] * hn[j] * gt[j] * (one - gt[j])
    for j in range(H):
        dx[H + j] = dh[j] * (hp[j] - gt[H2 + j]) * gt[H + j] * (one - gt[H + j])
    for k in range(H2):
        dhh[k] = dx[k]
    for j in range(H):
        dhh[H2 + j] = dx[H2 + j] * gt[j]
    for j in range(H):
        direct[j] = dh[j] * gt[H + j]


@njit
def gru_backward(gates, hhn, hprev, whh, lengths, reverse, grad_hs, grad_hn, dax, dah):
    """Pre-activation gradients of the input side ``dax`` and the hidden side ``dah`` (both (T, N, 3H), zero at
    invalid steps; they differ in the n block: ``dah_n = dax_n * r``). ``whh`` is ``W_hh`` (3H, H), contiguous.

    Returns the gradient with respect to the initial state.
    """
    return _steps_backward(whh, lengths, reverse, _GRU, np.empty((0, 0, 0), dax.dtype), gates, hhn, hprev, grad_hs,
                           grad_hn, dax, dah)
