"""ONNX files exported with static shapes, whose exporter folded the batch into constant reshape targets (PyTorch's
attention reshapes ``(L, N, E)`` to ``(L, N * heads, d)``), import as a :class:`sparkdl.nn.Graph` of fixed
``batch_size``: evaluated at any batch in chunks, trained at exactly that batch, saved, exported and refused by
the distributed trainer up front. Files that can be made batch-free still are.
"""
import io
import logging
import warnings

import numpy as np
import pytest

from sparkdl import io as sio
from sparkdl import nn

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
sonnx = pytest.importorskip("sparkdl.onnx")

from tests.onnx_helpers import make_model, torch_to_onnx  # noqa: E402
from tests.test_models_zoo import _randomize, _relative  # noqa: E402
from tests.zoo_torch import SHAPES, TORCH_ZOO, example_inputs, model_inputs  # noqa: E402

EXPORTERS = ("legacy", "dynamo")


def _static_export(tm, xs, exporter) -> bytes:
    """``torch.onnx.export`` with no dynamic axis, as a user writes it by default."""
    tm.eval()
    args = tuple(map(torch.from_numpy, xs))
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if exporter == "dynamo":
                return torch.onnx.export(tm, args, None, dynamo=True, verbose=False).model_proto.SerializeToString()
            buf = io.BytesIO()
            torch.onnx.export(tm, args, buf, dynamo=False, opset_version=17)
            return buf.getvalue()
    finally:
        logging.disable(logging.NOTSET)


def _bert(dropout=0.1):
    """BERT-mini with every weight its own (TransformerEncoder starts its layers as copies of one)."""
    torch.manual_seed(0)
    tm = _randomize(TORCH_ZOO["bert_mini"](**SHAPES["bert_mini"]["kwargs"], dropout=dropout))
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in tm.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))
    return tm


