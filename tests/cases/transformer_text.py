"""Registry cases: TransformerEncoder and TransformerClassifier (padded token ids through SequenceLengths).

The torch counterparts are ``torch.nn.TransformerEncoder`` (``src_key_padding_mask`` from the padding, masked
mean pooling) with children named as the sparkdl modules, so state dicts load by name.
"""
import torch
from torch import nn as tnn

from sparkdl import nn
from tests.cases import LayerCase
from tests.cases.sequence import N, T, token_ids


class TorchTransformerClassifier(tnn.Module):
    """Token + position embeddings -> ``torch.nn.TransformerEncoder`` with the key padding mask -> masked mean
    -> Linear, on (N, T) ids right-padded with -1; child "1" as in ``Sequential(SequenceLengths(), ...)``."""

    def __init__(self, vocab, classes, max_length, d_model, nhead, num_layers, dim_feedforward, dropout,
                 norm_first=False):
        super().__init__()
        body = tnn.Module()
        body.embedding = tnn.Embedding(vocab, d_model, padding_idx=0)
        body.pos_embedding = tnn.Embedding(max_length, d_model)
        layer = tnn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, batch_first=True,
                                            norm_first=norm_first)
        body.encoder = tnn.TransformerEncoder(layer, num_layers, norm=tnn.LayerNorm(d_model) if norm_first else None,
                                              enable_nested_tensor=False)
        body.fc = tnn.Linear(d_model, classes)
        self.add_module("1", body)

    def forward(self, x):
        body = self._modules["1"]
        valid = x >= 0
        h = body.embedding(x.clamp(min=0).long()) * valid[..., None] + body.pos_embedding(torch.arange(x.shape[1]))
        z = body.encoder(h, src_key_padding_mask=~valid)
        pooled = (z * valid[..., None]).sum(1) / valid.sum(1, keepdim=True)
        return body.fc(pooled)


def _classifier(id, kw, max_length=T, training=False):
    args = dict(d_model=8, nhead=2, num_layers=2, dim_feedforward=12, **kw)

    def make():
        return nn.Sequential(nn.SequenceLengths(), nn.TransformerClassifier(9, 3, max_length, **args))
    return LayerCase(id, make, (N, T), (N, 3), lambda: TorchTransformerClassifier(9, 3, max_length, **args),
                     training=training, inputs=token_ids(9), integer_input=True, bad_dtype="complex64")


def _encoder(id, layer_kw, num_layers, shape, final_norm=False):
    e = layer_kw["d_model"]

    def make():
        return nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer_kw), num_layers,
                                     nn.LayerNorm(e) if final_norm else None)

    def torch_make():
        return tnn.TransformerEncoder(tnn.TransformerEncoderLayer(**layer_kw), num_layers,
                                      tnn.LayerNorm(e) if final_norm else None, enable_nested_tensor=False)
    return LayerCase(id, make, shape, shape, torch_make, training=True)


CASES = [
    _encoder("encoder-2-post-norm", dict(d_model=8, nhead=2, dim_feedforward=12, dropout=0.0), 2, (4, 3, 8)),
    _encoder("encoder-3-pre-norm-final-norm-bf",
             dict(d_model=6, nhead=3, dim_feedforward=8, dropout=0.0, batch_first=True, norm_first=True), 3, (2, 5, 6),
             final_norm=True),
    _classifier("transformer-classifier", dict(dropout=0.0), training=True),
    _classifier("transformer-classifier-pre-norm-longer-table", dict(dropout=0.0, norm_first=True), max_length=T + 3,
                training=True),
    _classifier("transformer-classifier-eval-dropout", dict(dropout=0.3)),
]
