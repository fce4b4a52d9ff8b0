"""Container-specific tests: shape errors, one flat vector across nested containers, state dicts,
copy/pickle and dtype conversion. (Forward/backward correctness: tests/cases/containers.py.)"""
import pickle

import numpy as np
import pytest

from sparkdl import nn


def _model():
    """Sequential[Residual[Sequential[Linear, BatchNorm1d, ReLU], shortcut Linear], Concat[Linear, Sequential[...]]]."""
    return nn.Sequential(
        nn.Residual(nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU()), shortcut=nn.Linear(4, 6)),
        nn.Concat(nn.Linear(6, 2), nn.Sequential(nn.Linear(6, 3), nn.Tanh(), nn.Dropout(0.5))),
    ).initialize(0)


EXPECTED_PARAMS = ["0.body.0.weight", "0.body.0.bias", "0.body.1.weight", "0.body.1.bias",
                   "0.shortcut.weight", "0.shortcut.bias", "1.0.weight", "1.0.bias", "1.1.0.weight", "1.1.0.bias"]
EXPECTED_BUFFERS = ["0.body.1.running_mean", "0.body.1.running_var", "0.body.1.num_batches_tracked"]


def _sub(model, path):
    return dict(model.named_modules())[path]


def _address(a):
    return a.__array_interface__["data"][0]


def _assert_views_consistent(root):
    """Every sub-module's flat vectors and tensors are views at the right offsets of the root's vectors."""
    for kind, layout in (("parameters", root.parameter_layout()), ("buffers", root.buffer_layout())):
        flat = getattr(root, f"flat_{kind}")
        for path, m in root.named_modules():
            sub = getattr(m, f"flat_{kind}")
            assert sub.dtype == flat.dtype == root.dtype
            if sub.size == 0:
                continue
            assert np.shares_memory(sub, flat), path
            names = [n for n in layout.names() if path == "" or n.startswith(path + ".")]
            lo = layout[names[0]].offset
            np.testing.assert_array_equal(sub, flat[lo:lo + sub.size])
            assert _address(sub) == _address(flat[lo:]), path
        views = layout.views(flat)
        for name, arr in getattr(root, f"named_{kind}")():
            assert np.shares_memory(arr, flat), name
            assert _address(arr) == _address(views[name]) and arr.shape == views[name].shape, name


def test_shape_mismatch_errors():
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match=r"Residual: body output shape \(2, 5\) != shortcut output shape \(2, 4\)"):
        nn.Residual(nn.Linear(4, 5))(x)
    with pytest.raises(ValueError, match=r"Residual: body output shape \(2, 5\) != shortcut output shape \(2, 3\)"):
        nn.Residual(nn.Linear(4, 5), shortcut=nn.Linear(4, 3))(x)
    with pytest.raises(ValueError, match=r"Concat: branch output shapes \[\(2, 4\), \(2, 2, 2\)\] cannot be joined "
                                         r"along dim 1"):
        nn.Concat(nn.Identity(), nn.Reshape((2, 2)))(x)
    with pytest.raises(ValueError, match="Concat: branch output shapes"):
        nn.Concat(nn.Identity(), nn.Identity(), dim=2)(x)
    with pytest.raises(ValueError, match="Concat: needs at least one branch"):
        nn.Concat()
    with pytest.raises(TypeError, match="Residual: argument 1 must be a sparkdl.nn.Module, got function"):
        nn.Residual(nn.Identity(), shortcut=lambda v: v)
    with pytest.raises(TypeError, match="Sequential: argument 0 must be a sparkdl.nn.Module"):
        nn.Sequential(np.zeros(3))


def test_nested_containers_share_one_flat_vector():
    model = _model()
    assert list(dict(model.named_parameters())) == EXPECTED_PARAMS
    assert list(dict(model.named_buffers())) == EXPECTED_BUFFERS
    _assert_views_consistent(model)
    # writing through the root is seen by the leaves and vice versa
    model.flat_parameters[...] = np.arange(model.num_parameters(), dtype=np.float32)
    e = model.parameter_layout()["1.1.0.weight"]
    np.testing.assert_array_equal(_sub(model, "1.1.0").weight.reshape(-1), np.arange(e.offset, e.stop))
    model[0].shortcut.bias[...] = -1
    e = model.parameter_layout()["0.shortcut.bias"]
    np.testing.assert_array_equal(model.flat_parameters[e.offset:e.stop], -1)
    # BatchNorm's in-place running-stat update lands in the root's buffer vector
    model.forward(np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32), training=True,
                  rng=np.random.default_rng(1))
    assert model.flat_buffers[-1] == 1 and model[0].body[1].num_batches_tracked == 1
    assert not np.all(model.flat_buffers[:6] == 0)


def test_backward_writes_each_child_slice():
    model = _model()
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    y, cache = model.forward(x, training=True, rng=np.random.default_rng(1))
    grads = np.full(model.num_parameters(), np.nan, np.float32)  # backward must overwrite every entry
    model.backward(cache, np.ones_like(y), grads)
    assert np.all(np.isfinite(grads))
    views = model.parameter_layout().views(grads)
    np.testing.assert_allclose(views["1.0.bias"], [5.0, 5.0])  # d(sum)/d(bias) = batch size


