"""Recurrence kernels of the LSTM for one layer and one direction, forward and backward side by side, and the
activations and state carry that the RNN and GRU kernels (:mod:`sparkdl.kernels.recurrent_gru`) share.

The input projection of every time step, ``xp = x @ W_ih^T`` of shape ``(T, N, G*H)``, is one BLAS GEMM
done by the caller (:mod:`sparkdl.nn.recurrent`; the kernels add the biases in their gate loops, saving a pass
over ``xp``), and so are the weight gradients after the backward pass
(``dW_ih = dA^T x``, ``dW_hh = dA^T h_prev``, ``db = sum dA``, ``dx = dA W_ih``). What remains here is the
sequential part: per step one ``(N, H) @ (H, G*H)`` product (``np.dot``, BLAS) and the gate nonlinearities
in tight loops. In float32 these compute ``exp`` as plain float32 arithmetic (:func:`_expf`), which LLVM
vectorises (libm's ``expf`` and ``tanhf`` are calls it cannot); float64 keeps numpy's ``exp`` (the float64
gradient checks need its accuracy).

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
from numba.core import types
from numba.extending import intrinsic, overload

from sparkdl.config import NJIT_OPTIONS, njit

#: Options of the activation overloads (compiled into the kernels that call them, which are cached).
_OVERLOAD_OPTIONS = {k: v for k, v in NJIT_OPTIONS.items() if k != "cache"}

__all__ = ["lstm_forward", "lstm_backward"]


# ---------------------------------------------------------------------------------------------- activations
def _sigmoid(v):
    """``1 / (1 + exp(-v))`` (float32: in float32 arithmetic through :func:`_expf`)."""
    return 1.0 / (1.0 + np.exp(-v))


def _tanh(v):
    """``1 - 2 / (exp(2v) + 1)`` (absolute error < 1e-15); float32: :func:`_tanhf`."""
    return 1.0 - 2.0 / (np.exp(v + v) + 1.0)


@intrinsic
def _pow2_f32(typingctx, n):
    """``2.0 ** n`` as float32 for an int32 ``n`` in [-127, 127], written into the exponent bits (-127 gives 0)."""
    if n != types.int32:
        return None

    def codegen(context, builder, signature, args):
        biased = builder.add(args[0], context.get_constant(types.int32, 127))
        bits = builder.shl(biased, context.get_constant(types.int32, 23))
        return builder.bitcast(bits, context.get_value_type(types.float32))
    return types.float32(types.int32), codegen


@njit
def _expf(x):
    """float32 ``exp`` as plain arithmetic (Cephes ``expf``: ``2**n * p(r)``, ``r = x - n ln 2``, a degree-7
    polynomial), so that LLVM vectorises the loops calling it; relative error ~1e-7. ``x`` is clamped to
    [-88, 88] (``exp(-88)`` gives 0 rather than a subnormal); NaN propagates."""
    lo, hi = np.float32(-88.0), np.float32(88.0)
    x = lo if x < lo else x
    x = hi if x > hi else x
    n = np.floor(x * np.float32(1.44269504088896341) + np.float32(0.5))
    r = x - n * np.float32(0.693359375)
    r = r - n * np.float32(-2.12194440e-4)
    p = np.float32(1.9875691500e-4) * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    y = p * (r * r) + r + np.float32(1.0)
    return y * _pow2_f32(np.int32(n))


_ONE, _TWO = np.float32(1.0), np.float32(2.0)


@njit
def _tanhf(x):
    """float32 ``tanh`` as plain arithmetic (Cephes ``tanhf``): ``x + x^3 P(x^2)`` for ``|x| < 0.625``, else
    ``1 - 2 / (exp(2x) + 1)``; both are computed and one selected, so loops over it vectorise (libm's
    ``tanhf`` is a call LLVM cannot vectorise). Relative error ~2e-7."""
    z = x * x
    p = np.float32(-5.70498872745e-3) * z + np.float32(2.06390887954e-2)
    p = p * z + np.float32(-5.37397155531e-2)
    p = p * z + np.float32(1.33314422036e-1)
    p = p * z + np.float32(-3.33332819422e-1)
    small = p * z * x + x
    large = _ONE - _TWO / (_expf(x + x) + _ONE)
    return small if z < np.float32(0.390625) else large


@overload(_sigmoid, jit_options=_OVERLOAD_OPTIONS)
def _sigmoid_impl(v):
    if v == types.float32:
        return lambda v: _ONE / (_ONE + _expf(-v))
    return lambda v: 1.0 / (1.0 + np.exp(-v))


@overload(_tanh, jit_options=_OVERLOAD_OPTIONS)
def _tanh_impl(v):
    if v == types.float32:
        return lambda v: _tanhf(v)
    return lambda v: 1.0 - 2.0 / (np.exp(v + v) + 1.0)


@njit
def _carry(dh, tmp, lengths, t):
    """``dh[n] = tmp[n]`` for the rows valid at step t (invalid rows pass their gradient through)."""
    N, H = dh.shape
    for n in range(N):
        if t < lengths[n]:
            for j in range(H):
                dh[n, j] = tmp[n, j]


# ---------------------------------------------------------------------------------------------- LSTM
# The element loops below each write one or two arrays (LLVM vectorises a loop only when it can check the
# overlap of its arrays at run time with few comparisons) and index with np.uint64 (no negative-index
# wrap-around selects); gate block k of a row is ``[k*H, (k+1)*H)``.
@njit
def _gate_activations(x, b, a, gt):
    """``gt = act(x + b + a)`` for one row: sigmoid on the i, f, o blocks, tanh on g."""
    G = np.uint64(gt.shape[0])
    H = G // np.uint64(4)
    for k in range(H + H):
        gt[k] = _sigmoid(x[k] + b[k] + a[k])
    for k in range(H + H, G - H):
        gt[k] = _tanh(x[k] + b[k] + a[k])
    for k in range(G - H, G):
        gt[k] = _sigmoid(x[k] + b[k] + a[k])


@njit
def _cell_forward(gt, c, tc, h):
    """One row: ``c = f c + i g`` (in place), ``tc = tanh(c)``, ``h = o tc``."""
    H = np.uint64(c.shape[0])
    for j in range(H):
        c[j] = gt[H + j] * c[j] + gt[j] * gt[H + H + j]
    for j in range(H):
        tc[j] = _tanh(c[j])
    for j in range(H):
        h[j] = gt[H + H + H + j] * tc[j]


@njit
def lstm_forward(xp, whh_t, bias, lengths, reverse, hs, tcs, gates, hprev, cprev):
    """LSTM steps; fills ``hs`` (zero at invalid steps), ``tanh`` of the cell after each step ``tcs``, the
    activated ``gates`` (T, N, 4H) and the states before each step; returns ``(h_n, c_n)``.

    ``xp`` (T, N, 4H) is ``x W_ih^T`` without biases, ``bias`` (4H,) is ``b_ih + b_hh``; ``whh_t`` is ``W_hh^T``
    (H, 4H), contiguous. ``tcs`` and ``gates`` are left unwritten at invalid steps.
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
                hs[t, n] = 0
                continue
            _gate_activations(xp[t, n], bias, a[n], gates[t, n])
            _cell_forward(gates[t, n], c[n], tcs[t, n], h[n])
            hs[t, n] = h[n]
    return h, c


