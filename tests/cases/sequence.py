"""Registry cases: Embedding, EmbeddingBag, RNN/LSTM/GRU (through RNNOutput) and padded token sequences.

The torch counterparts name their children like the sparkdl Sequential ("0", "1", ...), so state dicts load
by name. Padded-sequence networks are compared with torch's ``pack_padded_sequence`` /
``pad_packed_sequence``; their input is an (N, T) id matrix right-padded with -1, as the Spark data path
produces it.
"""
import numpy as np
import torch
from torch import nn as tnn

from sparkdl import nn
from tests.cases import LayerCase

T, N = 6, 4


def token_ids(vocab, n=N, t=T, pad=-1):
    """``inputs`` callback: (n, t) ids in [1, vocab) right-padded with ``pad``; lengths 1..t, one row full."""
    def make(rng, dtype):
        lengths = rng.integers(1, t + 1, n)
        lengths[0] = t
        ids = rng.integers(1, vocab, (n, t)).astype(dtype)
        ids[np.arange(t) >= lengths[:, None]] = pad
        return ids
    return make


def int_ids(vocab, shape, low=0):
    return lambda rng, dtype: rng.integers(low, vocab, shape)


def _last(h, d):
    return torch.cat(list(h[-d:]), dim=1)


class TorchRNNSelect(tnn.Module):
    """``rnn`` (child "0") followed by the sparkdl RNNOutput selection."""

    def __init__(self, rnn, select):
        super().__init__()
        self.add_module("0", rnn)
        self.select = select

    def forward(self, x):
        rnn = self._modules["0"]
        out, state = rnn(x)
        if self.select == "output":
            return out
        return _last(state[0] if isinstance(rnn, tnn.LSTM) else state, 2 if rnn.bidirectional else 1)


class TorchText(tnn.Module):
    """SequenceLengths -> Embedding ("1") -> packed RNN ("2") -> selection -> optional Linear ("4")."""

    def __init__(self, embedding, rnn, select, head=None):
        super().__init__()
        self.add_module("1", embedding)
        self.add_module("2", rnn)
        if head is not None:
            self.add_module("4", head)
        self.select = select

    def forward(self, x):
        lengths = (x >= 0).sum(1)
        emb = self._modules["1"](x.clamp(min=0).long())
        rnn = self._modules["2"]
        packed = tnn.utils.rnn.pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
        out, state = rnn(packed)
        if self.select == "output":
            y = tnn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]
        else:
            y = _last(state[0] if isinstance(rnn, tnn.LSTM) else state, 2 if rnn.bidirectional else 1)
        return self._modules["4"](y) if "4" in self._modules else y


class TorchPaddedBag(tnn.Module):
    """SequenceLengths -> EmbeddingBag ("1") over each row's valid prefix."""

    def __init__(self, bag):
        super().__init__()
        self.add_module("1", bag)

    def forward(self, x):
        valid = x >= 0
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), valid.sum(1).cumsum(0)[:-1]])
        return self._modules["1"](x[valid].long(), offsets)


def _rnn_case(id, kind, select, kw, training=False, torch_ok=True):
    ours, theirs = getattr(nn, kind), getattr(tnn, kind)
    d, h = (2 if kw.get("bidirectional") else 1), 5
    bf = kw.get("batch_first", False)
    shape = (N, T, 3) if bf else (T, N, 3)
    out = (N, d * h) if select == "last" else shape[:2] + (d * h,)
    return LayerCase(id, lambda: nn.Sequential(ours(3, h, **kw), nn.RNNOutput(select)), shape, out,
                     (lambda: TorchRNNSelect(theirs(3, h, **kw), select)) if torch_ok else None, training=training)


