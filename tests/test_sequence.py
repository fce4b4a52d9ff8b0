"""Embedding/EmbeddingBag and RNN/LSTM/GRU beyond the registry cases: full (output, state) parity with torch
including h_n/c_n gradients and packed sequences, padding semantics, index validation, bad arguments."""
import numpy as np
import pytest

from sparkdl import nn
from sparkdl.io import build_model, get_architecture

torch = pytest.importorskip("torch")

KINDS = {"RNN": (nn.RNN, torch.nn.RNN), "LSTM": (nn.LSTM, torch.nn.LSTM), "GRU": (nn.GRU, torch.nn.GRU)}


def _pair(kind, **kw):
    ours, theirs = KINDS[kind]
    m = ours(5, 4, **kw).initialize(1)
    tm = theirs(5, 4, **kw)
    tm.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in m.state_dict().items()})
    return m, tm


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("kw,lengths", [
    ({}, None),
    ({"num_layers": 2, "bidirectional": True, "batch_first": True}, [6, 2, 4]),
    ({"bidirectional": True}, [3, 6, 1]),
    ({"num_layers": 3, "bias": False, "batch_first": True}, [1, 5, 6]),
])
def test_output_and_state_match_torch(kind, kw, lengths):
    """Forward output, h_n (and c_n), and gradients through all of them, against torch (packed if lengths)."""
    m, tm = _pair(kind, **kw)
    bf, n, t = kw.get("batch_first", False), 3, 6
    x = np.random.default_rng(0).standard_normal((n, t, 5) if bf else (t, n, 5)).astype(np.float32)
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    if lengths is None:
        inp = x
        out_t, state_t = tm(xt)
    else:
        inp = nn.PaddedSequence(x, np.array(lengths))
        packed = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.tensor(lengths), batch_first=bf,
                                                         enforce_sorted=False)
        out_t, state_t = tm(packed)
        out_t = torch.nn.utils.rnn.pad_packed_sequence(out_t, batch_first=bf, total_length=t)[0]
    (out, state), cache = m.forward(inp)
    states, states_t = (state, state_t) if kind == "LSTM" else ((state,), (state_t,))
    data = out.data if lengths is not None else out
    np.testing.assert_allclose(data, out_t.detach().numpy(), rtol=1e-5, atol=1e-6)
    for s, st in zip(states, states_t):
        np.testing.assert_allclose(s, st.detach().numpy(), rtol=1e-5, atol=1e-6)
    rng = np.random.default_rng(5)
    g_out = rng.standard_normal(data.shape).astype(np.float32)
    g_states = [rng.standard_normal(s.shape).astype(np.float32) for s in states]
    gp = m.zeros_like_parameters()
    gx = m.backward(cache, (g_out, tuple(g_states) if kind == "LSTM" else g_states[0]), gp)
    loss = (out_t * torch.from_numpy(g_out)).sum() + sum((st * torch.from_numpy(g)).sum()
                                                          for st, g in zip(states_t, g_states))
    loss.backward()
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    grads = m.parameter_layout().views(gp)
    for name, p in tm.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("kind", list(KINDS))
def test_padded_steps_contribute_nothing(kind):
    m, _ = _pair(kind, bidirectional=True, batch_first=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 7, 5)).astype(np.float32)
    lengths = np.array([7, 3, 5])
    x2 = x.copy()
    x2[1, 3:] = 100 * rng.standard_normal((4, 5))  # garbage in padded steps
    x2[2, 5:] = np.nan
    (o1, s1), c1 = m.forward(nn.PaddedSequence(x, lengths))
    (o2, s2), _ = m.forward(nn.PaddedSequence(x2, lengths))
    np.testing.assert_array_equal(o1.data, o2.data)
    assert np.all(o1.data[1, 3:] == 0) and np.all(o1.data[2, 5:] == 0)
    # row 1 alone, unpadded, gives the same output and final state
    (o3, s3), _ = m.forward(x[1:2, :3])
    np.testing.assert_allclose(o1.data[1, :3], o3[0], rtol=1e-6, atol=1e-7)
    h1, h3 = (s1[0], s3[0]) if kind == "LSTM" else (s1, s3)
    np.testing.assert_allclose(h1[:, 1], h3[:, 0], rtol=1e-6, atol=1e-7)
    gx = m.backward(c1, (np.ones_like(o1.data), None), m.zeros_like_parameters())
    assert np.all(gx[1, 3:] == 0) and np.all(gx[2, 5:] == 0)


