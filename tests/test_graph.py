"""nn.Graph beyond the registry cases: several inputs and outputs (float64 gradient check), gradients of
values used several times, one flat vector, persistence as data, pickling, and construction errors."""
import json
import pickle

import numpy as np
import pytest

from sparkdl import nn
from sparkdl.io import ModelFormatError, build_model, get_architecture, load_model, save_model
from tests.gradcheck import numeric_grad


def _two_in_two_out():
    """inputs a (N, 3), b (N, 4); outputs: head (N, 2) and the shared value 'mix' (N, 5), also returned twice."""
    return nn.Graph(["a", "b"], [
        ("fa", nn.Linear(3, 5), "a"),
        ("fb", nn.Linear(4, 5), "b"),
        ("mix", nn.Add(), ["fa", "fb"]),
        ("act", nn.Tanh(), "mix"),
        ("cat", nn.Concatenate(dim=1), ["act", "b"]),
        ("head", nn.Linear(9, 2), "cat")], ["head", "mix", "mix"])


def _inputs(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((3, 3)).astype(dtype), rng.standard_normal((3, 4)).astype(dtype)


def test_multi_input_multi_output_gradcheck_float64():
    g = _two_in_two_out().initialize(0).astype(np.float64)
    a, b = _inputs(np.float64)
    (y0, y1, y2), cache = g.forward((a, b))
    assert y0.shape == (3, 2) and y1.shape == y2.shape == (3, 5)
    rng = np.random.default_rng(1)
    r = [rng.standard_normal(y.shape) for y in (y0, y1, y2)]
    gp = np.full(g.num_parameters(), np.nan)  # backward must overwrite every entry
    ga, gb = g.backward(cache, tuple(r), gp)
    objective = lambda: float(sum(np.sum(y * ri) for y, ri in zip(g((a, b)), r)))
    np.testing.assert_allclose(ga, numeric_grad(objective, a), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gb, numeric_grad(objective, b), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gp, numeric_grad(objective, g.flat_parameters), rtol=1e-6, atol=1e-8)


def test_hand_computed_fanout_gradient():
    """y = x + x + relu(x) (x used three times): dy/dx = 2 + [x > 0]."""
    g = nn.Graph("x", [("r", nn.ReLU(), "x"), ("s", nn.Add(), ["x", "x", "r"])], "s")
    x = np.array([[-1.0, 2.0, 0.5]], np.float32)
    y, cache = g.forward(x)
    np.testing.assert_array_equal(y, [[-2.0, 6.0, 1.5]])
    np.testing.assert_array_equal(g.backward(cache, np.ones_like(y), g.zeros_like_parameters()), [[2.0, 3.0, 3.0]])


def test_unused_input_and_dead_node_get_zero_gradients():
    g = nn.Graph(["x", "unused"], [("dead", nn.Linear(2, 2), "x"), ("fc", nn.Linear(2, 1), "x")], "fc").initialize(0)
    x, u = np.ones((2, 2), np.float32), np.ones((2, 7), np.float32)
    y, cache = g.forward((x, u))
    gp = np.full(g.num_parameters(), np.nan, np.float32)
    gx, gu = g.backward(cache, np.ones_like(y), gp)
    views = g.parameter_layout().views(gp)
    assert not np.isnan(gp).any()
    np.testing.assert_array_equal(views["dead.weight"], 0)
    np.testing.assert_array_equal(gu, np.zeros((2, 7)))
    np.testing.assert_allclose(gx, np.ones((2, 1)) @ g.fc.weight)


def test_one_flat_vector_and_pytorch_names():
    g = _two_in_two_out()
    names = [n for n, _ in g.named_parameters()]
    assert names == ["fa.weight", "fa.bias", "fb.weight", "fb.bias", "head.weight", "head.bias"]
    for _, arr in g.named_parameters():
        assert np.shares_memory(arr, g.flat_parameters)
    assert g.num_parameters() == 3 * 5 + 5 + 4 * 5 + 5 + 9 * 2 + 2


def test_persistence_is_data(tmp_path):
    g = nn.Graph("x", [("layer1.0.conv", nn.Conv2d(1, 2, 3, padding=1), "x"),
                       ("layer1.0.bn", nn.BatchNorm2d(2), "layer1.0.conv"), ("relu", nn.ReLU(), "layer1.0.bn"),
                       ("add", nn.Add(), ["relu", "layer1.0.conv"]), ("flat", nn.Flatten(), "add"),
                       ("fc", nn.Linear(32, 3), "flat")], "fc").initialize(3)
    x = np.random.default_rng(0).standard_normal((2, 1, 4, 4)).astype(np.float32)
    g.forward(x, training=True)  # non-trivial running statistics
    path = save_model(g, tmp_path / "g")
    meta = json.loads((tmp_path / "g" / "metadata.json").read_text())
    assert meta["architecture"]["config"]["nodes"][3] == ["add", ["relu", "layer1.0.conv"]]
    back = load_model(path)
    assert isinstance(back, nn.Graph) and back.get_config() == g.get_config()
    np.testing.assert_array_equal(back(x), g(x))
    assert set(back.state_dict()) >= {"layer1.0.conv.weight", "layer1.0.bn.running_mean"}
    rebuilt = build_model(get_architecture(g))
    assert [n for n, _ in rebuilt.named_parameters()] == [n for n, _ in g.named_parameters()]
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(g))(x), g(x))


