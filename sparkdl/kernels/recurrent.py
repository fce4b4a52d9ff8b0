"""Recurrence kernels of RNN (tanh/relu), LSTM and GRU for one layer and one direction, forward and backward
side by side.

The input projection of every time step, ``xp = x @ W_ih^T + b`` of shape ``(T, N, G*H)``, is one BLAS GEMM
done by the caller (:mod:`sparkdl.nn.recurrent`), and so are the weight gradients after the backward pass
(``dW_ih = dA^T x``, ``dW_hh = dA^T h_prev``, ``db = sum dA``, ``dx = dA W_ih``). What remains here is the
sequential part: per step one ``(N, H) @ (H, G*H)`` product (``np.dot``, BLAS) and the gate nonlinearities
in a tight loop (``tanh`` through ``exp``, see :func:`_tanh`).

Conventions
-----------
Tensors are time-major: ``xp[t]`` is step t of every sequence. Row n is valid at step t when
``t < lengths[n]``; at invalid steps its state is carried unchanged and its output is zero, which equals
PyTorch's ``pack_padded_sequence`` + ``pad_packed_sequence`` (the state after the last valid step is
``h_n``; a reverse direction starts, from zero state, at each row's last valid step). ``reverse`` runs
t = T-1 .. 0. ``hprev[t]`` (and ``cprev[t]``) hold the state *before* step t in processing order: the
weight-gradient GEMMs need them. Gate orders are PyTorch's: LSTM (i, f, g, o), GRU (r, z, n).
"""
from __future__ import annotations

import numpy as np

from sparkdl.config import njit

__all__ = ["rnn_forward", "rnn_backward", "lstm_forward", "lstm_backward", "gru_forward", "gru_backward"]


@njit
def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


@njit
def _tanh(v):
    """``1 - 2 / (exp(2v) + 1)``: with the argument's precision of ``exp`` this is ~5x faster than libm's
    ``tanh`` in float32 (which LLVM cannot vectorise here either), absolute error < 1e-7."""
    e = np.exp(v + v)
    return 1.0 - 2.0 / (e + 1.0)


@njit
def _carry(dh, tmp, lengths, t):
    """``dh[n] = tmp[n]`` for the rows valid at step t (invalid rows pass their gradient through)."""
    N, H = dh.shape
    for n in range(N):
        if t < lengths[n]:
            for j in range(H):
                dh[n, j] = tmp[n, j]


# ---------------------------------------------------------------------------------------------- RNN
@njit
def rnn_forward(xp, whh_t, lengths, reverse, relu, hs, hprev):
    """``h_t = act(xp[t] + h_{t-1} @ W_hh^T)``; fills ``hs`` (zero at invalid steps) and ``hprev``; returns h_n.

    ``xp`` (T, N, H) includes both biases; ``whh_t`` is ``W_hh^T`` (H, H), contiguous.
    """
    T, N, H = xp.shape
    h = np.zeros((N, H), xp.dtype)
    a = np.empty((N, H), xp.dtype)
    for s in range(T):
        t = T - 1 - s if reverse else s
        hprev[t] = h
        np.dot(h, whh_t, a)
        for n in range(N):
            if t >= lengths[n]:
                continue
            for j in range(H):
                v = xp[t, n, j] + a[n, j]
                if relu:
                    v = v if v > 0 else 0.0
                else:
                    v = _tanh(v)
                h[n, j] = v
                hs[t, n, j] = v
    return h


@njit
def rnn_backward(hs, whh, lengths, reverse, relu, grad_hs, grad_hn, da):
    """Pre-activation gradients ``da`` (T, N, H) from output gradients ``grad_hs`` and ``grad_hn``.

    ``whh`` is ``W_hh`` (H, H), contiguous. Returns the gradient with respect to the initial state.
    """
    T, N, H = hs.shape
    dh = grad_hn.copy()
    tmp = np.empty((N, H), hs.dtype)
    for s in range(T):
        t = s if reverse else T - 1 - s
        for n in range(N):
            if t >= lengths[n]:
                continue
            for j in range(H):
                g = dh[n, j] + grad_hs[t, n, j]
                h = hs[t, n, j]
                if relu:
                    da[t, n, j] = g if h > 0 else 0.0
                else:
                    da[t, n, j] = g * (1.0 - h * h)
        np.dot(da[t], whh, tmp)
        _carry(dh, tmp, lengths, t)
    return dh


# ---------------------------------------------------------------------------------------------- LSTM
@njit
def lstm_forward(xp, whh_t, lengths, reverse, hs, cs, gates, hprev, cprev):
    """LSTM steps; fills ``hs``, ``cs`` (cell after each step), activated ``gates`` (T, N, 4H) and the states
    before each step; returns ``(h_n, c_n)``.

    ``xp`` (T, N, 4H) includes both biases; ``whh_t`` is ``W_hh^T`` (H, 4H), contiguous.
    """
    T, N, G = xp.shape
    H = G // 4
    h = np.zeros((N, H), xp.dtype)
    c = np.zeros((N, H), xp.dtype)
    a = np.empty((N, G), xp.dtype)
    for s in range(T):
        t = T - 1 - s if reverse else s
        hprev[t] = h
        cprev[t] = c
        np.dot(h, whh_t, a)
        for n in range(N):
            if t >= lengths[n]:
                continue
            x = xp[t, n]
            gt = gates[t, n]
            for j in range(H):
                i = _sigmoid(x[j] + a[n, j])
                f = _sigmoid(x[H + j] + a[n, H + j])
                g = _tanh(x[2 * H + j] + a[n, 2 * H + j])
                o = _sigmoid(x[3 * H + j] + a[n, 3 * H + j])
                cn = f * c[n, j] + i * g
                hn = o * _tanh(cn)
                c[n, j] = cn
                h[n, j] = hn
                cs[t, n, j] = cn
                hs[t, n, j] = hn
                gt[j] = i
                gt[H + j] = f
                gt[2 * H + j] = g
                gt[3 * H + j] = o
    return h, c