def test_dropout_between_layers_is_deterministic_and_eval_is_identity():
    m = nn.LSTM(3, 4, num_layers=2, dropout=0.5).initialize(0)
    x = np.random.default_rng(0).standard_normal((5, 2, 3)).astype(np.float32)
    a = m.forward(x, training=True, rng=np.random.default_rng(7))[0][0]
    b = m.forward(x, training=True, rng=np.random.default_rng(7))[0][0]
    c = m.forward(x, training=True, rng=np.random.default_rng(8))[0][0]
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    no_drop = nn.LSTM(3, 4, num_layers=2)
    no_drop.load_state_dict(m.state_dict())
    np.testing.assert_array_equal(m.forward(x)[0][0], no_drop.forward(x)[0][0])
    with pytest.raises(ValueError, match="rng"):
        m.forward(x, training=True)


def test_parameter_names_shapes_and_init():
    m = nn.GRU(6, 8, num_layers=2, bidirectional=True).initialize(3)
    t = torch.nn.GRU(6, 8, num_layers=2, bidirectional=True)
    assert [(k, tuple(v.shape)) for k, v in m.state_dict().items()] == \
           [(k, tuple(v.shape)) for k, v in t.state_dict().items()]
    w = m.flat_parameters
    assert np.abs(w).max() <= 1 / np.sqrt(8) and np.abs(w).max() > 0.9 / np.sqrt(8)
    assert abs(w.mean()) < 0.02 and abs(w.std() - (1 / np.sqrt(8)) / np.sqrt(3)) < 0.01


def test_from_config_rebuilds_a_text_network():
    net = nn.Sequential(nn.SequenceLengths(), nn.Embedding(20, 4, padding_idx=0),
                        nn.LSTM(4, 6, num_layers=2, batch_first=True, bidirectional=True, dropout=0.1),
                        nn.RNNOutput("last"), nn.Linear(12, 2)).initialize(0)
    spec = get_architecture(net)
    net2 = build_model(spec)
    net2.load_state_dict(net.state_dict())
    assert get_architecture(net2) == spec
    x = np.array([[3, 4, 5, -1], [7, -1, -1, -1]], np.float32)
    np.testing.assert_array_equal(net2(x), net(x))
    rnn = build_model(get_architecture(nn.RNN(3, 2, nonlinearity="relu")))
    assert rnn.nonlinearity == "relu"


# ------------------------------------------------------------------------------------------ embeddings
def test_embedding_init_and_padding_row_gets_no_gradient():
    e = nn.Embedding(1000, 16, padding_idx=-1).initialize(0)
    assert e.padding_idx == 999 and np.all(e.weight[999] == 0)
    w = e.weight[:999]
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1) < 0.02
    ids = np.array([[1, 999, 1], [999, 2, 3]])
    y, cache = e.forward(ids)
    gp = e.zeros_like_parameters()
    assert e.backward(cache, np.ones_like(y), gp) is None
    g = gp.reshape(1000, 16)
    assert np.all(g[999] == 0) and np.all(g[1] == 2) and np.all(g[2] == 1)


@pytest.mark.parametrize("layer", [nn.Embedding(10, 3), nn.EmbeddingBag(10, 3)], ids=["Embedding", "EmbeddingBag"])
@pytest.mark.parametrize("bad,pos", [(10, "(1, 2)"), (-1, "(1, 2)"), (2**40, "(1, 2)")])
def test_out_of_range_index_names_layer_index_and_range(layer, bad, pos):
    ids = np.array([[1, 2, 3], [4, 5, bad]], np.int64)
    with pytest.raises(ValueError, match=rf"{type(layer).__name__}: index {bad} at input position \(1, 2\) is "
                                         r"out of range; valid indices are 0\.\.9"):
        layer.forward(ids)


