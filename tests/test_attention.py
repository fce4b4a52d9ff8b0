"""MultiheadAttention and TransformerEncoderLayer with masks (PyTorch parity, float64 gradients, padding
invariance) and their argument errors; the registry (tests/cases/attention.py) covers the unmasked cases."""
from functools import partial

import numpy as np
import pytest
import torch

from sparkdl import nn
from tests.cases.attention import RandomBiasMultiheadAttention
from tests.gradcheck import layer_gradcheck

N, L, E, H = 3, 5, 8, 2
PAD = np.zeros((N, L), bool)
PAD[0, 3:] = True  # sample 0 has 3 real tokens, sample 2 has 4, sample 1 is full
PAD[2, 4:] = True
FLOAT_MASK = np.random.default_rng(7).normal(0, 1, (L, L)).astype(np.float32)


def _torch_twin(layer, tm):
    tm.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in layer.state_dict().items()})
    return tm.eval()


def _compare(y, cache, layer, tm, yt, xt, gy):
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg="forward")
    gp = layer.zeros_like_parameters()
    gx = layer.backward(cache, gy, gp)
    yt.backward(torch.from_numpy(gy))
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg="grad input")
    grads = layer.parameter_layout().views(gp)
    for name, p in tm.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("use_pad,use_float,causal", [(True, False, False), (False, True, False), (True, True, True)])
def test_mha_masks_match_pytorch(use_pad, use_float, causal):
    layer = RandomBiasMultiheadAttention(E, H, batch_first=True).initialize(1)
    tm = _torch_twin(layer, torch.nn.MultiheadAttention(E, H, batch_first=True))
    x = np.random.default_rng(0).standard_normal((N, L, E)).astype(np.float32)
    pad = PAD if use_pad else None
    fmask = FLOAT_MASK if use_float else None
    y, cache = layer.forward(x, key_padding_mask=pad, attn_mask=fmask, is_causal=causal)
    tmask = torch.from_numpy(FLOAT_MASK) if use_float else None
    if causal:
        tri = torch.triu(torch.full((L, L), float("-inf")), 1)
        tmask = tri if tmask is None else tmask + tri
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    # torch deprecates mixing bool and float masks: the padding mask goes in as a float mask then
    tpad = None if pad is None else torch.from_numpy(pad if tmask is None
                                                     else np.where(pad, -np.inf, 0).astype(np.float32))
    yt = tm(xt, xt, xt, key_padding_mask=tpad, attn_mask=tmask, need_weights=False)[0]
    _compare(y, cache, layer, tm, yt, xt, np.random.default_rng(2).standard_normal(y.shape).astype(np.float32))


def test_encoder_layer_key_padding_mask_matches_pytorch():
    layer = nn.TransformerEncoderLayer(E, H, 16, dropout=0.0, batch_first=True, norm_first=True).initialize(4)
    tm = _torch_twin(layer, torch.nn.TransformerEncoderLayer(E, H, 16, dropout=0.0, batch_first=True,
                                                             norm_first=True))
    tm.train()
    x = np.random.default_rng(3).standard_normal((N, L, E)).astype(np.float32)
    y, cache = layer.forward(x, training=True, src_key_padding_mask=PAD)
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    yt = tm(xt, src_key_padding_mask=torch.from_numpy(PAD))
    _compare(y, cache, layer, tm, yt, xt, np.random.default_rng(5).standard_normal(y.shape).astype(np.float32))


@pytest.mark.parametrize("make", [lambda: RandomBiasMultiheadAttention(E, H, dropout=0.2, batch_first=True),
                                  lambda: nn.TransformerEncoderLayer(E, H, 6, dropout=0.2, batch_first=True)])
def test_masked_gradcheck_float64(make):
    layer = make().initialize(2).astype(np.float64)
    mask_arg = "key_padding_mask" if isinstance(layer, nn.MultiheadAttention) else "src_key_padding_mask"
    layer.forward = partial(layer.forward, **{mask_arg: PAD}, is_causal=True)
    layer_gradcheck(layer, np.random.default_rng(0).standard_normal((N, L, E)), training=True)


