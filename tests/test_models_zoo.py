"""The zoo builders of sparkdl.models against their PyTorch twins (tests/zoo_torch.py): the same state_dict keys and
shapes and parameter count; the twin's weights (random, BatchNorm statistics and LayerNorm affine randomized) saved
with safetensors and loaded by ``sparkdl.io.load_safetensors`` give eval outputs within 1e-4 (relative to the
largest output) of PyTorch's, and one training step's gradients (BatchNorm in training mode) within 1e-4 of each
tensor's largest PyTorch gradient.

The gradients are compared in float64 (both libraries): in float32, BatchNorm in training mode over a batch of 2
at 1x1 maps (the last stage of ResNet-50 at 32x32) amplifies rounding so much that PyTorch's own float32 gradients
differ from its float64 ones by percents (see tests/test_onnx_zoo_cnn.py).
"""
import numpy as np
import pytest

from sparkdl import io, models

torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")

from tests.zoo_cnn import MobileNetV3Small  # noqa: E402
from tests.zoo_torch import SHAPES, TORCH_ZOO, example_inputs, model_inputs, randomize_bn  # noqa: E402

NAMES = sorted(TORCH_ZOO)
#: builders that take ``dropout``: 0 for the gradient step (PyTorch's and sparkdl's masks differ)
DROPOUT = {"mobilenet_v2", "mobilenet_v3_small", "vgg11_bn", "squeezenet1_1", "bert_mini", "ncf"}
RNN_VARIANTS = [("rnn_classifier", {"cell": "lstm"}),
                ("rnn_classifier", {"cell": "lstm", "bidirectional": False, "num_layers": 2})]
#: ResNet-34 is ResNet-18 with more blocks of the same kind: its structure is checked by the state_dict test
VARIANTS = [(n, {}) for n in NAMES if n != "resnet34"] + RNN_VARIANTS
#: The float64 step of the ImageNet-layout ResNets runs on ResNet-50 (a BasicBlock with a projection is in
#: ResNet-20), and the MobileNets run their own block tables shortened (every kind of block kept); the full
#: tables in float64 are in tests/test_onnx_zoo_cnn.py.
GRAD_VARIANTS = [(n, {}) for n in NAMES if n not in ("resnet18", "resnet34", "mobilenet_v2", "mobilenet_v3_small")] \
    + [("mobilenet_v2", {"setting": [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 2, 2]]}),
       ("mobilenet_v3_small", {"setting": [MobileNetV3Small.SETTING[i] for i in (0, 1, 3, 4)]})] + RNN_VARIANTS


def _id(v):
    name, over = v
    return name + "".join(f"-{k}={x}" if k != "setting" else "-short" for k, x in over.items())


def _randomize(tm, seed=0):
    randomize_bn(tm, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in tm.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.normal_(0, 0.2, generator=g)
    return tm


def _pair(name, tmp_path, **over):
    """The twin (random weights) and the sparkdl model loaded from its safetensors file."""
    kwargs = {**SHAPES[name]["kwargs"], **over}
    torch.manual_seed(0)
    tm = _randomize(TORCH_ZOO[name](**kwargs))
    path = tmp_path / f"{name}.safetensors"
    st_torch.save_file({k: v.contiguous() for k, v in tm.state_dict().items()}, path)
    return tm, io.load_safetensors(models.MODELS[name](**kwargs), path)


def _relative(actual, expected):
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_and_parameter_count_match_the_torch_twin(name):
    kwargs = SHAPES[name]["kwargs"]
    model, tm = models.MODELS[name](**kwargs), TORCH_ZOO[name](**kwargs)
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in tm.named_parameters()]  # same order
    assert [n for n, _ in model.named_buffers()] == [n for n, _ in tm.named_buffers()]
    ours, theirs = model.state_dict(), tm.state_dict()
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        assert ours[key].shape == tuple(value.shape), key
    assert model.num_parameters() == sum(p.numel() for p in tm.parameters())


@pytest.mark.parametrize("variant", VARIANTS, ids=_id)
def test_torch_weights_through_safetensors_give_torch_outputs(variant, tmp_path):
    name, over = variant
    tm, model = _pair(name, tmp_path, **over)
    xs = example_inputs(name)
    with torch.no_grad():
        expected = tm.eval()(*map(torch.from_numpy, xs)).numpy()
    y = model(model_inputs(xs))
    assert y.shape == expected.shape and y.dtype == np.float32
    assert _relative(y, expected) < 1e-4


