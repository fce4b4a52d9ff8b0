"""A BERT-style encoder classifier: :class:`BertEmbeddings`, :class:`BertClassifier` and the :func:`bert_mini`
builder (4 layers, d_model 256, 4 heads, feed-forward 1024, GELU, post-norm LayerNorm).

The encoder is sparkdl's :class:`~sparkdl.nn.TransformerEncoder` (names of ``torch.nn.TransformerEncoder``); the
embeddings carry the names of Hugging Face's ``BertEmbeddings`` (``embeddings.word_embeddings.weight``,
``embeddings.LayerNorm.bias``). A padding mask changes with every batch and containers pass one value between
layers, so :class:`BertClassifier` calls its children itself (as :class:`~sparkdl.nn.TransformerClassifier` does).
"""
from __future__ import annotations

import numpy as np

from sparkdl import nn
from sparkdl.models._blocks import check_int, check_probability
from sparkdl.nn.sequence import PaddedSequence

__all__ = ["BertEmbeddings", "BertClassifier", "bert_mini"]


class BertEmbeddings(nn.Module):
    """``dropout(LayerNorm(word[ids] + position[t] + token_type[type_ids]))``, (N, T) ids -> (N, T, E).

    Children ``word_embeddings`` (V, E, padding_idx 0), ``position_embeddings`` (T_max, E),
    ``token_type_embeddings`` (type_vocab_size, E; absent when 0), ``LayerNorm``, ``dropout``. ``forward`` takes
    ``(ids, token_type_ids)``; ``token_type_ids`` None means type 0 everywhere.
    """

    def __init__(self, vocab_size: int, d_model: int, max_length: int, type_vocab_size: int = 2,
                 layer_norm_eps: float = 1e-12, dropout: float = 0.1):
        super().__init__()
        self.max_length = max_length
        self.add_module("word_embeddings", nn.Embedding(vocab_size, d_model, padding_idx=0))
        self.add_module("position_embeddings", nn.Embedding(max_length, d_model))
        if type_vocab_size:
            self.add_module("token_type_embeddings", nn.Embedding(type_vocab_size, d_model))
        self.add_module("LayerNorm", nn.LayerNorm(d_model, eps=layer_norm_eps))
        self.add_module("dropout", nn.Dropout(dropout))

    @classmethod
    def from_config(cls, config, children=None):
        return cls(**config)

    def forward(self, x, *, training=False, rng=None):
        ids, types = x
        n, t = ids.shape
        kw = {"training": training, "rng": rng}
        h, c_word = self.word_embeddings.forward(ids, **kw)
        pos, c_pos = self.position_embeddings.forward(np.arange(t), **kw)
        h = h + pos
        c_type = None
        if "token_type_embeddings" in self._modules:
            types = np.zeros((n, t), np.int64) if types is None else types
            tt, c_type = self.token_type_embeddings.forward(types, **kw)
            h += tt
        z, c_norm = self.LayerNorm.forward(h.reshape(n * t, -1), **kw)
        y, c_drop = self.dropout.forward(z.reshape(h.shape), **kw)
        return y, (c_word, c_pos, c_type, c_norm, c_drop)

    def backward(self, cache, grad_y, grad_params):
        c_word, c_pos, c_type, c_norm, c_drop = cache
        g = self.dropout.backward(c_drop, grad_y, None)
        g = self.LayerNorm.backward(c_norm, g.reshape(-1, g.shape[-1]), self.child_grad(grad_params, "LayerNorm"))
        g = g.reshape(grad_y.shape)
        self.word_embeddings.backward(c_word, g, self.child_grad(grad_params, "word_embeddings"))
        self.position_embeddings.backward(c_pos, g.sum(axis=0), self.child_grad(grad_params, "position_embeddings"))
        if c_type is not None:
            self.token_type_embeddings.backward(c_type, g, self.child_grad(grad_params, "token_type_embeddings"))
        return None

    def get_config(self):
        w = self.word_embeddings
        return {"vocab_size": w.num_embeddings, "d_model": w.embedding_dim, "max_length": self.max_length,
                "type_vocab_size": self.token_type_embeddings.num_embeddings
                if "token_type_embeddings" in self._modules else 0,
                "layer_norm_eps": self.LayerNorm.eps, "dropout": self.dropout.p}


