"""Recurrent layers :class:`RNN` (tanh/relu), :class:`LSTM` and :class:`GRU`, with PyTorch's parameters,
initialization, input/output layout and padded-sequence semantics; and :class:`RecurrentPart`, one output of an
ONNX ``LSTM``/``GRU``/``RNN`` node taken from such a layer's ``(output, state)`` (imported ONNX graphs).

Per layer and direction the input projection of all T steps is one GEMM, the recurrence runs in a numba
kernel (:mod:`sparkdl.kernels.recurrent`) and the weight gradients are again GEMMs over all steps.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from sparkdl.kernels import recurrent as K
from sparkdl.kernels import recurrent_gru as KG
from sparkdl.nn import init
from sparkdl.nn._checks import check_input, check_positive_int
from sparkdl.nn.dropout_masks import dropout_mask
from sparkdl.nn.module import Module
from sparkdl.nn.sequence import PaddedSequence, check_lengths

__all__ = ["RNN", "LSTM", "GRU", "RecurrentPart"]

_GATES = {"RNN": 1, "LSTM": 4, "GRU": 3}


class _RNNBase(Module):
    """Shared structure of the recurrent layers (see :class:`LSTM` for the contract)."""

    mode = "RNN"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False):
        super().__init__()
        name = type(self).__name__
        self.input_size = check_positive_int(name, "input_size", input_size)
        self.hidden_size = check_positive_int(name, "hidden_size", hidden_size)
        self.num_layers = check_positive_int(name, "num_layers", num_layers)
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real):
            raise TypeError(f"{name}: dropout must be a real number in [0, 1), got {type(dropout).__name__}")
        if not 0 <= dropout < 1:
            raise ValueError(f"{name}: dropout (between layers) must be in [0, 1), got {dropout!r}")
        for arg, v in (("bias", bias), ("batch_first", batch_first), ("bidirectional", bidirectional)):
            if not isinstance(v, (bool, np.bool_)):
                raise TypeError(f"{name}: {arg} must be a bool, got {type(v).__name__}")
        self.use_bias, self.batch_first = bool(bias), bool(batch_first)
        self.dropout, self.bidirectional = float(dropout), bool(bidirectional)
        self.num_directions = 2 if self.bidirectional else 1
        g = _GATES[self.mode] * self.hidden_size
        for layer in range(self.num_layers):
            d_in = self.input_size if layer == 0 else self.hidden_size * self.num_directions
            for sfx in self._suffixes(layer):
                self.add_parameter("weight_ih" + sfx, (g, d_in))
                self.add_parameter("weight_hh" + sfx, (g, self.hidden_size))
                if self.use_bias:
                    self.add_parameter("bias_ih" + sfx, (g,))
                    self.add_parameter("bias_hh" + sfx, (g,))
        self.reset_parameters(np.random.default_rng())

    def _suffixes(self, layer):
        return [f"_l{layer}", f"_l{layer}_reverse"][:self.num_directions]

    def reset_parameters(self, rng):
        bound = 1.0 / math.sqrt(self.hidden_size)
        for arr in self._tensors["parameters"].values():
            init.uniform_(arr, rng, -bound, bound)

    # ------------------------------------------------------------------ forward
    def _parse(self, x):
        name = type(self).__name__
        data, lengths = (x.data, x.lengths) if isinstance(x, PaddedSequence) else (x, None)
        check_input(self, data, 3, axis=2, size=self.input_size)
        xt = data.transpose(1, 0, 2) if self.batch_first else data
        t, n = xt.shape[:2]
        if t == 0:
            raise ValueError(f"{name}: input has no time steps (shape {data.shape})")
        lengths = np.full(n, t, np.int64) if lengths is None else check_lengths(name, lengths, n, t)
        return np.ascontiguousarray(xt), lengths

    def _weights(self, sfx):
        p = self._tensors["parameters"]
        g = _GATES[self.mode] * self.hidden_size
        zero = np.zeros(g, self.dtype)
        return (p["weight_ih" + sfx], p["weight_hh" + sfx],
                p["bias_ih" + sfx] if self.use_bias else zero, p["bias_hh" + sfx] if self.use_bias else zero)

    def _direction_forward(self, xp, w_hh, b_ih, b_hh, lengths, reverse):
        """Run the kernel for one direction; returns (hs, h_n, c_n or None, kernel cache)."""
        t, n, _ = xp.shape
        h = self.hidden_size
        hprev = np.empty((t, n, h), self.dtype)
        w_t = np.ascontiguousarray(w_hh.T)
        if self.mode == "LSTM":  # the kernel writes every entry that is read later
            hs, tcs, cprev = (np.empty((t, n, h), self.dtype) for _ in range(3))
            gates = np.empty((t, n, 4 * h), self.dtype)
            h_n, c_n = K.lstm_forward(xp, w_t, b_ih + b_hh, lengths, reverse, hs, tcs, gates, hprev, cprev)
            return hs, h_n, c_n, (gates, tcs, cprev, hprev)
        hs = np.empty((t, n, h), self.dtype)
        if self.mode == "GRU":
            gates = np.empty((t, n, 3 * h), self.dtype)
            hhn = np.empty_like(hs)
            h_n = KG.gru_forward(xp, w_t, b_ih, b_hh, lengths, reverse, hs, gates, hhn, hprev)
            return hs, h_n, None, (gates, hhn, hprev)
        h_n = KG.rnn_forward(xp, w_t, b_ih + b_hh, lengths, reverse, self.nonlinearity == "relu", hs, hprev)
        return hs, h_n, None, (hs, hprev)

    def forward(self, x, *, training=False, rng=None):
        xt, lengths = self._parse(x)
        t, n, _ = xt.shape
        inp, caches, h_ns, c_ns = xt, [], [], []
        for layer in range(self.num_layers):
            outs, dir_caches = [], []
            flat_in = inp.reshape(t * n, -1)
            for d, sfx in enumerate(self._suffixes(layer)):
                w_ih, w_hh, b_ih, b_hh = self._weights(sfx)
                xp = flat_in @ w_ih.T  # the kernels add the biases in their gate loops
                hs, h_n, c_n, kc = self._direction_forward(xp.reshape(t, n, -1), w_hh, b_ih, b_hh, lengths,
                                                           d == 1)
                outs.append(hs)
                dir_caches.append(kc)
                h_ns.append(h_n)
                c_ns.append(c_n)
            out = outs[0] if len(outs) == 1 else np.concatenate(outs, axis=2)
            mask = None
            if training and self.dropout > 0 and layer < self.num_layers - 1:
                if rng is None:
                    raise ValueError(f"{type(self).__name__}: training=True with dropout > 0 needs a random "
                                     "generator: pass rng=numpy.random.default_rng(seed) to forward")
                mask = dropout_mask(rng, out.shape, self.dropout, self.dtype, batch_axis=1)  # out: (T, N, D*H)
                out = out * mask
            caches.append((inp, dir_caches, mask))
            inp = out
        output = np.ascontiguousarray(inp.transpose(1, 0, 2)) if self.batch_first else inp
        if isinstance(x, PaddedSequence):
            output = PaddedSequence(output, lengths)
        h_n = np.stack(h_ns)
        state = (h_n, np.stack(c_ns)) if self.mode == "LSTM" else h_n
        return (output, state), (caches, lengths, xt.shape)

    # ------------------------------------------------------------------ backward
    def _split_grad(self, grad_y, shape):
        t, n, _ = shape
        h, nd = self.hidden_size, self.num_layers * self.num_directions
        if not (isinstance(grad_y, tuple) and len(grad_y) == 2):
            raise TypeError(f"{type(self).__name__}.backward: grad_y must be a (grad_output, grad_state) pair "
                            "shaped like the forward output (None for a zero part)")
        g_out, g_state = grad_y
        if isinstance(g_out, PaddedSequence):
            g_out = g_out.data
        if self.mode == "LSTM":
            g_hn, g_cn = g_state if g_state is not None else (None, None)
        else:
            g_hn, g_cn = g_state, None
        zeros = lambda: np.zeros((nd, n, h), self.dtype)  # noqa: E731
        if g_out is None:
            g_out = np.zeros((t, n, h * self.num_directions), self.dtype)
        elif self.batch_first:
            g_out = g_out.transpose(1, 0, 2)
        return (np.ascontiguousarray(g_out, dtype=self.dtype), zeros() if g_hn is None else g_hn,
                zeros() if g_cn is None else g_cn)

    def _direction_backward(self, kc, w_hh, lengths, reverse, g_hs, g_hn, g_cn):
        """Returns (dA for W_ih/b_ih, dA for W_hh/b_hh, the states before each step)."""
        if self.mode == "LSTM":
            gates, tcs, cprev, hprev = kc
            da = np.empty_like(gates)
            K.lstm_backward(gates, tcs, cprev, w_hh, lengths, reverse, g_hs, g_hn, g_cn, da)
            return da, da, hprev
        if self.mode == "GRU":
            gates, hhn, hprev = kc
            dax, dah = np.empty_like(gates), np.empty_like(gates)
            KG.gru_backward(gates, hhn, hprev, w_hh, lengths, reverse, g_hs, g_hn, dax, dah)
            return dax, dah, hprev
        hs, hprev = kc
        da = np.empty_like(hs)
        KG.rnn_backward(hs, w_hh, lengths, reverse, self.nonlinearity == "relu", g_hs, g_hn, da)
        return da, da, hprev

    def backward(self, cache, grad_y, grad_params):
        caches, lengths, shape = cache
        t, n, _ = shape
        h, nd = self.hidden_size, self.num_directions
        g_out, g_hn, g_cn = self._split_grad(grad_y, shape)
        g = self.grad_views(grad_params)
        for layer in reversed(range(self.num_layers)):
            inp, dir_caches, mask = caches[layer]
            if mask is not None:
                g_out = g_out * mask
            flat_in = inp.reshape(t * n, -1)
            g_in = None
            for d, sfx in enumerate(self._suffixes(layer)):
                w_ih, w_hh, _, _ = self._weights(sfx)
                k = layer * nd + d
                g_hs = np.ascontiguousarray(g_out[:, :, d * h:(d + 1) * h])
                dax, dah, hprev = self._direction_backward(dir_caches[d], np.ascontiguousarray(w_hh), lengths,
                                                           d == 1, g_hs, np.ascontiguousarray(g_hn[k]),
                                                           np.ascontiguousarray(g_cn[k]))
                same = dah is dax  # RNN, LSTM: one pre-activation gradient for both sides
                dax, dah = dax.reshape(t * n, -1), dah.reshape(t * n, -1)
                np.matmul(dax.T, flat_in, out=g["weight_ih" + sfx])
                np.matmul(dah.T, hprev.reshape(t * n, h), out=g["weight_hh" + sfx])
                if self.use_bias:
                    np.sum(dax, axis=0, out=g["bias_ih" + sfx])
                    if same:
                        g["bias_hh" + sfx][...] = g["bias_ih" + sfx]
                    else:
                        np.sum(dah, axis=0, out=g["bias_hh" + sfx])
                g_dir = dax @ w_ih
                g_in = g_dir if g_in is None else g_in + g_dir
            g_out = g_in.reshape(t, n, -1)
        return np.ascontiguousarray(g_out.transpose(1, 0, 2)) if self.batch_first else g_out

    def get_config(self):
        return {"input_size": self.input_size, "hidden_size": self.hidden_size, "num_layers": self.num_layers,
                "bias": self.use_bias, "batch_first": self.batch_first, "dropout": self.dropout,
                "bidirectional": self.bidirectional}


_DOC_COMMON = r"""
    Parameters
    ----------
    input_size : int
        Features D_in per step.
    hidden_size : int
        Features H of the hidden state.
    num_layers : int, default 1
        Stacked layers; layer k > 0 reads layer k-1's output (D * H features).
    bias : bool, default True
        Learn ``bias_ih``/``bias_hh``.
    batch_first : bool, default False
        Input and output are (N, T, *) instead of (T, N, *) (``h_n`` is always (num_layers * D, N, H)).
    dropout : float, default 0
        Dropout probability on the output of every layer but the last, in training mode (masks drawn from the
        ``rng`` passed to ``forward`` by the rule of :class:`~sparkdl.nn.Dropout`, with the batch axis N as the
        row axis in either layout).
    bidirectional : bool, default False
        Add a reverse direction (D = 2); outputs are concatenated (forward, reverse) on the last axis.

    Shapes
    ------
    - input: (T, N, D_in) (or (N, T, D_in) with ``batch_first``), or a
      :class:`~sparkdl.nn.PaddedSequence` of it: row n then has ``lengths[n]`` valid steps, padded steps
      change no state and output zeros, and ``h_n`` is each row's state after its last valid step
      (PyTorch's ``pack_padded_sequence`` / ``pad_packed_sequence``). Initial states are zero.
    - output: (T, N, D * H) (or (N, T, D * H)), a ``PaddedSequence`` when the input is one
    - ``h_n``: (num_layers * D, N, H), rows ordered (layer, direction)
    - parameters per layer k and direction (suffix ``_l{k}`` or ``_l{k}_reverse``): ``weight_ih`` (G*H, D_in or
      D*H), ``weight_hh`` (G*H, H), ``bias_ih``, ``bias_hh`` (G*H,), all initialised U(-1/sqrt(H), 1/sqrt(H))

    ``forward`` returns ``((output, state), cache)``; ``backward`` takes ``grad_y`` of the same structure (any
    part may be None for zero). Use :class:`~sparkdl.nn.RNNOutput` to pass one part on in a ``Sequential``.

    Raises
    ------
    TypeError, ValueError
        On bad sizes, flags or dropout; an input of the wrong rank, width or dtype; bad lengths.
"""


class RNN(_RNNBase):
    __doc__ = r"""Elman RNN: :math:`h_t = \mathrm{act}(x_t W_{ih}^T + b_{ih} + h_{t-1} W_{hh}^T + b_{hh})` (G = 1).

    ``nonlinearity`` : {'tanh', 'relu'}, default 'tanh' (keyword, as in PyTorch; the other arguments as below).
    """ + _DOC_COMMON + """
    References
    ----------
    Elman, 1990, "Finding structure in time"; ``torch.nn.RNN``.
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional)

    def get_config(self):
        return {**super().get_config(), "nonlinearity": self.nonlinearity}