@njit
def _cell_backward(gt, tc, cp, g_h, dh, dc, d):
    """One row: ``dh += g_h`` (in place: the gradient reaching h), then gate pre-activation gradients ``d``
    (4H) and ``dc`` (in place: from the cell after the step to the cell before it)."""
    H = np.uint64(dh.shape[0])
    H2, H3 = H + H, H + H + H
    one = d.dtype.type(1.0)  # a float64 literal would promote float32 arithmetic to float64
    for j in range(H):
        dh[j] += g_h[j]
    for j in range(H):
        dc[j] += dh[j] * gt[H3 + j] * (one - tc[j] * tc[j])
    for j in range(H):
        d[H3 + j] = dh[j] * tc[j] * gt[H3 + j] * (one - gt[H3 + j])
    for j in range(H):
        d[j] = dc[j] * gt[H2 + j] * gt[j] * (one - gt[j])
    for j in range(H):
        d[H + j] = dc[j] * cp[j] * gt[H + j] * (one - gt[H + j])
    for j in range(H):
        d[H2 + j] = dc[j] * gt[j] * (one - gt[H2 + j] * gt[H2 + j])
    for j in range(H):
        dc[j] *= gt[H + j]


@njit
def lstm_backward(gates, tcs, cprev, whh, lengths, reverse, grad_hs, grad_hn, grad_cn, da):
    """Gate pre-activation gradients ``da`` (T, N, 4H; zero at invalid steps); ``whh`` is ``W_hh`` (4H, H),
    contiguous.

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
                da[t, n] = 0
                continue
            _cell_backward(gates[t, n], tcs[t, n], cprev[t, n], grad_hs[t, n], dh[n], dc[n], da[t, n])
        np.dot(da[t], whh, tmp)
        _carry(dh, tmp, lengths, t)
    return dh, dc