class BertClassifier(nn.Module):
    r"""Embeddings, a post-norm GELU Transformer encoder over the valid tokens, BERT's pooler
    (:math:`\tanh(W_p z_0 + b_p)` on the first token) and a linear classifier after dropout.

    Parameters: those of :func:`bert_mini`. Children ``embeddings`` (:class:`BertEmbeddings`), ``encoder``
    (:class:`~sparkdl.nn.TransformerEncoder` of batch-first layers), ``pooler`` (Linear E -> E), ``dropout``,
    ``classifier`` (Linear E -> num_classes).

    Shapes
    ------
    - input: ``(input_ids, attention_mask)`` or ``(input_ids, attention_mask, token_type_ids)``, each (N, T)
      integers (mask 1 = token, 0 = padding: padded keys are masked out); or a
      :class:`~sparkdl.nn.PaddedSequence` ``(ids, lengths)`` (what :class:`~sparkdl.nn.SequenceLengths` makes of
      -1-padded rows); or plain (N, T) ids with no padding. ``T <= max_length``; every row needs one token.
    - output: (N, num_classes) logits; ``backward`` returns None (ids have no gradient)
    """

    def __init__(self, vocab_size: int = 30522, num_classes: int = 2, max_length: int = 512, d_model: int = 256,
                 nhead: int = 4, num_layers: int = 4, dim_feedforward: int = 1024, type_vocab_size: int = 2,
                 dropout: float = 0.1, layer_norm_eps: float = 1e-12):
        super().__init__()
        b = "bert_mini"
        vocab_size, num_classes = check_int(b, "vocab_size", vocab_size), check_int(b, "num_classes", num_classes)
        self.max_length, d_model = check_int(b, "max_length", max_length), check_int(b, "d_model", d_model)
        type_vocab_size = check_int(b, "type_vocab_size", type_vocab_size, minimum=0)
        dropout = check_probability(b, "dropout", dropout)
        self.num_classes = num_classes
        self.add_module("embeddings", BertEmbeddings(vocab_size, d_model, self.max_length, type_vocab_size,
                                                     layer_norm_eps, dropout))
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, "gelu", layer_norm_eps,
                                           batch_first=True)
        self.add_module("encoder", nn.TransformerEncoder(layer, num_layers))
        self.add_module("pooler", nn.Linear(d_model, d_model))
        self.add_module("dropout", nn.Dropout(dropout))
        self.add_module("classifier", nn.Linear(d_model, num_classes))

    @classmethod
    def from_config(cls, config, children=None):
        return cls(**config)

    def _parse(self, x):
        name = "BertClassifier"
        types = None
        if isinstance(x, PaddedSequence):
            ids = x.data
            mask = np.arange(np.shape(ids)[-1]) < np.asarray(x.lengths)[:, None]
        elif isinstance(x, (tuple, list)):
            if len(x) not in (2, 3):
                raise TypeError(f"{name}: a tuple input must be (input_ids, attention_mask[, token_type_ids]), got "
                                f"{len(x)} items")
            ids, mask = x[0], np.asarray(x[1]) != 0
            types = x[2] if len(x) == 3 else None
        else:
            ids, mask = x, None
        if not isinstance(ids, np.ndarray) or ids.dtype.kind not in "iu" or ids.ndim != 2:
            raise TypeError(f"{name}: input_ids must be an (N, T) integer numpy array, got "
                            f"{getattr(ids, 'dtype', type(ids).__name__)} {getattr(ids, 'shape', '')}")
        if ids.shape[1] > self.max_length:
            raise ValueError(f"{name}: sequences of {ids.shape[1]} tokens exceed max_length={self.max_length}")
        mask = np.ones(ids.shape, bool) if mask is None else mask
        if mask.shape != ids.shape:
            raise ValueError(f"{name}: attention_mask must have the shape of input_ids {ids.shape}, got {mask.shape}")
        if not mask.any(axis=1).all():
            row = int(np.argmin(mask.any(axis=1)))
            raise ValueError(f"{name}: row {row} of attention_mask has no token (all 0); every row needs one")
        return np.where(mask, ids, 0), types, ~mask

    def forward(self, x, *, training=False, rng=None):
        ids, types, padding = self._parse(x)
        kw = {"training": training, "rng": rng}
        h, c_emb = self.embeddings.forward((ids, types), **kw)
        z, c_enc = self.encoder.forward(h, src_key_padding_mask=padding, **kw)
        p, c_pool = self.pooler.forward(np.ascontiguousarray(z[:, 0]), **kw)
        p = np.tanh(p)
        d, c_drop = self.dropout.forward(p, **kw)
        y, c_cls = self.classifier.forward(d, **kw)
        return y, (c_emb, c_enc, c_pool, p, c_drop, c_cls, z.shape)

    def backward(self, cache, grad_y, grad_params):
        c_emb, c_enc, c_pool, p, c_drop, c_cls, shape = cache
        g = self.classifier.backward(c_cls, grad_y, self.child_grad(grad_params, "classifier"))
        g = self.dropout.backward(c_drop, g, None) * (1 - p * p)
        g0 = self.pooler.backward(c_pool, g, self.child_grad(grad_params, "pooler"))
        gz = np.zeros(shape, g0.dtype)
        gz[:, 0] = g0
        gh = self.encoder.backward(c_enc, gz, self.child_grad(grad_params, "encoder"))
        self.embeddings.backward(c_emb, gh, self.child_grad(grad_params, "embeddings"))
        return None

    def get_config(self):
        e, layer = self.embeddings.get_config(), self.encoder.layers[0]
        return {"vocab_size": e["vocab_size"], "num_classes": self.num_classes, "max_length": self.max_length,
                "d_model": e["d_model"], "nhead": layer.self_attn.num_heads, "num_layers": self.encoder.num_layers,
                "dim_feedforward": layer.dim_feedforward, "type_vocab_size": e["type_vocab_size"],
                "dropout": e["dropout"], "layer_norm_eps": e["layer_norm_eps"]}


