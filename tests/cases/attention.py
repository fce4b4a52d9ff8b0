"""Registry cases: MultiheadAttention (self-attention) and TransformerEncoderLayer.

The torch counterparts subclass the torch modules so state-dict keys are identical; the attention wrapper
calls ``forward(x, x, x)`` and keeps the output only. Layers under test draw non-zero biases on
``initialize`` (PyTorch initialises the attention biases to 0, which would leave their gradients untested
in the parity check's forward).
"""
import torch

from sparkdl import nn
from tests.cases import LayerCase


class RandomBiasMultiheadAttention(nn.MultiheadAttention):
    """MultiheadAttention whose biases are drawn from N(0, 0.3) instead of 0."""

    def reset_parameters(self, rng):
        super().reset_parameters(rng)
        for name, arr in self.named_parameters():
            if name.endswith("bias"):
                arr[...] = rng.normal(0, 0.3, arr.shape)


class TorchSelfAttention(torch.nn.MultiheadAttention):
    """``torch.nn.MultiheadAttention`` as a one-input layer: ``forward(x) = mha(x, x, x)[0]``."""

    def __init__(self, *args, causal=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.causal = causal

    def forward(self, x):
        length = x.shape[1] if self.batch_first else x.shape[0]
        mask = torch.triu(torch.ones(length, length, dtype=torch.bool), 1) if self.causal else None
        return super().forward(x, x, x, need_weights=False, attn_mask=mask, is_causal=self.causal)[0]


class TorchCausalEncoderLayer(torch.nn.TransformerEncoderLayer):
    """``torch.nn.TransformerEncoderLayer`` with the causal mask on every call."""

    def forward(self, x):
        length = x.shape[1] if self.self_attn.batch_first else x.shape[0]
        mask = torch.triu(torch.ones(length, length, dtype=torch.bool), 1)
        return super().forward(x, src_mask=mask, is_causal=True)


def _mha(id, args, shape, causal=False, **kw):
    return LayerCase(id, lambda: RandomBiasMultiheadAttention(**args, causal=causal), shape, shape,
                     lambda: TorchSelfAttention(**args, causal=causal), **kw)


def _tel(id, args, shape, causal=False, **kw):
    theirs = TorchCausalEncoderLayer if causal else torch.nn.TransformerEncoderLayer
    return LayerCase(id, lambda: nn.TransformerEncoderLayer(**args, causal=causal), shape, shape,
                     lambda: theirs(**args), **kw)


CASES = [
    _mha("mha-seq-first", dict(embed_dim=8, num_heads=2), (5, 3, 8)),
    _mha("mha-batch-first-1head", dict(embed_dim=6, num_heads=1, batch_first=True), (2, 4, 6)),
    _mha("mha-causal-batch-first", dict(embed_dim=8, num_heads=4, batch_first=True), (3, 5, 8), causal=True),
    _mha("mha-nobias", dict(embed_dim=4, num_heads=2, bias=False), (3, 2, 4)),
    # dropout on the attention weights: gradcheck only (the mask comes from the rng), eval parity
    LayerCase("mha-dropout-train", lambda: RandomBiasMultiheadAttention(8, 2, dropout=0.3), (4, 2, 8), (4, 2, 8),
              training=True),
    _mha("mha-dropout-eval", dict(embed_dim=8, num_heads=2, dropout=0.3), (4, 2, 8)),
    _tel("tel-post-norm", dict(d_model=8, nhead=2, dim_feedforward=12, dropout=0.0), (4, 3, 8), training=True),
    _tel("tel-pre-norm-gelu-bf", dict(d_model=8, nhead=4, dim_feedforward=6, dropout=0.0, activation="gelu",
                                      batch_first=True, norm_first=True), (2, 5, 8), training=True),
    _tel("tel-eval-dropout-eps", dict(d_model=6, nhead=3, dim_feedforward=10, dropout=0.2, layer_norm_eps=1e-3,
                                      batch_first=True), (3, 4, 6)),
    _tel("tel-causal-nobias", dict(d_model=4, nhead=2, dim_feedforward=8, dropout=0.0, bias=False), (5, 2, 4),
         causal=True),
    LayerCase("tel-dropout-train", lambda: nn.TransformerEncoderLayer(8, 2, 12, dropout=0.25), (3, 2, 8), (3, 2, 8),
              training=True),
]
