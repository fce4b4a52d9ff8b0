"""sparkdl.onnx.patterns: GELU's erf formula (both PyTorch exporters below opset 20) imports as one nn.GELU."""
import math

import numpy as np
import pytest

from sparkdl import nn
from tests.onnx_helpers import make_model, torch_to_onnx, torch_to_onnx_dynamo

onnx = pytest.importorskip("onnx")
sonnx = pytest.importorskip("sparkdl.onnx")
from onnx import helper  # noqa: E402


def _modules(model):
    return [m for _, m in model.named_modules()]


def _ops(model):
    return sorted(m.op_type for m in _modules(model) if isinstance(m, nn.OnnxOp))


@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
def test_torch_gelu_exports_import_as_one_gelu_layer_with_torch_values_and_gradients(exporter):
    torch = pytest.importorskip("torch")
    if exporter == "dynamo":
        pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32) * 2
    data = torch_to_onnx(net, x) if exporter == "legacy" else torch_to_onnx_dynamo(net, x, opset=18)
    assert b"Erf" in data  # the file writes the formula, not a Gelu operator
    model = sonnx.load(data)
    assert sum(isinstance(m, nn.GELU) for m in _modules(model)) == 1 and "Erf" not in _ops(model)
    xt = torch.from_numpy(x).requires_grad_(True)
    yt = net(xt)
    y, cache = model.forward(x, training=True)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    g = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
    yt.backward(torch.from_numpy(g))
    gp = model.zeros_like_parameters()
    gx = model.backward(cache, g, gp)
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-4, atol=1e-6)
    mine = model.parameter_layout().views(gp)
    for name, p in net.named_parameters():  # Linear weights may be stored transposed (MatMul)
        got = mine[name] if mine[name].shape == p.shape else mine[name].T
        np.testing.assert_allclose(got, p.grad.numpy(), rtol=1e-4, atol=1e-6)


def _gelu_graph(order):
    """A hand-written erf formula of GELU in one of its three node orders."""
    c = [("sqrt2", np.array(math.sqrt(2), np.float32)), ("one", np.array(1.0, np.float32)),
         ("half", np.array(0.5, np.float32)), ("rsqrt2", np.array(1 / math.sqrt(2), np.float32))]
    scale = (helper.make_node("Div", ["x", "sqrt2"], ["s"], name="d") if order != "mul_scale" else
             helper.make_node("Mul", ["rsqrt2", "x"], ["s"], name="d"))
    nodes = [scale, helper.make_node("Erf", ["s"], ["e"], name="/act/Erf"),
             helper.make_node("Add", ["one", "e"], ["a"], name="a")]
    if order == "half_first":
        nodes = [helper.make_node("Mul", ["x", "half"], ["h"], name="h")] + nodes + [
            helper.make_node("Mul", ["h", "a"], ["y"], name="m")]
    else:
        nodes += [helper.make_node("Mul", ["a", "x"], ["xa"], name="m1"),
                  helper.make_node("Mul", ["xa", "half"], ["y"], name="m2")]
    return make_model(nodes, [("x", ["N", 7])], [("y", ["N", 7])], c)


@pytest.mark.parametrize("order", ["div_scale", "mul_scale", "half_first"])
def test_each_node_order_of_the_formula_fuses(order):
    model = sonnx.load(_gelu_graph(order))
    assert [type(m) for m in model.children()] == [nn.GELU]
    x = np.linspace(-4, 4, 35, dtype=np.float32).reshape(5, 7)
    want = 0.5 * x.astype(np.float64) * (1 + np.vectorize(math.erf)(x.astype(np.float64) / math.sqrt(2)))
    np.testing.assert_allclose(model(x), want, rtol=1e-6, atol=5e-7)  # float32 GELU: within 5e-7


def test_an_intermediate_used_elsewhere_or_another_constant_is_left_as_it_is():
    c = [("sqrt2", np.array(math.sqrt(2), np.float32)), ("one", np.array(1.0, np.float32)),
         ("half", np.array(0.5, np.float32))]
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["s"], name="d"), helper.make_node("Erf", ["s"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["xa"]),
             helper.make_node("Mul", ["xa", "half"], ["g"]), helper.make_node("Add", ["g", "e"], ["y"])]
    model = sonnx.load(make_model(nodes, [("x", ["N", 3])], [("y", ["N", 3])], c))  # "e" has two consumers
    assert "Erf" in _ops(model) and not any(isinstance(m, nn.GELU) for m in _modules(model))
    x = np.array([[-1.0, 0.5, 2.0]], np.float32)
    e = np.vectorize(math.erf)(x.astype(np.float64) / math.sqrt(2))
    np.testing.assert_allclose(model(x), 0.5 * x * (1 + e) + e, rtol=1e-6, atol=1e-7)
    c[2] = ("half", np.array(0.25, np.float32))  # not GELU: 0.25 * x * (1 + erf)
    nodes = nodes[:5]
    nodes[4] = helper.make_node("Mul", ["xa", "half"], ["y"])
    model = sonnx.load(make_model(nodes, [("x", ["N", 3])], [("y", ["N", 3])], c))
    assert "Erf" in _ops(model)
    np.testing.assert_allclose(model(x), 0.25 * x * (1 + e), rtol=1e-6, atol=1e-7)