class LSTM(_RNNBase):
    __doc__ = r"""Long short-term memory (G = 4, gates in PyTorch's order i, f, g, o):

    .. math::
        i, f, o = \sigma(x W_{i,f,o}^T + h W_{hi,hf,ho}^T + b), \quad g = \tanh(x W_g^T + h W_{hg}^T + b_g),
        \quad c' = f c + i g, \quad h' = o \tanh(c')

    ``state`` is ``(h_n, c_n)``, both (num_layers * D, N, H).
    """ + _DOC_COMMON + """
    References
    ----------
    Hochreiter & Schmidhuber, 1997, "Long short-term memory"; ``torch.nn.LSTM``.
    """

    mode = "LSTM"


class GRU(_RNNBase):
    __doc__ = r"""Gated recurrent unit (G = 3, gates in PyTorch's order r, z, n):

    .. math::
        r, z = \sigma(x W_{r,z}^T + b_{i\{r,z\}} + h W_{h\{r,z\}}^T + b_{h\{r,z\}}), \quad
        n = \tanh(x W_n^T + b_{in} + r (h W_{hn}^T + b_{hn})), \quad h' = (1 - z) n + z h
    """ + _DOC_COMMON + """
    References
    ----------
    Cho et al., 2014, "Learning phrase representations using RNN encoder-decoder"; ``torch.nn.GRU``.
    """

    mode = "GRU"