class FoldedHeads(torch.nn.Module):
    """(N, 4, 8) -> heads-major (4 * N, 8) rows -> Linear -> back to (N, 32): the batch folded into a constant
    reshape target when exported with static shapes, each sample's output its own."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(8, 8)
        self.out = torch.nn.Linear(32, 3)

    def forward(self, x):
        n = x.shape[0]
        h = self.inner(x.transpose(0, 1).reshape(4 * n, 8))
        return self.out(torch.tanh(h.reshape(4, n, 8).transpose(0, 1).reshape(n, 32)))


@pytest.fixture(scope="module", params=EXPORTERS)
def bert_static(request):
    tm = _bert()
    return tm, sonnx.load(_static_export(tm, example_inputs("bert_mini", batch=2), request.param))


def test_bert_mini_static_export_imports_at_its_batch_and_evaluates_any_batch(bert_static):
    tm, model = bert_static
    assert isinstance(model, nn.Graph) and model.batch_size == 2
    for batch in (2, 3, 1, 5):
        xs = example_inputs("bert_mini", batch=batch, seed=batch)
        with torch.no_grad():
            expected = tm(*map(torch.from_numpy, xs)).numpy()
        y = model(model_inputs(xs))
        assert y.shape == expected.shape == (batch, 2)
        assert _relative(y, expected) < 1e-4, (batch, _relative(y, expected))
        np.testing.assert_array_equal(model.forward(model_inputs(xs))[0], y)  # eval forward = infer, chunked
    empty = tuple(x[:0] for x in example_inputs("bert_mini", batch=2))
    assert model(empty).shape == (0, 2)


def test_a_chunked_evaluation_pads_with_copies_so_each_row_is_its_own(bert_static):
    """Rows 0-2 of a batch of 5 give the same bits as the same rows alone (chunks of 2: the last is padded)."""
    _, model = bert_static
    xs = example_inputs("bert_mini", batch=5, seed=11)
    y = model(model_inputs(xs))
    np.testing.assert_array_equal(y[4:], model(model_inputs(tuple(x[4:] for x in xs))))
    np.testing.assert_array_equal(y[2:4], model(model_inputs(tuple(x[2:4] for x in xs))))


def test_bert_mini_static_export_trains_at_its_batch_with_torch_gradients(bert_static):
    tm, model = bert_static
    xs = example_inputs("bert_mini", batch=2, seed=3)
    tm.train()
    for m in tm.modules():  # dropout off in both: the step is deterministic
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        if isinstance(m, torch.nn.MultiheadAttention):
            m.dropout = 0.0
    ours = model.parameter_layout().views(model.flat_parameters)
    y, cache = model.forward(model_inputs(xs), training=True, rng=np.random.default_rng(0))
    grad_y = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
    gp = model.zeros_like_parameters()
    model.backward(cache, grad_y, gp)
    tm.zero_grad()
    yt = tm(*map(torch.from_numpy, xs))
    yt.backward(torch.from_numpy(grad_y))
    tm.eval()
    assert _relative(y, yt.detach().numpy()) < 1e-4
    grads, folded = model.parameter_layout().views(gp), set()
    for name, p in tm.named_parameters():  # found by value: the exporters rename and transpose some weights
        w = p.detach().numpy()
        match = [(k, t) for k, v in ours.items() for t in ((False, True) if v.ndim == 2 else (False,))
                 if (v.T if t else v).shape == w.shape and np.array_equal(v.T if t else v, w)]
        if not match:
            folded.add(name)
            continue
        assert len(match) == 1, (name, match)
        k, t = match[0]
        expected = p.grad.numpy()
        scale = max(float(np.max(np.abs(expected))), 1e-6)
        assert float(np.max(np.abs((grads[k].T if t else grads[k]) - expected))) <= 1e-4 * scale + 1e-7, name
    # the exporters fold the position and token-type tables (read at constant indices) into one constant
    assert folded <= {"embeddings.position_embeddings.weight", "embeddings.token_type_embeddings.weight"}, folded


def test_training_at_another_batch_is_refused_naming_the_batch_size(bert_static):
    _, model = bert_static
    xs = example_inputs("bert_mini", batch=3)
    with pytest.raises(ValueError, match="exactly 2 rows .* got 3 rows in training.*dynamic batch axis"):
        model.forward(model_inputs(xs), training=True, rng=np.random.default_rng(0))
    _, cache = model.forward(model_inputs(xs))  # evaluation in chunks: no backward through it
    assert cache is None
    with pytest.raises(ValueError, match="no backward through an evaluation run in chunks"):
        model.backward(cache, np.zeros((3, 2), np.float32), model.zeros_like_parameters())


def test_the_distributed_trainer_refuses_a_fixed_batch_graph_before_any_job():
    from sparkdl.engine import DistributedTrainer
    from sparkdl.optim import SGD
    model = sonnx.load(_static_export(FoldedHeads(), (np.zeros((2, 4, 8), np.float32),), "legacy"))
    with pytest.raises(ValueError, match="'model' computes batches of exactly 2 rows.*dynamic batch axis"):
        DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=0.1), batch_size=2)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_folded_heads_round_trip_through_save_model_and_onnx_export(exporter, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(1)
    tm = FoldedHeads().eval()
    x = np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)
    model = sonnx.load(_static_export(tm, (x,), exporter))
    assert model.batch_size == 2
    x3 = np.random.default_rng(1).standard_normal((3, 4, 8)).astype(np.float32)
    with torch.no_grad():
        assert _relative(model(x3), tm(torch.from_numpy(x3)).numpy()) < 1e-5

    sio.save_model(model, tmp_path / "saved")
    again = sio.load_model(tmp_path / "saved")
    assert again.batch_size == 2
    np.testing.assert_array_equal(again(x3), model(x3))

    sonnx.save(model, tmp_path / "m.onnx", (4, 8))
    session = ort.InferenceSession(str(tmp_path / "m.onnx"))
    assert session.get_inputs()[0].shape == [2, 4, 8]  # the file keeps the static batch
    np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: x})[0], model(x), rtol=1e-5,
                               atol=1e-6)
    assert sonnx.load(tmp_path / "m.onnx").batch_size == 2


def test_static_exports_that_keep_the_batch_axis_import_batch_free():
    """A static CNN export reshapes per sample: it needs no fixed batch (a Sequential, any batch trains)."""
    tm = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 3))
    model = sonnx.load(torch_to_onnx(tm, np.zeros((2, 1, 8, 8), np.float32), dynamic_batch=False))
    assert isinstance(model, nn.Sequential)
    x = np.random.default_rng(0).standard_normal((5, 1, 8, 8)).astype(np.float32)
    y, _ = model.forward(x, training=True, rng=np.random.default_rng(0))  # trains at any batch
    with torch.no_grad():
        assert _relative(y, tm(torch.from_numpy(x)).numpy()) < 1e-5


def test_a_static_file_that_fails_either_way_names_the_node():
    """Fixed-batch import is a fallback: when it fails too, the ordinary import's error is raised."""
    from onnx import helper
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             helper.make_node("Unique", ["t"], ["y"])]  # an operator sparkdl has no converter for
    data = make_model(nodes, [("x", [2, 3, 4])], [("y", [None])])
    with pytest.raises(sonnx.OnnxImportError, match="Unique"):
        sonnx.load(data)


def test_graph_batch_size_must_be_a_positive_int():
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="batch_size must be None or a positive int"):
            nn.Graph("x", [("a", nn.ReLU(), "x")], "a", batch_size=bad)
    g = nn.Graph("x", [("a", nn.ReLU(), "x")], "a", batch_size=4)
    assert "batch_size=4" in repr(g) and g.get_config()["batch_size"] == 4
    assert "batch_size" not in nn.Graph("x", [("a", nn.ReLU(), "x")], "a").get_config()


def test_bert_mini_static_import_exports_back_with_integer_inputs(bert_static, tmp_path):
    """Token ids (read by the Embedding) and the mask (compared with an integer 0) stay int64 in the file;
    onnxruntime runs it at the fixed batch and agrees."""
    ort = pytest.importorskip("onnxruntime")
    _, model = bert_static
    xs = example_inputs("bert_mini", batch=2, seed=7)
    sonnx.save(model, tmp_path / "bert.onnx", [(16,), (16,)])
    session = ort.InferenceSession(str(tmp_path / "bert.onnx"))
    assert [(i.type, i.shape) for i in session.get_inputs()] == [("tensor(int64)", [2, 16])] * 2
    y = session.run(None, dict(zip([i.name for i in session.get_inputs()], xs)))[0]
    assert _relative(y, model(model_inputs(xs))) < 1e-5