def bert_mini(vocab_size: int = 30522, num_classes: int = 2, max_length: int = 512, d_model: int = 256,
              nhead: int = 4, num_layers: int = 4, dim_feedforward: int = 1024, type_vocab_size: int = 2,
              dropout: float = 0.1, layer_norm_eps: float = 1e-12) -> BertClassifier:
    """BERT-mini as a sequence classifier (:class:`BertClassifier`): 4 post-norm encoder layers of width 256,
    4 heads, feed-forward 1024 with exact (erf) GELU, LayerNorm eps 1e-12, learned position and token-type
    embeddings, tanh pooler on the first token ([CLS]), dropout, linear classifier.

    Parameters
    ----------
    vocab_size : int, default 30522 (BERT's uncased WordPiece vocabulary; id 0 is padding)
    num_classes : int, default 2
    max_length : int, default 512
        Rows of the position table (longest input T).
    d_model, nhead, num_layers, dim_feedforward : int, default 256, 4, 4, 1024
    type_vocab_size : int, default 2
        Segment (token type) embeddings; 0 leaves them out.
    dropout : float, default 0.1
        Dropout of embeddings, attention weights, feed-forward and residual branches, and before the classifier.
    layer_norm_eps : float, default 1e-12

    Shapes
    ------
    - input: ``(input_ids, attention_mask)`` (each (N, T) int64; mask 1 = token, 0 = padding), optionally with
      ``token_type_ids`` third; or a ``PaddedSequence``; see :class:`BertClassifier`
    - output: (N, num_classes) logits

    11,171,074 parameters with the defaults (7.8 M of them in the word embeddings; 789,760 per layer).

    Raises
    ------
    TypeError, ValueError
        Bad sizes (the message names the argument; ``nhead`` must divide ``d_model``), ``dropout`` outside
        [0, 1); at call time ids outside the vocabulary, T > ``max_length``, a row without tokens.

    References
    ----------
    Devlin et al., 2019, "BERT: Pre-training of Deep Bidirectional Transformers"; Turc et al., 2019,
    "Well-Read Students Learn Better" (BERT-mini: L=4, H=256); ``torch.nn.TransformerEncoder``.
    """
    return BertClassifier(vocab_size, num_classes, max_length, d_model, nhead, num_layers, dim_feedforward,
                          type_vocab_size, dropout, layer_norm_eps)