class RecurrentPart(Module):
    """One output of an ONNX ``LSTM``/``GRU``/``RNN`` node, from a sparkdl recurrent layer's ``(output, state)``.

    Parameters
    ----------
    part : {'Y', 'Y_h', 'Y_c'}
        ``Y``: all hidden states (T, D, N, H); ``Y_h``: the last hidden state (D, N, H); ``Y_c``: the last
        cell state of an LSTM (D, N, H).
    num_directions : int
        D (1 or 2).
    layer : int, default 0
        For ``Y_h``/``Y_c``: which layer of a stacked module (``Y`` is always the last layer's).

    Shapes
    ------
    - input: ``(output (T, N, D * H), h_n)`` or ``(output, (h_n, c_n))`` of a ``batch_first=False`` layer
    - output: as ``part`` (ONNX's layouts, ``layout=0``): rows ``layer * D .. (layer + 1) * D`` of the state

    References
    ----------
    ONNX ``LSTM``/``GRU``/``RNN`` operator specifications (outputs Y, Y_h, Y_c).
    """

    def __init__(self, part: str, num_directions: int = 1, layer: int = 0):
        super().__init__()
        if part not in ("Y", "Y_h", "Y_c") or num_directions not in (1, 2) or not (
                isinstance(layer, (int, np.integer)) and layer >= 0):
            raise ValueError(f"RecurrentPart: part must be 'Y', 'Y_h' or 'Y_c', num_directions 1 or 2 and layer an "
                             f"int >= 0, got {part!r}, {num_directions!r}, {layer!r}")
        self.part, self.num_directions, self.layer = part, int(num_directions), int(layer)

    def forward(self, x, *, training=False, rng=None):
        out, state = x
        lstm = isinstance(state, tuple)
        if self.part == "Y":
            t, n, dh = out.shape
            return np.ascontiguousarray(out.reshape(t, n, self.num_directions, -1).transpose(0, 2, 1, 3)), \
                (lstm, out.shape)
        full = (state[0] if self.part == "Y_h" else state[1]) if lstm else state
        d = self.num_directions
        return full[self.layer * d:(self.layer + 1) * d].copy(), (lstm, full.shape)

    def backward(self, cache, grad_y, grad_params):
        lstm, shape = cache
        if self.part == "Y":
            g_out = np.ascontiguousarray(grad_y.transpose(0, 2, 1, 3)).reshape(shape)
            return (g_out, (None, None)) if lstm else (g_out, None)
        g = np.zeros(shape, grad_y.dtype)
        d = self.num_directions
        g[self.layer * d:(self.layer + 1) * d] = grad_y
        if not lstm:
            return None, g
        return None, ((g, None) if self.part == "Y_h" else (None, g))

    def get_config(self):
        return {"part": self.part, "num_directions": self.num_directions, "layer": self.layer}