def test_padded_sequence_indices_beyond_length_are_not_read():
    e = nn.Embedding(5, 2).initialize(0)
    seq = nn.PaddedSequence(np.array([[1, 2, 77], [3, -9, -9]]), np.array([2, 1]))
    y, cache = e.forward(seq)
    np.testing.assert_array_equal(y.data[0, :2], e.weight[[1, 2]])
    assert np.all(y.data[0, 2] == 0) and np.all(y.data[1, 1:] == 0)
    with pytest.raises(ValueError, match="index 77 at input position \\(0, 2\\)"):
        e.forward(nn.PaddedSequence(seq.data, np.array([3, 1])))
    with pytest.raises(ValueError, match=r"lengths\[1\] = 4 is outside \[0, 3\]"):
        e.forward(nn.PaddedSequence(seq.data, np.array([3, 4])))


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_offsets_and_weights_match_torch(mode):
    b = nn.EmbeddingBag(10, 3, mode=mode, padding_idx=0).initialize(1)
    tb = torch.nn.EmbeddingBag(10, 3, mode=mode, padding_idx=0)
    tb.load_state_dict({"weight": torch.from_numpy(b.weight.copy())})
    inp, off = np.array([1, 0, 3, 4, 4, 9, 0]), np.array([0, 2, 2, 5])  # bag 1 empty, bag 0 holds padding
    psw = np.random.default_rng(1).uniform(0.5, 2, 7).astype(np.float32) if mode == "sum" else None
    y, cache = b.forward((inp, off, psw) if mode == "sum" else (inp, off))
    yt = tb(torch.from_numpy(inp), torch.from_numpy(off),
            per_sample_weights=None if psw is None else torch.from_numpy(psw))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-6, atol=1e-7)
    assert np.all(y[1] == 0)
    g = np.random.default_rng(0).standard_normal(y.shape).astype(np.float32)
    gp = b.zeros_like_parameters()
    b.backward(cache, g, gp)
    yt.backward(torch.from_numpy(g))
    np.testing.assert_allclose(gp.reshape(10, 3), tb.weight.grad.numpy(), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------------------------ bad arguments
@pytest.mark.parametrize("make,exc,match", [
    (lambda: nn.Embedding(0, 3), ValueError, "num_embeddings must be >= 1"),
    (lambda: nn.Embedding(4, 2.5), TypeError, "embedding_dim must be an int"),
    (lambda: nn.Embedding(4, 2, padding_idx=4), ValueError, r"padding_idx must be within \[-4, 3\]"),
    (lambda: nn.EmbeddingBag(4, 2, mode="max"), ValueError, "mode must be 'mean' or 'sum'"),
    (lambda: nn.LSTM(0, 3), ValueError, "input_size must be >= 1"),
    (lambda: nn.GRU(3, 3, dropout=1.0), ValueError, r"dropout \(between layers\) must be in \[0, 1\)"),
    (lambda: nn.GRU(3, 3, dropout="0.1"), TypeError, "dropout must be a real number"),
    (lambda: nn.LSTM(3, 3, bidirectional=1), TypeError, "bidirectional must be a bool"),
    (lambda: nn.RNN(3, 3, nonlinearity="sigmoid"), ValueError, "nonlinearity must be 'tanh' or 'relu'"),
    (lambda: nn.RNNOutput("h_n"), ValueError, "select must be one of"),
    (lambda: nn.SequenceLengths(0), ValueError, "padding_value must be negative"),
])
def test_constructor_errors(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


@pytest.mark.parametrize("layer,x,exc,match", [
    (nn.LSTM(3, 2), np.zeros((4, 2, 5), np.float32), ValueError, r"expected input.shape\[2\] == 3"),
    (nn.LSTM(3, 2), np.zeros((4, 3), np.float32), ValueError, "expected 3-D input"),
    (nn.GRU(3, 2), np.zeros((4, 2, 3), np.float64), TypeError, "dtype must be float32"),
    (nn.GRU(3, 2), nn.PaddedSequence(np.zeros((4, 2, 3), np.float32), np.array([1.0, 2.0])), TypeError,
     "lengths must be an integer"),
    (nn.GRU(3, 2), nn.PaddedSequence(np.zeros((4, 2, 3), np.float32), np.array([1, 2, 3])), ValueError,
     r"lengths must have shape \(2,\)"),
    (nn.EmbeddingBag(5, 2), (np.array([1, 2]), np.array([1])), ValueError, "offsets must start at 0"),
    (nn.EmbeddingBag(5, 2), (np.array([1, 2]), np.array([0]), np.ones(2, np.float32)), ValueError,
     "only supported with mode='sum'"),
    (nn.EmbeddingBag(5, 2), np.array([1, 2]), ValueError, r"expected 2-D input \(B, L\)"),
    (nn.SequenceLengths(), np.array([[1, -1, 2]], np.float32), ValueError,
     "row 0: id 2.0 at position 2 follows padding at position 1"),
    (nn.SequenceLengths(), np.array([[1, 0.5]], np.float32), ValueError, "row 0, position 1: 0.5 is not a token id"),
    (nn.SequenceLengths(), np.array([[1, -3]]), ValueError, "row 0, position 1: -3 is not a token id"),
    (nn.RNNOutput(), np.zeros((2, 3), np.float32), TypeError, r"must be the \(output, h_n\)"),
])
def test_forward_errors(layer, x, exc, match):
    with pytest.raises(exc, match=match):
        layer.forward(x)
