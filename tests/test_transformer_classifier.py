"""TransformerClassifier and TransformerEncoder beyond the registry cases (tests/cases/transformer_text.py):
padding contributes nothing, empty rows, argument errors, and the ML stages see a token-id network."""
import numpy as np
import pytest

from sparkdl import nn

V, C, T_MAX = 20, 2, 7


def _model(**kw):
    args = dict(d_model=8, nhead=2, num_layers=2, dim_feedforward=16, dropout=0.0)
    args.update(kw)
    return nn.TransformerClassifier(V, C, T_MAX, **args).initialize(3)


def _batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(1, V, (4, 6))
    return ids, np.array([6, 3, 1, 4])


def _step(model, seq, training=False):
    y, cache = model.forward(seq, training=training, rng=np.random.default_rng(1))
    gp = model.zeros_like_parameters()
    gy = np.random.default_rng(2).standard_normal(y.shape).astype(np.float32)
    assert model.backward(cache, gy, gp) is None
    return y, gp


@pytest.mark.parametrize("norm_first", [False, True])
def test_padded_ids_change_neither_output_nor_gradients(norm_first):
    model = _model(norm_first=norm_first)
    ids, lengths = _batch()
    y, gp = _step(model, nn.PaddedSequence(ids, lengths))
    other = ids.copy()
    pad = np.arange(ids.shape[1]) >= lengths[:, None]
    other[pad] = np.random.default_rng(5).integers(0, 1000, pad.sum())  # even ids outside the table
    y2, gp2 = _step(model, nn.PaddedSequence(other, lengths))
    np.testing.assert_array_equal(y2, y)
    np.testing.assert_array_equal(gp2, gp)
    # more padding at the end (a longer batch) gives the same logits up to rounding
    wider = np.concatenate([ids, np.zeros((4, 1), ids.dtype)], axis=1)
    y3, _ = _step(model, nn.PaddedSequence(wider, lengths))
    np.testing.assert_allclose(y3, y, rtol=1e-5, atol=1e-6)


def test_padded_rows_equal_the_rows_alone():
    """A padded row's logits equal those of the same row run unpadded (batch of one, T = its length)."""
    model = _model()
    ids, lengths = _batch()
    y = model(nn.PaddedSequence(ids, lengths))
    for i, n in enumerate(lengths):
        alone = model(ids[i:i + 1, :n])
        np.testing.assert_allclose(y[i:i + 1], alone, rtol=1e-5, atol=1e-6, err_msg=f"row {i}")


def test_empty_row_gives_the_head_bias_and_finite_gradients():
    model = _model()
    ids, lengths = _batch()
    lengths[1] = 0
    y, gp = _step(model, nn.PaddedSequence(ids, lengths), training=True)
    np.testing.assert_allclose(y[1], model.fc.bias, rtol=1e-6)
    assert np.isfinite(y).all() and np.isfinite(gp).all()


def test_through_sequence_lengths_and_token_detection():
    """-1-padded float rows (the Spark data path) through SequenceLengths equal the PaddedSequence input, and the
    ML stages read the network as a token-id network with the token table's vocabulary."""
    pytest.importorskip("pyspark")
    from sparkdl.ml.tokens import token_input
    model = _model()
    net = nn.Sequential(nn.SequenceLengths(), model)
    ids, lengths = _batch()
    rows = np.where(np.arange(ids.shape[1]) < lengths[:, None], ids, -1).astype(np.float32)
    np.testing.assert_array_equal(net(rows), model(nn.PaddedSequence(ids, lengths)))
    assert token_input(net) == (-1, V)


@pytest.mark.parametrize("make, error, message", [
    (lambda: nn.TransformerClassifier(V, C, T_MAX, d_model=8, nhead=3), ValueError,
     "embed_dim must be divisible by num_heads"),
    (lambda: nn.TransformerClassifier(V, 0, T_MAX), ValueError, "TransformerClassifier: num_classes must be >= 1"),
    (lambda: nn.TransformerClassifier(V, C, 0), ValueError, "TransformerClassifier: max_length must be >= 1"),
    (lambda: nn.TransformerClassifier(V, C, T_MAX, dropout=1.0), ValueError, r"dropout must be a number in \[0, 1\)"),
    (lambda: nn.TransformerClassifier(V, C, T_MAX, num_layers=0), ValueError, "num_layers must be >= 1"),
    (lambda: nn.TransformerClassifier(V, C, T_MAX, padding_idx=V), ValueError, "padding_idx must be within"),
    (lambda: nn.TransformerEncoder(nn.Linear(4, 4), 2), TypeError, "encoder_layer must be a TransformerEncoderLayer"),
    (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2), 2, norm=nn.ReLU()), TypeError,
     "norm must be a LayerNorm or None"),
])
def test_bad_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_bad_inputs():
    model = _model()
    ids, lengths = _batch()
    with pytest.raises(ValueError, match="sequences of 8 positions exceed max_length=7"):
        model(np.ones((2, 8), np.int64))
    with pytest.raises(TypeError, match="put SequenceLengths\\(\\) first"):
        model(ids.astype(np.float32))
    with pytest.raises(ValueError, match=r"expected \(N, T\) token ids"):
        model(ids[0])
    with pytest.raises(ValueError, match=r"lengths\[0\] = 9 is outside \[0, 6\]"):
        model(nn.PaddedSequence(ids, np.array([9, 1, 1, 1])))
    bad = ids.copy()
    bad[0, 0] = V
    with pytest.raises(ValueError, match=f"index {V} at input position \\(0, 0\\) is out of range"):
        model(nn.PaddedSequence(bad, lengths))


def test_encoder_copies_are_initialized_independently():
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2).initialize(0)
    a, b = (enc.layers[i].self_attn.in_proj_weight for i in range(2))
    assert a.shape == b.shape and not np.array_equal(a, b)