@njit
def lstm_backward(gates, cs, cprev, whh, lengths, reverse, grad_hs, grad_hn, grad_cn, da):
    """Gate pre-activation gradients ``da`` (T, N, 4H); ``whh`` is ``W_hh`` (4H, H), contiguous.

    Returns the gradients with respect to the initial ``(h, c)``.
    """
    T, N, G = gates.shape
    H = G // 4
    dh = grad_hn.copy()
    dc = grad_cn.copy()
    tmp = np.empty((N, H), gates.dtype)
    for s in range(T):
        t = s if reverse else T - 1 - s
        for n in range(N):
            if t >= lengths[n]:
                continue
            gt = gates[t, n]
            d = da[t, n]
            for j in range(H):
                i, f, g, o = gt[j], gt[H + j], gt[2 * H + j], gt[3 * H + j]
                tc = _tanh(cs[t, n, j])
                gh = dh[n, j] + grad_hs[t, n, j]
                gc = dc[n, j] + gh * o * (1.0 - tc * tc)
                d[j] = gc * g * i * (1.0 - i)
                d[H + j] = gc * cprev[t, n, j] * f * (1.0 - f)
                d[2 * H + j] = gc * i * (1.0 - g * g)
                d[3 * H + j] = gh * tc * o * (1.0 - o)
                dc[n, j] = gc * f
        np.dot(da[t], whh, tmp)
        _carry(dh, tmp, lengths, t)
    return dh, dc


# ---------------------------------------------------------------------------------------------- GRU
@njit
def gru_forward(xp, whh_t, bhh, lengths, reverse, hs, gates, hhn, hprev):
    """GRU steps: ``r, z = sigmoid(xp + h W_hh^T + b_hh)``, ``n = tanh(xp_n + r * (h W_hn^T + b_hn))``,
    ``h' = (1 - z) n + z h``. Fills ``hs``, ``gates`` (r, z, n), ``hhn`` (``h W_hn^T + b_hn``) and ``hprev``;
    returns h_n.

    ``xp`` (T, N, 3H) includes ``b_ih`` only; ``whh_t`` is ``W_hh^T`` (H, 3H), contiguous; ``bhh`` (3H,).
    """
    T, N, G = xp.shape
    H = G // 3
    h = np.zeros((N, H), xp.dtype)
    a = np.empty((N, G), xp.dtype)
    for s in range(T):
        t = T - 1 - s if reverse else s
        hprev[t] = h
        np.dot(h, whh_t, a)
        for n in range(N):
            if t >= lengths[n]:
                continue
            x = xp[t, n]
            gt = gates[t, n]
            for j in range(H):
                r = _sigmoid(x[j] + a[n, j] + bhh[j])
                z = _sigmoid(x[H + j] + a[n, H + j] + bhh[H + j])
                hn_ = a[n, 2 * H + j] + bhh[2 * H + j]
                nn_ = _tanh(x[2 * H + j] + r * hn_)
                v = (1.0 - z) * nn_ + z * h[n, j]
                h[n, j] = v
                hs[t, n, j] = v
                gt[j] = r
                gt[H + j] = z
                gt[2 * H + j] = nn_
                hhn[t, n, j] = hn_
    return h


@njit
def gru_backward(gates, hhn, hprev, whh, lengths, reverse, grad_hs, grad_hn, dax, dah):
    """Pre-activation gradients of the input side ``dax`` and the hidden side ``dah`` (both (T, N, 3H); they
    differ in the n block: ``dah_n = dax_n * r``). ``whh`` is ``W_hh`` (3H, H), contiguous.

    Returns the gradient with respect to the initial state.
    """
    T, N, G = gates.shape
    H = G // 3
    dh = grad_hn.copy()
    direct = np.zeros((N, H), gates.dtype)
    tmp = np.empty((N, H), gates.dtype)
    for s in range(T):
        t = s if reverse else T - 1 - s
        for n in range(N):
            if t >= lengths[n]:
                continue
            gt = gates[t, n]
            dx = dax[t, n]
            dhh = dah[t, n]
            for j in range(H):
                r, z, nn_ = gt[j], gt[H + j], gt[2 * H + j]
                gh = dh[n, j] + grad_hs[t, n, j]
                dan = gh * (1.0 - z) * (1.0 - nn_ * nn_)
                dar = dan * hhn[t, n, j] * r * (1.0 - r)
                daz = gh * (hprev[t, n, j] - nn_) * z * (1.0 - z)
                dx[j] = dar
                dx[H + j] = daz
                dx[2 * H + j] = dan
                dhh[j] = dar
                dhh[H + j] = daz
                dhh[2 * H + j] = dan * r
                direct[n, j] = gh * z
        np.dot(dah[t], whh, tmp)
        tmp += direct
        _carry(dh, tmp, lengths, t)
    return dh
