"""A Transformer-encoder sequence classifier for padded token ids: :class:`TransformerClassifier`.

The key padding mask changes with every batch, and containers pass one value between layers, so the encoder
cannot sit in a :class:`~sparkdl.nn.Sequential` after :class:`~sparkdl.nn.SequenceLengths` as an LSTM does.
This module takes the ``PaddedSequence(ids, lengths)`` that ``SequenceLengths`` produces, derives the mask from
the lengths itself and calls its children directly::

    Sequential(SequenceLengths(), TransformerClassifier(V, 2, max_length=48))

is then a network the Spark ML stages train on an ``array<int>`` token-id column (see :mod:`sparkdl.ml.tokens`).
"""
from __future__ import annotations

import numbers

import numpy as np

from sparkdl.nn._checks import check_positive_int
from sparkdl.nn.dropout import Dropout
from sparkdl.nn.embedding import Embedding
from sparkdl.nn.layer_norm import LayerNorm
from sparkdl.nn.linear import Linear
from sparkdl.nn.module import Module
from sparkdl.nn.sequence import PaddedSequence, check_lengths
from sparkdl.nn.transformer import TransformerEncoder, TransformerEncoderLayer

__all__ = ["TransformerClassifier"]


class TransformerClassifier(Module):
    r"""Token + learned position embeddings, a Transformer encoder over the valid tokens, masked mean pooling,
    a linear head.

    For a sequence of ids :math:`w_1 \dots w_L` (``L = lengths[n]``, the rest padding):
    :math:`h_t = \mathrm{dropout}(E[w_t] + P[t])`, :math:`z = \mathrm{encoder}(h)` with every padded position
    masked out as a key, :math:`y = W \bigl(\tfrac{1}{L} \sum_{t < L} z_t\bigr) + b`.

    Parameters
    ----------
    num_embeddings : int
        Vocabulary size V (ids 0..V-1).
    num_classes : int
        Output width C (logits).
    max_length : int
        Longest sequence T_max (rows of the positional table).
    d_model : int, default 64
        Embedding and model width E.
    nhead : int, default 4
        Attention heads; must divide ``d_model``.
    num_layers : int, default 2
        Encoder layers.
    dim_feedforward : int, default 128
        Hidden width of each layer's feed-forward network.
    dropout : float, default 0.1
        Dropout on the summed embeddings and everywhere inside the encoder layers.
    padding_idx : int or None, default 0
        ``padding_idx`` of the token embedding (its row starts at zero and gets no gradient).
    activation : {'relu', 'gelu'}, default 'relu'
    norm_first : bool, default False
        Pre-norm layers, followed by a final :class:`~sparkdl.nn.LayerNorm` (``encoder.norm``).
    layer_norm_eps : float, default 1e-5

    Shapes
    ------
    - input: ``PaddedSequence(ids (N, T), lengths (N,))`` (what :class:`~sparkdl.nn.SequenceLengths` returns), or
      an (N, T) integer array of ids with no padding; ``T <= max_length``
    - output: (N, C) in the module's dtype; ``backward`` returns None (ids have no gradient)
    - children: ``embedding`` (:class:`~sparkdl.nn.Embedding` (V, E), init N(0, 1)), ``pos_embedding``
      (Embedding (T_max, E), init N(0, 1)), ``dropout``, ``encoder`` (:class:`~sparkdl.nn.TransformerEncoder` of
      batch-first :class:`~sparkdl.nn.TransformerEncoderLayer`), ``fc`` (:class:`~sparkdl.nn.Linear` (E, C))

    Padded positions contribute nothing: their ids are not looked up, they are masked as attention keys and
    left out of the mean, so changing a padded id changes neither the output nor any gradient. A row of
    length 0 pools to zero (its logits are ``fc.bias``) instead of the NaN a fully masked attention row gives.

    Raises
    ------
    TypeError, ValueError
        Bad constructor arguments (the children's checks name the argument); an input that is not integer
        ids or a ``PaddedSequence``, lengths outside [0, T], T > ``max_length``, ids outside [0, V).

    References
    ----------
    Vaswani et al., 2017, "Attention Is All You Need"; Devlin et al., 2019, "BERT" (learned position
    embeddings); ``torch.nn.TransformerEncoder`` with ``src_key_padding_mask``.
    """

    def __init__(self, num_embeddings: int, num_classes: int, max_length: int, d_model: int = 64, nhead: int = 4,
                 num_layers: int = 2, dim_feedforward: int = 128, dropout: float = 0.1, padding_idx: int | None = 0,
                 activation: str = "relu", norm_first: bool = False, layer_norm_eps: float = 1e-5):
        super().__init__()
        name = "TransformerClassifier"
        self.num_classes = check_positive_int(name, "num_classes", num_classes)
        self.max_length = check_positive_int(name, "max_length", max_length)
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) or not 0 <= dropout < 1:
            raise ValueError(f"{name}: dropout must be a number in [0, 1), got {dropout!r}")
        layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                                        batch_first=True, norm_first=norm_first)
        self.add_module("embedding", Embedding(num_embeddings, d_model, padding_idx))
        self.add_module("pos_embedding", Embedding(self.max_length, d_model))
        self.add_module("dropout", Dropout(dropout))
        self.add_module("encoder", TransformerEncoder(layer, num_layers,
                                                      LayerNorm(d_model, eps=layer_norm_eps) if norm_first else None))
        self.add_module("fc", Linear(d_model, self.num_classes))

    @classmethod
    def from_config(cls, config, children=None):
        """Rebuild from :meth:`get_config` (the constructor creates the children itself)."""
        return cls(**config)

    def _parse(self, x):
        name = "TransformerClassifier"
        ids, lengths = (x.data, x.lengths) if isinstance(x, PaddedSequence) else (x, None)
        if not isinstance(ids, np.ndarray) or ids.dtype.kind not in "iu":
            raise TypeError(f"{name}: input must be a PaddedSequence or an integer numpy array of token ids, got "
                            f"{getattr(ids, 'dtype', type(ids).__name__)}; put SequenceLengths() first to read "
                            "-1-padded rows")
        if ids.ndim != 2:
            raise ValueError(f"{name}: expected (N, T) token ids, got shape {ids.shape}")
        n, t = ids.shape
        if t > self.max_length:
            raise ValueError(f"{name}: sequences of {t} positions exceed max_length={self.max_length} (the rows of "
                             "the positional embedding); truncate the input (the ML stages' maxLength) or build the "
                             "module with a larger max_length")
        lengths = np.full(n, t, np.int64) if lengths is None else check_lengths(name, lengths, n, t)
        return ids, lengths

    def forward(self, x, *, training=False, rng=None):
        ids, lengths = self._parse(x)
        n, t = ids.shape
        kw = {"training": training, "rng": rng}
        tokens, c_tok = self.embedding.forward(PaddedSequence(ids, lengths), **kw)
        positions, c_pos = self.pos_embedding.forward(np.arange(t), **kw)
        h, c_drop = self.dropout.forward(tokens.data + positions, **kw)
        valid = np.arange(t) < lengths[:, None]
        padding = ~valid
        padding[lengths == 0] = False  # a row with no key left would give NaN; it is left out of the mean
        z, c_enc = self.encoder.forward(h, src_key_padding_mask=padding, **kw)
        weights = (valid / np.maximum(lengths, 1)[:, None]).astype(self.dtype)  # (N, T): 1/L on valid positions
        pooled = np.einsum("nt,nte->ne", weights, z)
        y, c_fc = self.fc.forward(pooled, **kw)
        return y, (c_tok, c_pos, c_drop, c_enc, weights, c_fc)

    def backward(self, cache, grad_y, grad_params):
        c_tok, c_pos, c_drop, c_enc, weights, c_fc = cache
        g_pooled = self.fc.backward(c_fc, grad_y, self.child_grad(grad_params, "fc"))
        g_z = weights[:, :, None] * g_pooled[:, None, :]
        g_h = self.encoder.backward(c_enc, g_z, self.child_grad(grad_params, "encoder"))
        g_h = self.dropout.backward(c_drop, g_h, None)
        self.pos_embedding.backward(c_pos, g_h.sum(axis=0), self.child_grad(grad_params, "pos_embedding"))
        self.embedding.backward(c_tok, g_h, self.child_grad(grad_params, "embedding"))
        return None

    def get_config(self):
        emb, layer = self.embedding, self.encoder.layers[0]
        return {"num_embeddings": emb.num_embeddings, "num_classes": self.num_classes, "max_length": self.max_length,
                "d_model": emb.embedding_dim, "nhead": layer.self_attn.num_heads, "num_layers": self.encoder.num_layers,
                "dim_feedforward": layer.dim_feedforward, "dropout": self.dropout.p, "padding_idx": emb.padding_idx,
                "activation": layer.activation, "norm_first": layer.norm_first, "layer_norm_eps": layer.norm1.eps}
