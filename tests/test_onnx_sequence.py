"""torch -> ONNX -> sparkdl for the sequence layers: Embedding (Gather), LSTM, GRU, RNN, LayerNormalization
(native and decomposed), MultiheadAttention and TransformerEncoderLayer (primitive ops) match torch within 1e-5,
at the exported batch size and another; unsupported recurrent attributes fail naming node, operator and rule."""
import numpy as np
import pytest

from sparkdl import nn
from tests.gradcheck import layer_gradcheck
from tests.onnx_helpers import make_model, torch_to_onnx

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
sonnx = pytest.importorskip("sparkdl.onnx")
tnn = torch.nn
from onnx import helper  # noqa: E402


def _compare(tm, *xs, **export):
    """Export ``tm`` on ``xs[0]``, import, and compare with torch on every input in ``xs``."""
    data = torch_to_onnx(tm, xs[0], **export)
    model = sonnx.load(data)
    for x in xs:
        with torch.no_grad():
            expected = tm(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(model(x), expected, rtol=1e-5, atol=1e-5)
    return model


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _ids(*shape, vocab=20, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, shape).astype(np.int64)


class EmbeddingLSTM(tnn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.lstm, self.fc = tnn.Embedding(20, 6), tnn.LSTM(6, 5, batch_first=True), tnn.Linear(5, 3)

    def forward(self, ids):
        _, (h, _) = self.lstm(self.emb(ids))
        return self.fc(h[-1])


def test_embedding_lstm_classifier_matches_torch_with_torch_names():
    torch.manual_seed(0)
    tm = EmbeddingLSTM()
    model = _compare(tm, _ids(4, 7), _ids(2, 7, seed=1))
    assert set(model.state_dict()) == set(tm.state_dict())
    kinds = {type(m).__name__ for _, m in model.named_modules()}
    assert {"Embedding", "LSTM", "Linear"} <= kinds


def test_imported_sequence_model_saves_and_loads_as_data(tmp_path):
    """Generic nodes and RecurrentPart are ordinary modules: sparkdl.io persistence round-trips them."""
    from sparkdl import io
    torch.manual_seed(0)
    model = sonnx.load(torch_to_onnx(EmbeddingLSTM(), _ids(3, 5)))
    io.save_model(model, tmp_path / "m")
    back = io.load_model(tmp_path / "m")
    ids = _ids(4, 5, seed=2)
    np.testing.assert_array_equal(back(ids), model(ids))


class BiGRU(tnn.Module):
    def __init__(self):
        super().__init__()
        self.gru = tnn.GRU(4, 5, num_layers=2, bidirectional=True, batch_first=True)
        self.fc = tnn.Linear(20, 3)

    def forward(self, x):
        out, h = self.gru(x)
        last = h[-2:].transpose(0, 1).reshape(x.shape[0], -1)  # dynamic batch: Shape arithmetic in the file
        return self.fc(torch.cat([out[:, -1], last], 1))


def test_bidirectional_two_layer_gru_matches_torch():
    torch.manual_seed(1)
    tm = BiGRU()
    model = _compare(tm, _x(3, 6, 4), _x(5, 6, 4, seed=1))
    (gru,) = [m for _, m in model.named_modules() if isinstance(m, nn.GRU)]  # two ONNX nodes, one module
    assert gru.num_layers == 2 and gru.bidirectional
    assert set(model.state_dict()) == set(tm.state_dict())  # weight_ih_l1_reverse ... as torch's


class StackedLSTM(tnn.Module):
    def __init__(self):
        super().__init__()
        self.lstm, self.fc = tnn.LSTM(4, 5, num_layers=3, batch_first=True), tnn.Linear(10, 2)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.fc(torch.cat([out[:, -1] + h[0], c[1]], 1))  # every layer's states are used


def test_stacked_lstm_is_one_module_with_torch_names():
    torch.manual_seed(7)
    tm = StackedLSTM()
    model = _compare(tm, _x(3, 6, 4), _x(2, 6, 4, seed=1))
    (lstm,) = [m for _, m in model.named_modules() if isinstance(m, nn.LSTM)]
    assert lstm.num_layers == 3 and set(model.state_dict()) == set(tm.state_dict())


class ReluRNN(tnn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = tnn.RNN(3, 6, nonlinearity="relu", batch_first=True), tnn.Linear(6, 2)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out[:, -1])


def test_relu_rnn_matches_torch():
    torch.manual_seed(2)
    model = _compare(ReluRNN(), _x(4, 5, 3), _x(1, 5, 3, seed=1))
    (rnn,) = [m for _, m in model.named_modules() if isinstance(m, nn.RNN)]
    assert rnn.nonlinearity == "relu"


@pytest.mark.parametrize("opset", [17, 14], ids=["LayerNormalization", "decomposed"])
def test_layer_norm_mlp_matches_torch(opset):
    torch.manual_seed(3)
    tm = tnn.Sequential(tnn.Linear(6, 8), tnn.LayerNorm(8), tnn.ReLU(), tnn.Linear(8, 3))
    with torch.no_grad():
        tm[1].weight.uniform_(0.5, 1.5)
        tm[1].bias.normal_()
    model = _compare(tm, _x(4, 6), _x(2, 6, seed=1), opset=opset)
    if opset == 17:
        assert isinstance(model, nn.Sequential) and isinstance(model[1], nn.LayerNorm)
        assert list(model.state_dict()) == list(tm.state_dict())


class _no_fastpath:
    """torch's fused inference path has no ONNX export: trace the primitive computation."""

    def __enter__(self):
        self.old = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(False)

    def __exit__(self, *exc):
        torch.backends.mha.set_fastpath_enabled(self.old)


class SelfAttention(tnn.Module):
    def __init__(self):
        super().__init__()
        self.attn = tnn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class Encoder(tnn.Module):
    """A forward(x) only: the legacy exporter would pass the layer's default is_causal=False as a tensor."""

    def __init__(self, norm_first=False):
        super().__init__()
        self.layer = tnn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True,
                                                 norm_first=norm_first)

    def forward(self, x):
        return self.layer(x)


def _encoder_layer(norm_first=False):
    torch.manual_seed(4)
    model = Encoder(norm_first)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))  # non-trivial LayerNorm and bias values
    return model