def _text_case(id, kind, select, kw, head=None):
    ours, theirs = getattr(nn, kind), getattr(tnn, kind)
    d, h = (2 if kw.get("bidirectional") else 1), 4
    width = d * h

    def make():
        layers = [nn.SequenceLengths(), nn.Embedding(9, 3, padding_idx=0), ours(3, h, batch_first=True, **kw),
                  nn.RNNOutput(select)]
        return nn.Sequential(*layers, *([nn.Linear(width, head)] if head else []))

    def torch_make():
        return TorchText(tnn.Embedding(9, 3, padding_idx=0), theirs(3, h, batch_first=True, **kw), select,
                         tnn.Linear(width, head) if head else None)
    out = (N, head) if head else ((N, width) if select == "last" else (N, T, width))
    return LayerCase(id, make, (N, T), out, torch_make, inputs=token_ids(9), integer_input=True,
                     bad_dtype="complex64")


CASES = [
    LayerCase("embedding", lambda: nn.Embedding(11, 4), (3, 5), (3, 5, 4), lambda: tnn.Embedding(11, 4),
              inputs=int_ids(11, (3, 5)), integer_input=True, bad_dtype="float32"),
    # padding_idx: the row is read but gets no gradient by definition (PyTorch's), so finite differences do
    # not apply; torch parity covers it
    LayerCase("embedding-padding-1d", lambda: nn.Embedding(7, 3, padding_idx=0), (9,), (9, 3),
              lambda: tnn.Embedding(7, 3, padding_idx=0), inputs=int_ids(7, (9,)), integer_input=True,
              bad_dtype="float32", gradcheck=False),
    LayerCase("embeddingbag-mean", lambda: nn.EmbeddingBag(9, 3), (4, 5), (4, 3), lambda: tnn.EmbeddingBag(9, 3),
              inputs=int_ids(9, (4, 5)), integer_input=True, bad_dtype="float32"),
    LayerCase("embeddingbag-sum-padding", lambda: nn.EmbeddingBag(6, 3, mode="sum", padding_idx=1), (5, 4), (5, 3),
              lambda: tnn.EmbeddingBag(6, 3, mode="sum", padding_idx=1), inputs=int_ids(6, (5, 4)),
              integer_input=True, bad_dtype="float32"),
    LayerCase("embeddingbag-padded-sequence", lambda: nn.Sequential(nn.SequenceLengths(), nn.EmbeddingBag(9, 3)),
              (N, T), (N, 3), lambda: TorchPaddedBag(tnn.EmbeddingBag(9, 3)), inputs=token_ids(9),
              integer_input=True, bad_dtype="complex64"),
    _rnn_case("rnn-tanh-output", "RNN", "output", {}),
    _rnn_case("rnn-relu-2layer-bidir-last", "RNN", "last",
              {"nonlinearity": "relu", "num_layers": 2, "bidirectional": True, "batch_first": True}),
    _rnn_case("lstm-output", "LSTM", "output", {}),
    _rnn_case("lstm-2layer-bidir-batchfirst-output", "LSTM", "output",
              {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    _rnn_case("lstm-nobias-last", "LSTM", "last", {"bias": False}),
    _rnn_case("gru-output", "GRU", "output", {}),
    _rnn_case("gru-2layer-bidir-last", "GRU", "last", {"num_layers": 2, "bidirectional": True}),
    # dropout between layers draws from the forward rng: gradients are checked, torch's masks differ
    _rnn_case("lstm-dropout-train", "LSTM", "output", {"num_layers": 2, "dropout": 0.4}, training=True,
              torch_ok=False),
    _rnn_case("gru-dropout-train", "GRU", "last", {"num_layers": 3, "dropout": 0.3, "bidirectional": True},
              training=True, torch_ok=False),
    _text_case("text-lstm-bidir-last-linear", "LSTM", "last", {"bidirectional": True}, head=3),
    _text_case("text-lstm-2layer-output", "LSTM", "output", {"num_layers": 2}),
    _text_case("text-gru-bidir-output", "GRU", "output", {"bidirectional": True}),
    _text_case("text-rnn-last", "RNN", "last", {"num_layers": 2, "bidirectional": True}),
]