@pytest.mark.parametrize("variant", GRAD_VARIANTS, ids=_id)
def test_one_training_step_gradients_match_torch(variant, tmp_path):
    name, over = variant
    if name in DROPOUT:
        over = {**over, "dropout": 0.0}
    tm, model = _pair(name, tmp_path, **over)
    model.astype(np.float64)
    tm.double().train()
    xs = example_inputs(name, seed=1)
    xs = tuple(x.astype(np.float64) if x.dtype.kind == "f" else x for x in xs)
    y, cache = model.forward(model_inputs(xs), training=True, rng=np.random.default_rng(0))
    grad_y = np.random.default_rng(2).standard_normal(y.shape)
    grads = model.zeros_like_parameters()
    model.backward(cache, grad_y, grads)
    yt = tm(*map(torch.from_numpy, xs))
    yt.backward(torch.from_numpy(grad_y))
    assert _relative(y, yt.detach().numpy()) < 1e-6
    views = model.parameter_layout().views(grads)
    overall = max(float(p.grad.abs().max()) for p in tm.parameters() if p.grad is not None)
    for pname, p in tm.named_parameters():
        expected = np.zeros(tuple(p.shape)) if p.grad is None else p.grad.numpy()
        error = float(np.max(np.abs(views[pname] - expected)))
        assert error <= 1e-4 * float(np.max(np.abs(expected))) + 1e-9 * overall, (pname, error)
    state = model.state_dict()
    for bname, b in tm.named_buffers():  # running statistics after the step, with each layer's momentum
        expected = b.numpy()
        np.testing.assert_allclose(state[bname], expected, rtol=1e-6, atol=1e-7 * np.max(np.abs(expected)),
                                   err_msg=bname)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_rnn_classifier_on_padded_rows_matches_packed_sequences(cell, tmp_path):
    """-1-padded rows: the recurrence stops at each row's last token (PyTorch: pack_padded_sequence)."""
    tm, model = _pair("rnn_classifier", tmp_path, cell=cell)
    (ids,) = example_inputs("rnn_classifier", batch=4, seed=3)
    ids[1, 7:] = -1
    ids[3, 2:] = -1
    with torch.no_grad():
        expected = tm.eval().forward_padded(torch.from_numpy(ids)).numpy()
    assert _relative(model(ids), expected) < 1e-5


def test_bert_mini_padding_mask_and_padded_sequence_input(tmp_path):
    """Padded tokens change nothing; a PaddedSequence (from SequenceLengths) is the same input as the mask."""
    from sparkdl import nn
    tm, model = _pair("bert_mini", tmp_path)
    ids, mask = example_inputs("bert_mini", batch=3, seed=4)
    mask[1, 5:] = 0
    ids[1, 5:] = 0
    y = model((ids, mask))
    other = ids.copy()
    other[1, 5:] = 7  # other ids under the padding
    np.testing.assert_allclose(model((other, mask)), y, rtol=1e-6, atol=1e-6)
    lengths = mask.sum(axis=1)
    np.testing.assert_allclose(model(nn.PaddedSequence(ids, lengths)), y, rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        expected = tm.eval()(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    assert _relative(y, expected) < 1e-4
    with pytest.raises(ValueError, match="row 0 of attention_mask has no token"):
        model((ids, np.zeros_like(mask)))


@pytest.mark.parametrize("name", ["resnet20", "bert_mini", "ncf", "rnn_classifier", "mobilenet_v3_small"])
def test_zoo_models_save_and_load_as_data(name, tmp_path):
    model = models.MODELS[name](**SHAPES[name]["kwargs"]).initialize(3)
    io.save_model(model, tmp_path / "m")
    back = io.load_model(tmp_path / "m")
    x = model_inputs(example_inputs(name))
    np.testing.assert_array_equal(back(x), model(x))
    assert list(back.state_dict()) == list(model.state_dict())


@pytest.mark.parametrize("call, match", [
    (lambda: models.resnet18(num_classes=0), "resnet18: num_classes must be >= 1, got 0"),
    (lambda: models.resnet50(in_channels=2.5), "resnet50: in_channels must be an int"),
    (lambda: models.mobilenet_v2(dropout=1.0), r"mobilenet_v2: dropout must be a number in \[0, 1\)"),
    (lambda: models.mobilenet_v2(width_mult=0), "mobilenet_v2: width_mult must be a positive number"),
    (lambda: models.vgg11_bn(hidden=-1), "vgg11_bn: hidden must be >= 1"),
    (lambda: models.squeezenet1_1(num_classes="10"), "squeezenet1_1: num_classes must be an int"),
    (lambda: models.rnn_classifier(100, 8, 8, cell="rnn"), r"rnn_classifier: cell must be one of \['gru', 'lstm'\]"),
    (lambda: models.rnn_classifier(100, 8, 8, bidirectional=1), "rnn_classifier: bidirectional must be a bool"),
    (lambda: models.ncf(10, 10, mlp_layers=(63, 8)), r"ncf: mlp_layers\[0\] must be even"),
    (lambda: models.ncf(10, 0), "ncf: num_items must be >= 1"),
    (lambda: models.bert_mini(type_vocab_size=-1), "bert_mini: type_vocab_size must be >= 0"),
])
def test_builder_errors_name_the_argument(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()