def test_from_config_rejects_mismatched_children():
    g = _two_in_two_out()
    spec = get_architecture(g)
    spec["config"]["nodes"][0][0] = "renamed"
    with pytest.raises(ModelFormatError, match="do not match the children"):
        build_model(spec)


@pytest.mark.parametrize("args, err, match", [
    (("x", [("a", nn.ReLU(), "y")], "a"), ValueError, "takes 'y', which is not a graph input or an earlier node"),
    (("x", [("a", nn.ReLU(), "b"), ("b", nn.ReLU(), "x")], "a"), ValueError, "topological order"),
    (("x", [("x", nn.ReLU(), "x")], "x"), ValueError, "used twice"),
    (("x", [("a b", nn.ReLU(), "x")], "a b"), ValueError, "dot-separated words"),
    (("x", [("a", nn.ReLU(), "x")], "zz"), ValueError, r"outputs \['zz'\] are not"),
    (("x", [("a", nn.ReLU(), ["x", "x"])], "a"), TypeError, "takes 1 input"),
    (("x", [("a", nn.Add(), "x")], "a"), TypeError, "takes 2 or more inputs"),
    (("x", [("a", "relu", "x")], "a"), TypeError, "must hold a sparkdl.nn.Module"),
    (("x", [("a", nn.ReLU())], "a"), TypeError, "triple"),
    ((3, [], "x"), TypeError, "inputs must be a name"),
])
def test_construction_errors(args, err, match):
    with pytest.raises(err, match=match):
        nn.Graph(*args)


def test_shared_module_instance_is_refused():
    relu = nn.ReLU()
    with pytest.raises(ValueError, match="reuses the module instance of node 'a'"):
        nn.Graph("x", [("a", relu, "x"), ("b", relu, "a")], "b")


def test_forward_input_errors():
    g = _two_in_two_out()
    with pytest.raises(TypeError, match="must be a tuple of 2 arrays, got a ndarray"):
        g(np.zeros((1, 3), np.float32))
    with pytest.raises(ValueError, match="same shape"):
        nn.Add()((np.zeros((1, 2), np.float32), np.zeros((1, 3), np.float32)))
    with pytest.raises(ValueError, match="batch axis"):
        nn.Concatenate(dim=0)
    with pytest.raises(ValueError, match=r"cannot be joined along dim 1"):
        nn.Concatenate()((np.zeros((1, 2, 3), np.float32), np.zeros((1, 2, 4), np.float32)))
