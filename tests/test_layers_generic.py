"""Generic checks for every registered layer: shapes, float64 gradients, PyTorch parity, dtype errors,
persistence round trip."""
import numpy as np
import pytest

from tests.cases import all_layer_cases
from tests.gradcheck import layer_gradcheck

torch = pytest.importorskip("torch")
CASES = all_layer_cases()
ids = [c.id for c in CASES]


def _input(case, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if case.inputs is not None:
        return case.inputs(rng, dtype)
    if case.positive:
        return rng.uniform(0.5, 2.0, case.input_shape).astype(dtype)
    return rng.standard_normal(case.input_shape).astype(dtype)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_output_shape(case):
    layer = case.make()
    y, _ = layer.forward(_input(case, np.float32), training=case.training, rng=np.random.default_rng(0))
    assert y.shape == case.out_shape
    assert y.dtype == np.float32


@pytest.mark.parametrize("case", [c for c in CASES if c.gradcheck], ids=[c.id for c in CASES if c.gradcheck])
def test_gradcheck_float64(case):
    layer = case.make()
    layer.initialize(1)
    layer.astype(np.float64)
    layer_gradcheck(layer, _input(case, np.float64), training=case.training, input_grad=not case.integer_input)


def _torch_copy(case, layer):
    tm = case.torch_make()
    sd = {k: torch.from_numpy(np.array(v)) for k, v in layer.state_dict().items()}
    own = tm.state_dict()
    for k, v in sd.items():  # integer buffers (num_batches_tracked) keep torch's dtype
        sd[k] = v.to(own[k].dtype)
    tm.load_state_dict(sd, strict=True)
    tm.train(case.training)
    return tm


@pytest.mark.parametrize("case", [c for c in CASES if c.torch_make], ids=[c.id for c in CASES if c.torch_make])
def test_matches_pytorch(case):
    layer = case.make()
    layer.initialize(2)
    tm = _torch_copy(case, layer)
    x = _input(case, np.float32, seed=3)
    y, cache = layer.forward(x, training=case.training, rng=np.random.default_rng(0))
    xt = torch.from_numpy(x.copy()).requires_grad_(not case.integer_input)
    yt = tm(xt)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=case.rtol, atol=case.atol, err_msg="forward")
    gy = np.random.default_rng(4).standard_normal(y.shape).astype(np.float32)
    gp = layer.zeros_like_parameters()
    gx = layer.backward(cache, gy, gp)
    yt.backward(torch.from_numpy(gy))
    if case.integer_input:
        assert gx is None
    else:
        np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=case.rtol, atol=case.atol, err_msg="grad input")
    grads = layer.parameter_layout().views(gp)
    for name, p in tm.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=case.rtol, atol=case.atol, err_msg=name)
    for name, b in tm.named_buffers():  # BatchNorm running statistics after one training step
        np.testing.assert_allclose(layer.state_dict()[name], b.numpy(), rtol=case.rtol, atol=case.atol, err_msg=name)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_wrong_dtype_is_type_error(case):
    layer = case.make()
    x = _input(case, np.float32).astype(case.bad_dtype)
    with pytest.raises(TypeError, match="dtype"):
        layer.forward(x, training=case.training, rng=np.random.default_rng(0))


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_config_and_persistence_round_trip(case, tmp_path):
    """``from_config(get_config())`` rebuilds the same architecture, and a saved model loads back with
    identical state and identical outputs."""
    from sparkdl.io import build_model, get_architecture, load_model, save_model
    layer = case.make()
    layer.initialize(5)
    spec = get_architecture(layer)
    assert get_architecture(build_model(spec)) == spec
    loaded = load_model(save_model(layer, tmp_path / "m"))
    assert type(loaded) is type(layer) and get_architecture(loaded) == spec
    for (name, a), (name2, b) in zip(layer.state_dict().items(), loaded.state_dict().items()):
        assert name == name2
        np.testing.assert_array_equal(a, b, err_msg=name)
    x = _input(case, np.float32)
    y1 = layer.forward(x, training=case.training, rng=np.random.default_rng(0))[0]
    y2 = loaded.forward(x, training=case.training, rng=np.random.default_rng(0))[0]
    np.testing.assert_array_equal(y1, y2)



@pytest.mark.parametrize("case", [c for c in CASES if c.make().num_parameters()],
                         ids=[c.id for c in CASES if c.make().num_parameters()])
def test_backward_parameters_equals_backward(case):
    """The parameters-only backward (first layers, whose input is data) writes bitwise the same gradients."""
    layer = case.make()
    layer.initialize(5)
    x = _input(case, np.float32, seed=6)
    y, cache = layer.forward(x, training=case.training, rng=np.random.default_rng(0))
    gy = np.random.default_rng(7).standard_normal(y.shape).astype(np.float32)
    full = np.full(layer.num_parameters(), np.nan, np.float32)
    layer.backward(cache, gy, full)
    only = np.full(layer.num_parameters(), np.nan, np.float32)
    assert layer.backward_parameters(cache, gy, only) is None
    np.testing.assert_array_equal(only, full)
    assert np.isfinite(only).all()
