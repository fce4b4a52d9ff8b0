"""The mobile CNNs of the model zoo (tests/zoo_cnn.py: MobileNetV2, MobileNetV3-small, EfficientNet's MBConv
with squeeze-excitation) import from both of PyTorch's exporters -- ``torch.onnx.export(dynamo=False)`` and
the default dynamo exporter -- with eval outputs within 1e-4 (relative to the largest output) of PyTorch's,
and one training step's gradients (BatchNorm in training mode) within 1e-4 of PyTorch's, parameter by name.

The full networks take ~10 s per test (most of it the dynamo exporter, plus ~12 s once per process to load
it); the short ones (the same blocks in shorter tables) check the float32 gradients. For the gradients, the exports keep their BatchNormalization nodes (legacy:
``TrainingMode.PRESERVE``; dynamo: ``optimize=False``, whose optimiser would fold them into the convolutions).
"""
import numpy as np
import pytest

from sparkdl import nn

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
sonnx = pytest.importorskip("sparkdl.onnx")

from tests.onnx_helpers import torch_to_onnx, torch_to_onnx_dynamo  # noqa: E402
from tests.zoo_cnn import MBConv, MobileNetV2, MobileNetV3Small, ConvNormActivation, randomize_bn  # noqa: E402

V2_MINI = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 2, 2]]
V3_MINI = [MobileNetV3Small.SETTING[i] for i in (0, 1, 3, 4)]  # SE + ReLU, no SE, SE + Hardswish (and residual)


def _mbconv_net(dropout=0.0):
    silu = torch.nn.SiLU
    return torch.nn.Sequential(ConvNormActivation(3, 16, 3, 2, activation=silu), MBConv(16, 16),
                               MBConv(16, 24, stride=2), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Dropout(dropout), torch.nn.Linear(24, 10))


MODELS = {
    "mobilenet_v2-mini": (lambda dropout: MobileNetV2(10, dropout=dropout, setting=V2_MINI), 32),
    "mobilenet_v3_small-mini": (lambda dropout: MobileNetV3Small(10, dropout=dropout, setting=V3_MINI), 32),
    "mbconv-se-silu": (_mbconv_net, 32),
    "mobilenet_v2": (lambda dropout: MobileNetV2(10, dropout=dropout), 64),
    "mobilenet_v3_small": (lambda dropout: MobileNetV3Small(10, dropout=dropout), 64),
}
FULL = {"mobilenet_v2", "mobilenet_v3_small"}  # ~10 s each (dynamo export), the rest ~2 s
EXPORTERS = ("legacy", "dynamo")


def _params(names):
    return [pytest.param(m, e, id=f"{m}-{e}") for m in names for e in EXPORTERS]


def _model(name, dropout=0.2, seed=0):
    torch.manual_seed(seed)
    make, size = MODELS[name]
    x = np.random.default_rng(seed).standard_normal((2, 3, size, size)).astype(np.float32)
    return randomize_bn(make(dropout), seed), x


def _export(tm, x, exporter, keep_batchnorm):
    if exporter == "legacy":
        return torch_to_onnx(tm, x, preserve_batchnorm=keep_batchnorm)
    return torch_to_onnx_dynamo(tm, x, optimize=not keep_batchnorm)


def _relative(actual, expected):
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


@pytest.mark.parametrize("name, exporter", _params(MODELS))
def test_eval_outputs_match_torch(name, exporter):
    """The export as a user makes it (BatchNorm folded by the exporter where it folds it)."""
    tm, x = _model(name)
    model = sonnx.load(_export(tm, x, exporter, keep_batchnorm=False))
    with torch.no_grad():
        expected = tm.eval()(torch.from_numpy(x)).numpy()
    assert model(x).shape == expected.shape == (2, 10)
    assert _relative(model(x), expected) < 1e-4
    x1 = x[:1] * 0.5  # the batch axis is dynamic
    with torch.no_grad():
        assert _relative(model(x1), tm(torch.from_numpy(x1)).numpy()) < 1e-4


