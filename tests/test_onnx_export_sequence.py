"""sparkdl -> ONNX -> onnxruntime within 1e-5 for networks of the sequence layers (Embedding, LSTM, GRU, RNN,
LayerNorm, MultiheadAttention, TransformerEncoderLayer) and a Graph of them; the checker accepts every file and
sparkdl.onnx.load of the file reproduces the model."""
import numpy as np
import pytest

from sparkdl import nn

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
sonnx = pytest.importorskip("sparkdl.onnx")


def _ids(*shape, vocab=12, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, shape).astype(np.int64)


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _affine(model, seed=0):
    """Non-trivial 1-D parameters: LayerNorm weights (init 1) and biases (init 0) would hide a swapped or
    dropped tensor."""
    rng = np.random.default_rng(seed)
    for name, p in model.named_parameters():
        if p.ndim == 1:
            p[...] = rng.uniform(0.5, 1.5, p.shape) if name.endswith("weight") else rng.normal(0, 0.3, p.shape)
    return model


CASES = [
    ("embedding-lstm", lambda: nn.Sequential(nn.Embedding(12, 6), nn.LSTM(6, 5, batch_first=True),
                                             nn.RNNOutput("last"), nn.Linear(5, 3)), (7,), _ids),
    ("bigru-2-layers", lambda: nn.Sequential(nn.GRU(4, 5, num_layers=2, bidirectional=True, batch_first=True),
                                             nn.RNNOutput("output"), nn.Flatten(), nn.Linear(60, 3)), (6, 4), _x),
    ("bilstm-2-layers-last", lambda: nn.Sequential(nn.LSTM(4, 3, num_layers=2, bidirectional=True,
                                                           batch_first=True),
                                                   nn.RNNOutput("last")), (5, 4), _x),
    ("rnn-relu-time-major", lambda: nn.Sequential(nn.RNN(3, 6, nonlinearity="relu"), nn.RNNOutput("output")),
     (4, 3), _x),
    ("layer-norm-mlp", lambda: nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.ReLU(), nn.Linear(8, 3)),
     (6,), _x),
    ("layer-norm-2d", lambda: nn.Sequential(nn.LayerNorm((3, 4), bias=False)), (3, 4), _x),
    ("attention-causal", lambda: nn.MultiheadAttention(8, 2, batch_first=True, causal=True), (5, 8), _x),
    ("attention-time-major", lambda: nn.MultiheadAttention(8, 4), (3, 8), _x),
    ("transformer", lambda: nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True), (5, 8), _x),
    ("transformer-prenorm-gelu-time-major", lambda: nn.TransformerEncoderLayer(
        8, 2, dim_feedforward=16, activation="gelu", norm_first=True), (4, 8), _x),
    ("transformer-causal", lambda: nn.TransformerEncoderLayer(8, 4, dim_feedforward=8, batch_first=True,
                                                              causal=True), (6, 8), _x),
]


def _run(path, feeds):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("name, make, shape, data", CASES, ids=[c[0] for c in CASES])
def test_onnxruntime_matches_sparkdl(tmp_path, name, make, shape, data):
    model = _affine(make().initialize(0))
    path = sonnx.save(model, tmp_path / f"{name}.onnx", input_shape=shape)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    x = data(3, *shape, seed=1)
    expected_type = onnx.TensorProto.INT64 if x.dtype == np.int64 else onnx.TensorProto.FLOAT
    assert proto.graph.input[0].type.tensor_type.elem_type == expected_type
    ours = model(x)
    (y,) = _run(path, {"input": x})
    np.testing.assert_allclose(y, ours, rtol=1e-5, atol=1e-5)
    back = sonnx.load(path)  # and back into sparkdl (the glue as generic nodes)
    np.testing.assert_allclose(back(x), ours, rtol=1e-5, atol=1e-6)
    other = data(2, *shape, seed=2)  # another batch size
    np.testing.assert_allclose(_run(path, {"input": other})[0], model(other), rtol=1e-5, atol=1e-5)


def test_recurrent_layers_export_their_native_operators(tmp_path):
    model = nn.Sequential(nn.LSTM(4, 3, num_layers=2, batch_first=True), nn.RNNOutput("last"))
    ops = [n.op_type for n in onnx.load(sonnx.save(model, tmp_path / "a.onnx", input_shape=(5, 4))).graph.node]
    assert ops.count("LSTM") == 2
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    ops = [n.op_type for n in onnx.load(sonnx.save(model, tmp_path / "b.onnx", input_shape=(4,))).graph.node]
    assert ops == ["Gemm", "LayerNormalization"]


def test_graph_of_sequence_layers(tmp_path):
    """Token ids (int64) and float features in one Graph: embedding -> GRU, joined with a dense branch."""
    model = _affine(nn.Graph(["ids", "extra"], [
        ("emb", nn.Embedding(12, 4), "ids"),
        ("gru", nn.GRU(4, 6, batch_first=True), "emb"),
        ("last", nn.RNNOutput("last"), "gru"),
        ("dense", nn.Linear(3, 6), "extra"),
        ("norm", nn.LayerNorm(6), "dense"),
        ("add", nn.Add(), ["last", "norm"]),
        ("fc", nn.Linear(6, 2), "add")], "fc").initialize(3))
    path = sonnx.save(model, tmp_path / "g.onnx", input_shape=[(5,), (3,)])
    inputs = onnx.load(path).graph.input
    assert [i.type.tensor_type.elem_type for i in inputs] == [onnx.TensorProto.INT64, onnx.TensorProto.FLOAT]
    ids, extra = _ids(4, 5), _x(4, 3)
    (y,) = _run(path, {"ids": ids, "extra": extra})
    np.testing.assert_allclose(y, model((ids, extra)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sonnx.load(path)((ids, extra)), y, rtol=1e-5, atol=1e-5)


def test_sequence_export_errors(tmp_path):
    with pytest.raises(ValueError, match=r"LayerNorm\) needs opset >= 17"):
        sonnx.save(nn.LayerNorm(4), tmp_path / "a.onnx", input_shape=(4,), opset=16)
    with pytest.raises(ValueError, match=r"returns a recurrent layer's \(output, state\) pair.*RNNOutput"):
        sonnx.save(nn.LSTM(3, 4, batch_first=True), tmp_path / "a.onnx", input_shape=(5, 3))
    with pytest.raises(ValueError, match=r"causal and time-major \(L, N, E\).*batch_first=True"):
        sonnx.save(nn.MultiheadAttention(4, 2, causal=True), tmp_path / "a.onnx", input_shape=(2, 4))
    assert not list(tmp_path.iterdir())
