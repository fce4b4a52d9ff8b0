"""The zoo models that tests/test_onnx_zoo_cnn.py does not cover (ResNet-18/50 at 32x32, VGG-11-BN, SqueezeNet 1.1,
BERT-mini with a padding mask, bi-GRU and bi-LSTM classifiers, NeuMF) import from both of PyTorch's exporters --
``torch.onnx.export(dynamo=False)`` and the default dynamo exporter -- with eval outputs within 1e-4 (relative to the
largest output) of PyTorch's, at the exported batch size and another (the batch axis is dynamic).

The twins come from tests/zoo_torch.py with random weights (BatchNorm statistics and LayerNorm affine randomized:
the dynamo exporter stores equal initializers once, and the importer refuses an initializer shared by two layers).
"""
import io
import logging
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
sonnx = pytest.importorskip("sparkdl.onnx")

from onnx import helper  # noqa: E402

from tests.onnx_helpers import make_model  # noqa: E402
from tests.test_models_zoo import _randomize, _relative  # noqa: E402
from tests.zoo_torch import SHAPES, TORCH_ZOO, example_inputs, model_inputs  # noqa: E402

MODELS = [("resnet18", {}), ("resnet50", {}), ("vgg11_bn", {}), ("squeezenet1_1", {}), ("bert_mini", {}),
          ("rnn_classifier", {"cell": "gru"}), ("rnn_classifier", {"cell": "lstm"}), ("ncf", {})]
EXPORTERS = ("legacy", "dynamo")


def _export(tm, xs, exporter) -> bytes:
    """The eval-mode export as a user writes it, every input's axis 0 dynamic."""
    tm.eval()
    args = tuple(map(torch.from_numpy, xs))
    names = ["x"] if len(xs) == 1 else [f"x{i}" for i in range(len(xs))]
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if exporter == "dynamo":
                batch = torch.export.Dim("N", min=1, max=1024)
                program = torch.onnx.export(tm, args, None, dynamo=True, input_names=names, output_names=["y"],
                                            dynamic_shapes=tuple({0: batch} for _ in xs), verbose=False)
                return program.model_proto.SerializeToString()
            buf = io.BytesIO()
            torch.onnx.export(tm, args, buf, dynamo=False, opset_version=17, input_names=names, output_names=["y"],
                              dynamic_axes={**{n: {0: "N"} for n in names}, "y": {0: "N"}})
            return buf.getvalue()
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize("name, over, exporter",
                         [pytest.param(n, o, e, id=f"{n}{'-' + o['cell'] if o else ''}-{e}")
                          for n, o in MODELS for e in EXPORTERS])
def test_zoo_model_imports_from_both_exporters(name, over, exporter):
    torch.manual_seed(0)
    tm = _randomize(TORCH_ZOO[name](**{**SHAPES[name]["kwargs"], **over}))
    model = sonnx.load(_export(tm, example_inputs(name, batch=2), exporter))
    for batch, seed in ((2, 1), (3, 2)):
        xs = example_inputs(name, batch=batch, seed=seed)
        with torch.no_grad():
            expected = tm(*map(torch.from_numpy, xs)).numpy()
        y = model(model_inputs(xs))
        assert y.shape == expected.shape
        assert _relative(y, expected) < 1e-4, (batch, _relative(y, expected))


def _reshape_model(target, seq_first, extra=(), out=("M", 2, 3, 8)):
    """x (N, 3, 8) [-> Transpose to (3, N, 8)] -> Reshape(target) [-> more nodes] -> y."""
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2])] if seq_first else []
    nodes += [helper.make_node("Constant", [], ["s"], value=helper.make_tensor("s", onnx.TensorProto.INT64,
                                                                               [len(target)], target)),
              helper.make_node("Reshape", ["xt" if seq_first else "x", "s"], ["r" if extra else "y"],
                               name="reshape")] + list(extra)
    return make_model(nodes, [("x", ["N", 3, 8])], [("y", list(out))], opset=17)


def test_reshape_holding_the_dynamic_axis_whole_and_splitting_it_again():
    """(L, N, E) -> [L, -1, E/4] (N * 4 heads) -> Transpose -> [-1, 4, L, E/4]: each sample's heads again."""
    extra = [helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0, 2]),
             helper.make_node("Constant", [], ["s2"], value=helper.make_tensor("s2", onnx.TensorProto.INT64, [4],
                                                                               [-1, 4, 3, 2])),
             helper.make_node("Reshape", ["t", "s2"], ["y"], name="split")]
    model = sonnx.load(_reshape_model([3, -1, 2], True, extra, out=("N", 4, 3, 2)))
    x = np.random.default_rng(0).standard_normal((5, 3, 8)).astype(np.float32)
    expected = x.transpose(1, 0, 2).reshape(3, 20, 2).transpose(1, 0, 2).reshape(-1, 4, 3, 2)
    np.testing.assert_array_equal(model(x), expected)
    np.testing.assert_array_equal(model(x[:2]), expected[:2])  # sample n is row n at any batch size


@pytest.mark.parametrize("target, seq_first, match", [
    ([6, -1, 8], True, r"node 'reshape' \(Reshape\): shape \[6, -1, 8\] for an input of shape \(3, None, 8\)"),
    ([-1, 2, 3, 8], False, r"node 'reshape' \(Reshape\): shape \[-1, 2, 3, 8\] .* does not keep the batch"),
])
def test_reshapes_that_mix_samples_are_still_refused_naming_the_node(target, seq_first, match):
    with pytest.raises(sonnx.OnnxImportError, match=match):
        sonnx.load(_reshape_model(target, seq_first, out=[f"d{i}" for i in range(len(target))]))


def test_ncf_exports_with_two_id_inputs_for_onnxruntime(tmp_path):
    """sparkdl -> ONNX -> onnxruntime for the two-input recommender (Gather of each table, Mul, Concat, Gemm)."""
    ort = pytest.importorskip("onnxruntime")
    from sparkdl import models
    model = models.ncf(**SHAPES["ncf"]["kwargs"]).initialize(0)
    path = sonnx.save(model, tmp_path / "ncf.onnx", input_shape=[(), ()])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (2, 5):
        xs = example_inputs("ncf", batch=batch, seed=batch)
        (y,) = session.run(None, {i.name: x for i, x in zip(session.get_inputs(), xs)})
        np.testing.assert_allclose(y, model(xs), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sonnx.load(path)(xs), model(xs), rtol=1e-6, atol=1e-7)