def test_state_dict_and_strict_loading():
    model, other = _model(), _model().initialize(1)
    sd = model.state_dict()
    assert list(sd) == EXPECTED_PARAMS + EXPECTED_BUFFERS
    sd["0.body.0.weight"][...] = 0  # a copy: the model is untouched
    assert np.any(model[0].body[0].weight != 0)
    other.load_state_dict(model.state_dict())
    np.testing.assert_array_equal(other.flat_parameters, model.flat_parameters)
    np.testing.assert_array_equal(other.flat_buffers, model.flat_buffers)
    _assert_views_consistent(other)

    bad = model.state_dict()
    del bad["0.shortcut.bias"], bad["0.body.1.running_var"]
    bad["0.extra"] = np.zeros(1)
    with pytest.raises(KeyError) as err:
        other.load_state_dict(bad)
    msg = str(err.value)
    assert "missing keys ['0.body.1.running_var', '0.shortcut.bias']" in msg and "unexpected keys ['0.extra']" in msg
    before = other.flat_parameters.copy()
    bad = model.state_dict()
    bad["1.0.weight"] = np.zeros((3, 6))
    bad["0.body.1.bias"] = np.zeros(5)
    with pytest.raises(ValueError, match=r"0.body.1.bias: expected \(6,\), got \(5,\); "
                                         r"1.0.weight: expected \(2, 6\), got \(3, 6\)"):
        other.load_state_dict(bad)
    np.testing.assert_array_equal(other.flat_parameters, before)  # nothing half-loaded
    partial = {"1.0.bias": np.array([7.0, 8.0])}
    other.load_state_dict(partial, strict=False)
    np.testing.assert_array_equal(_sub(other, "1.0").bias, [7.0, 8.0])


@pytest.mark.parametrize("how", ["copy", "pickle"])
def test_copy_and_pickle_keep_views_consistent(how):
    model = _model()
    model.forward(np.ones((3, 4), np.float32), training=True, rng=np.random.default_rng(0))
    clone = model.copy() if how == "copy" else pickle.loads(pickle.dumps(model))
    _assert_views_consistent(clone)
    np.testing.assert_array_equal(clone.flat_parameters, model.flat_parameters)
    np.testing.assert_array_equal(clone.flat_buffers, model.flat_buffers)
    assert not np.shares_memory(clone.flat_parameters, model.flat_parameters)
    clone.flat_parameters[...] = 0
    clone[0].body[1].running_mean[...] = 5
    assert np.all(_sub(clone, "1.0").weight == 0) and np.any(_sub(model, "1.0").weight != 0)
    assert model[0].body[1].running_mean[0] != 5
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    model2 = model.copy() if how == "copy" else pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(model2(x), model(x))


def test_astype_float64_converts_whole_tree():
    model = _model()
    x = np.random.default_rng(3).standard_normal((4, 4))
    y32 = model(x.astype(np.float32))
    values = model.flat_parameters.copy()
    assert model.astype(np.float64) is model
    assert model.dtype == np.float64 and model.flat_parameters.dtype == np.float64
    _assert_views_consistent(model)
    for _, m in model.named_modules():
        assert m.dtype == np.float64
    np.testing.assert_array_equal(model.flat_parameters, values.astype(np.float64))
    y64 = model(x)
    assert y64.dtype == np.float64
    np.testing.assert_allclose(y64, y32, rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="dtype must be float64"):
        model(x.astype(np.float32))
    with pytest.raises(TypeError, match="float32 or float64"):
        model.astype(np.float16)
    model.astype(np.float32)
    _assert_views_consistent(model)
    np.testing.assert_array_equal(model.flat_parameters, values)


def test_adding_a_child_repacks_the_root():
    model = nn.Sequential(nn.Linear(3, 3))
    w = model[0].weight.copy()
    model.add_module("1", nn.BatchNorm1d(3))
    _assert_views_consistent(model)
    np.testing.assert_array_equal(model[0].weight, w)
    assert model.num_parameters() == 3 * 3 + 3 + 2 * 3 and model.flat_buffers.size == 7
    with pytest.raises(ValueError, match="name '1' is already registered"):
        model.add_module("1", nn.ReLU())


def test_sequential_backward_parameters_skips_the_data_input_gradient(monkeypatch):
    """Leading layers without parameters get no backward at all, the first layer with parameters no input
    gradient; every parameter gradient is bitwise that of backward (LeNet-5: Conv2d first; MLP: Flatten first)."""
    from sparkdl.models import lenet5, mlp
    for model, shape in ((lenet5(), (8, 1, 28, 28)), (mlp(), (8, 1, 28, 28))):
        model.initialize(0)
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        y, cache = model.forward(x, training=True)
        gy = np.random.default_rng(2).standard_normal(y.shape).astype(np.float32)
        full = np.full(model.num_parameters(), np.nan, np.float32)
        model.backward(cache, gy, full)
        calls = []
        first = model[0] if model[0].num_parameters() else model[1]
        for m in model:
            monkeypatch.setattr(m, "backward", lambda *a, _m=m, _f=m.backward: calls.append(_m) or _f(*a))
        only = np.full(model.num_parameters(), np.nan, np.float32)
        model.backward_parameters(cache, gy, only)
        np.testing.assert_array_equal(only, full)
        assert first not in calls and model[0] not in calls
        assert len(calls) == len(model) - (2 if first is model[1] else 1)