@pytest.mark.parametrize("name, exporter", _params(MODELS))
def test_training_step_gradients_match_torch(name, exporter):
    """Float32 for the short networks; float64 (both libraries) for the full ones, whose float32 gradients in
    training mode at batch 2 are ill-conditioned: PyTorch's own float32 gradients differ from its float64
    ones by up to 5% (MobileNetV2 at 64x64, BatchNorm over 8 values per channel in the last blocks)."""
    tm, x = _model(name, dropout=0.0)
    model = sonnx.load(_export(tm, x, exporter, keep_batchnorm=True))
    if name in FULL:
        model.astype(np.float64)
        tm.double()
        x = x.astype(np.float64)
    torch_bn = [n for n, m in tm.named_modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert sorted(n for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)) == sorted(torch_bn)
    assert set(model.parameter_layout().views(model.zeros_like_parameters())) == set(dict(tm.named_parameters()))

    y, cache = model.forward(x, training=True, rng=np.random.default_rng(0))
    grad_y = np.random.default_rng(1).standard_normal(y.shape).astype(x.dtype)
    gp = model.zeros_like_parameters()
    model.backward(cache, grad_y, gp)
    tm.train()
    yt = tm(torch.from_numpy(x))
    yt.backward(torch.from_numpy(grad_y))
    assert _relative(y, yt.detach().numpy()) < 1e-4
    grads = model.parameter_layout().views(gp)
    # within 1e-4 of each tensor's largest gradient; tensors whose gradient is zero but for rounding (the bias of
    # a BatchNorm that feeds another one through a convolution) within 1e-6 of the largest gradient overall
    overall = max(float(np.max(np.abs(p.grad.numpy()))) for p in tm.parameters())
    for pname, p in tm.named_parameters():
        expected = p.grad.numpy()
        error = float(np.max(np.abs(grads[pname] - expected)))
        assert error <= 1e-4 * float(np.max(np.abs(expected))) + 1e-6 * overall, (pname, error)
    state = model.state_dict()
    for bname, b in tm.named_buffers():  # running statistics updated by the step, with PyTorch's momentum
        if not bname.endswith("num_batches_tracked"):
            np.testing.assert_allclose(state[bname], b.numpy(), rtol=1e-4, atol=1e-5, err_msg=bname)


def test_mobilenet_v2_imports_relu6_as_layers_and_exports_back(tmp_path):
    """ReLU6 (exported as Clip) becomes nn.ReLU6; the imported network exports again and onnxruntime agrees."""
    ort = pytest.importorskip("onnxruntime")
    tm, x = _model("mobilenet_v2-mini")
    for exporter in EXPORTERS:
        model = sonnx.load(_export(tm, x, exporter, keep_batchnorm=False))
        kinds = {type(m).__name__ for _, m in model.named_modules()}
        assert "ReLU6" in kinds and "OnnxOp" not in kinds, kinds
        path = sonnx.save(model, tmp_path / f"{exporter}.onnx", input_shape=x.shape[1:])
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (y,) = session.run(None, {session.get_inputs()[0].name: x})
        np.testing.assert_allclose(y, model(x), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(sonnx.load(path)(x), model(x), rtol=1e-6, atol=1e-6)


def test_mobilenet_v2_from_both_exporters_with_every_default():
    """``torch.onnx.export(model, (x,))`` with nothing else (dynamo: a static batch, opset 20; legacy: opset
    20): the import still takes any batch size."""
    import io
    import logging
    import warnings
    tm, x = _model("mobilenet_v2-mini")
    tm.eval()
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            buf = io.BytesIO()
            torch.onnx.export(tm, (torch.from_numpy(x),), buf, dynamo=False)
            files = [buf.getvalue(), torch.onnx.export(tm, (torch.from_numpy(x),)).model_proto.SerializeToString()]
    finally:
        logging.disable(logging.NOTSET)
    x3 = np.concatenate([x, x[:1] * 0.5])
    with torch.no_grad():
        expected = tm(torch.from_numpy(x3)).numpy()
    for data in files:
        assert _relative(sonnx.load(data)(x3), expected) < 1e-4