def test_padded_positions_do_not_change_real_outputs():
    """Changing the embeddings at padded positions changes nothing at the real ones (sample 0: 3 real tokens)."""
    layer = nn.TransformerEncoderLayer(E, H, 16, dropout=0.0, batch_first=True).initialize(0)
    x = np.random.default_rng(0).standard_normal((N, L, E)).astype(np.float32)
    x2 = x.copy()
    x2[0, 3:] = 100.0
    y1 = layer.forward(x, src_key_padding_mask=PAD)[0]
    y2 = layer.forward(x2, src_key_padding_mask=PAD)[0]
    np.testing.assert_allclose(y1[0, :3], y2[0, :3], rtol=1e-5, atol=1e-6)
    assert not np.allclose(y1[0, 3:], y2[0, 3:])
    causal = nn.MultiheadAttention(E, H, batch_first=True, causal=True).initialize(0)
    x3 = x.copy()
    x3[:, -1] = -50.0  # the last position is attended to by no earlier one
    np.testing.assert_allclose(causal(x)[:, :-1], causal(x3)[:, :-1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make,exc,match", [
    (lambda: nn.MultiheadAttention(6, 4), ValueError, "MultiheadAttention: embed_dim must be divisible by num_heads, "
                                                      "got embed_dim=6, num_heads=4"),
    (lambda: nn.MultiheadAttention(8, 2, dropout=1.0), ValueError, r"dropout must be a number in \[0, 1\), got 1.0"),
    (lambda: nn.MultiheadAttention(8, 2, batch_first=1), TypeError, "MultiheadAttention: batch_first must be a bool"),
    (lambda: nn.MultiheadAttention(0, 2), ValueError, "MultiheadAttention: embed_dim must be >= 1"),
    (lambda: nn.TransformerEncoderLayer(8, 2, activation="tanh"), ValueError,
     r"TransformerEncoderLayer: activation must be one of \['gelu', 'relu'\], got 'tanh'"),
    (lambda: nn.TransformerEncoderLayer(8, 3), ValueError, "embed_dim must be divisible by num_heads"),
    (lambda: nn.TransformerEncoderLayer(8, 2, dim_feedforward=0), ValueError, "dim_feedforward must be >= 1"),
    (lambda: nn.TransformerEncoderLayer(8, 2, norm_first="no"), TypeError, "norm_first must be a bool"),
])
def test_constructor_errors(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_forward_errors():
    m = nn.MultiheadAttention(E, H, batch_first=True, dropout=0.1)
    x = np.zeros((N, L, E), np.float32)
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(3, 5\), got \(5, 3\)"):
        m.forward(x, key_padding_mask=PAD.T)
    with pytest.raises(ValueError, match=r"attn_mask must have shape \(5, 5\) or \(6, 5, 5\), got \(3, 5, 5\)"):
        m.forward(x, attn_mask=np.zeros((3, 5, 5), bool))
    with pytest.raises(TypeError, match="key_padding_mask must be a bool or float numpy.ndarray, got ndarray of int64"):
        m.forward(x, key_padding_mask=PAD.astype(np.int64))
    with pytest.raises(ValueError, match="needs a random generator"):
        m.forward(x, training=True)
    with pytest.raises(ValueError, match=r"MultiheadAttention: expected input.shape\[2\] == 8"):
        m.forward(np.zeros((N, L, 4), np.float32))
    with pytest.raises(ValueError, match=r"TransformerEncoderLayer: expected 3-D input, got 2-D"):
        nn.TransformerEncoderLayer(E, H).forward(np.zeros((L, E), np.float32))


def test_empty_batch():
    for layer, shape in ((nn.MultiheadAttention(E, H, batch_first=True), (0, L, E)),
                         (nn.TransformerEncoderLayer(E, H, 16), (L, 0, E))):
        y, cache = layer.forward(np.zeros(shape, np.float32))
        gp = np.full(layer.num_parameters(), np.nan, np.float32)
        assert y.shape == shape and layer.backward(cache, y, gp).shape == shape
        np.testing.assert_array_equal(gp, 0)