@pytest.mark.parametrize("make", [SelfAttention, _encoder_layer, lambda: _encoder_layer(norm_first=True)],
                         ids=["MultiheadAttention", "TransformerEncoderLayer", "pre-norm"])
def test_attention_exports_import_as_primitives(make):
    torch.manual_seed(5)
    tm = make()
    with _no_fastpath():
        model = _compare(tm, _x(3, 5, 8), _x(2, 5, 8, seed=1))
    assert isinstance(model, nn.Graph)
    assert any(isinstance(m, nn.OnnxOp) and m.op_type == "MatMul" and m.num_inputs == 2
               for _, m in model.named_modules())


def test_imported_attention_graph_gradients_float64():
    """The generic nodes' backward (MatMul, Transpose, Reshape, Gather, Softmax, Mul, Add ...) by finite
    differences, through a whole imported encoder layer."""
    with _no_fastpath():
        model = sonnx.load(torch_to_onnx(_encoder_layer(), _x(2, 3, 8)))
    model.astype(np.float64)
    layer_gradcheck(model, _x(2, 3, 8, seed=2).astype(np.float64), training=False, rtol=1e-4, atol=1e-6,
                    max_params=60)


@pytest.mark.parametrize("make, x", [(EmbeddingLSTM, _ids(3, 7)), (BiGRU, _x(3, 6, 4)), (_encoder_layer, _x(3, 5, 8))],
                         ids=["embedding-lstm", "bigru", "encoder"])
def test_imported_sequence_models_export_again(tmp_path, make, x):
    """torch -> ONNX -> sparkdl -> ONNX -> onnxruntime: the generic nodes are written back as their operators."""
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(6)
    tm = make()
    with _no_fastpath():
        model = sonnx.load(torch_to_onnx(tm, x))
    path = sonnx.save(model, tmp_path / "again.onnx", input_shape=x.shape[1:])
    onnx.checker.check_model(onnx.load(path), full_check=True)
    other = (_ids if x.dtype == np.int64 else _x)(2, *x.shape[1:], seed=3)
    for batch in (x, other):
        (y,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": batch})
        with torch.no_grad():
            np.testing.assert_allclose(y, tm(torch.from_numpy(batch)).numpy(), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------ errors
def _recurrent_file(op="LSTM", gates=4, attrs=None, extra_inputs=(), extra_inits=(), x_shape=(4, 2, 3)):
    rng = np.random.default_rng(0)
    h, d = 5, 2 if (attrs or {}).get("direction") == "bidirectional" else 1
    inits = [("W", rng.standard_normal((d, gates * h, 3)).astype(np.float32)),
             ("R", rng.standard_normal((d, gates * h, h)).astype(np.float32)), *extra_inits]
    node = helper.make_node(op, ["x", "W", "R", *extra_inputs], ["y"], name="/rnn/" + op, hidden_size=h,
                            **(attrs or {}))
    return make_model([node], [("x", list(x_shape))], [("y", [None] * 4)], inits)


def _error(data, match):
    with pytest.raises(sonnx.OnnxImportError, match=match):
        sonnx.load(data)


@pytest.mark.parametrize("attrs, match", [
    ({"clip": 3.0}, r"clip=3\.0"),
    ({"input_forget": 1}, r"input_forget=1"),
    ({"activations": ["Relu", "Tanh", "Tanh"]}, r"activations=\['Relu', 'Tanh', 'Tanh'\]"),
    ({"direction": "reverse"}, r"direction='reverse'"),
    ({"layout": 1}, r"layout=1")], ids=["clip", "input_forget", "activations", "reverse", "layout"])
def test_unsupported_lstm_attributes_are_named(attrs, match):
    _error(_recurrent_file(attrs=attrs), r"node '/rnn/LSTM' \(LSTM\): " + match + r".*supported: the PyTorch cell")


def test_unsupported_recurrent_inputs_are_named():
    p = ("P", np.zeros((1, 15), np.float32))
    _error(_recurrent_file(extra_inputs=["", "", "", "", "P"], extra_inits=[p]), r"\(LSTM\): peephole weights P")
    h0 = ("h0", np.ones((1, 2, 5), np.float32))
    _error(_recurrent_file(extra_inputs=["", "", "h0"], extra_inits=[h0]), r"initial_h 'h0' is not a zero tensor")
    lens = ("lens", np.array([4, 3], np.int32))
    _error(_recurrent_file(extra_inputs=["", "lens"], extra_inits=[lens]), r"sequence_lens 'lens' is given")


def test_gru_without_linear_before_reset_is_refused():
    _error(_recurrent_file("GRU", 3), r"node '/rnn/GRU' \(GRU\): linear_before_reset=0: .*supported: "
                                      r"linear_before_reset=1")
    # ... and with it, a hand-built ONNX GRU computes what sparkdl's GRU computes
    data = _recurrent_file("GRU", 3, attrs={"linear_before_reset": 1})
    model = sonnx.load(data)
    ort = pytest.importorskip("onnxruntime")
    x = _x(4, 2, 3)
    (y,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(model(x), y, rtol=1e-5, atol=1e-5)
