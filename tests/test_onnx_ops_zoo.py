"""The generic ONNX operators the model zoo needs (nn.OnnxOp: Clip, HardSigmoid, PRelu, Erf, ReduceSum/Max/Min,
variadic Sum/Mean/Max/Min, Einsum, Pad, LRN): forward against a plain-numpy expression written here, backward (input and
parameter gradients) by float64 central differences."""
import math

import numpy as np
import pytest

from sparkdl import nn
from tests.gradcheck import layer_gradcheck
from tests.test_onnx_ops import X, _op, _t, _v


def _f(value):
    return {"value": value, "dtype": "float32"}


def _erf(x):
    return np.vectorize(math.erf)(x)


def _lrn(x, size, alpha, beta, bias):
    """ONNX's LRN written out channel by channel."""
    y = np.empty_like(x)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1] - 1, c + size - 1 - (size - 1) // 2)
        y[:, c] = x[:, c] / (bias + alpha / size * (x[:, lo:hi + 1] ** 2).sum(1)) ** beta
    return y


# (id, module, input shape(s), input kind, numpy reference of (x, tensors))
CASES = [
    ("Clip-bounds", lambda: _op("Clip", inputs=[X, _t("lo"), _t("hi")], buffers={"lo": [], "hi": []},
                                values={"lo": -0.5, "hi": 0.7}), (3, 4), "normal",
     lambda x, t: np.clip(x, -0.5, 0.7)),
    ("Clip-max-only", lambda: _op("Clip", inputs=[X, None, _t("hi")], buffers={"hi": []}, values={"hi": 0.2}),
     (2, 5), "normal", lambda x, t: np.minimum(x, 0.2)),
    ("Clip-opset6-attrs", lambda: _op("Clip", {"min": 0.0, "max": 6.0}), (4, 3), "wide",
     lambda x, t: np.clip(x, 0, 6)),
    ("HardSigmoid-onnx-default", lambda: _op("HardSigmoid", {"alpha": 0.2, "beta": 0.5}), (3, 5), "wide",
     lambda x, t: np.clip(0.2 * x + 0.5, 0, 1)),
    ("PRelu-slope-parameter", lambda: _op("PRelu", inputs=[X, _t("slope")], parameters={"slope": [3, 1]}),
     (2, 3, 4), "normal", lambda x, t: np.where(x > 0, x, t["slope"] * x)),
    ("Erf", lambda: _op("Erf"), (2, 7), "normal", lambda x, t: _erf(x)),
    ("ReduceSum-axes-input", lambda: _op("ReduceSum", {"keepdims": 0}, [X, _v([1, -1])]), (2, 3, 4), "normal",
     lambda x, t: x.sum((1, 2))),
    ("ReduceSum-all", lambda: _op("ReduceSum"), (2, 3), "normal", lambda x, t: x.sum(keepdims=True)),
    ("ReduceMax-attr", lambda: _op("ReduceMax", {"axes": [2]}), (2, 3, 4), "normal",
     lambda x, t: x.max(2, keepdims=True)),
    ("ReduceMin-keepdims0", lambda: _op("ReduceMin", {"axes": [1], "keepdims": 0}), (2, 5, 3), "normal",
     lambda x, t: x.min(1)),
    ("Sum-broadcast", lambda: _op("Sum", inputs=[X, _t("b"), _t("c")], parameters={"b": [4], "c": [3, 1]}),
     (2, 3, 4), "normal", lambda x, t: x + t["b"] + t["c"]),
    ("Mean-two", lambda: _op("Mean", inputs=[X, _t("b")], parameters={"b": [1, 4]}), (3, 4), "normal",
     lambda x, t: (x + t["b"]) / 2),
    ("Max-broadcast", lambda: _op("Max", inputs=[X, _t("b"), _t("c")], parameters={"b": [4], "c": [3, 1]}),
     (2, 3, 4), "wide", lambda x, t: np.maximum(np.maximum(x, t["b"]), t["c"])),
    ("Min-single", lambda: _op("Min"), (2, 3), "normal", lambda x, t: x),
    ("Einsum-linear", lambda: _op("Einsum", {"equation": "nci,ij->ncj"}, [X, _t("w")], {"w": [4, 2]}), (2, 3, 4),
     "normal", lambda x, t: np.einsum("nci,ij->ncj", x, t["w"])),
    ("Einsum-ellipsis-broadcast", lambda: _op("Einsum", {"equation": "...ij,...jk->...ik"}, [X, _t("w")],
                                              {"w": [1, 4, 2]}), (2, 3, 3, 4), "normal",
     lambda x, t: np.einsum("...ij,...jk->...ik", x, t["w"])),
    ("Einsum-implicit-output", lambda: _op("Einsum", {"equation": "nj,jk"}, [X, _t("w")], {"w": [3, 5]}), (2, 3),
     "normal", lambda x, t: (x @ t["w"]).T),  # implicit output: letters in alphabetical order, "kn"
    ("Einsum-summed-letter", lambda: _op("Einsum", {"equation": "nij,k->nk"}, [X, _t("v")], {"v": [2]}), (2, 3, 4),
     "normal", lambda x, t: np.einsum("nij,k->nk", x, t["v"])),
    ("Einsum-outer-transpose", lambda: _op("Einsum", {"equation": "ni,j->nji"}, [X, _t("v")], {"v": [3]}), (2, 4),
     "normal", lambda x, t: np.einsum("ni,j->nji", x, t["v"])),
    ("LRN-odd", lambda: _op("LRN", {"size": 3, "alpha": 0.3, "beta": 0.75, "bias": 2.0}), (2, 5, 3, 2), "normal",
     lambda x, t: _lrn(x, 3, 0.3, 0.75, 2.0)),
    ("LRN-even-3d", lambda: _op("LRN", {"size": 4, "alpha": 0.5, "beta": 0.6, "bias": 1.0}), (2, 6, 3), "normal",
     lambda x, t: _lrn(x, 4, 0.5, 0.6, 1.0)),
    ("Pad-constant", lambda: _op("Pad", {"mode": "constant"}, [X, _v([0, 1, 2, 0, 2, 1]), _t("v")],
                                 buffers={"v": []}, values={"v": 0.5}), (2, 3, 4), "normal",
     lambda x, t: np.pad(x, [(0, 0), (1, 2), (2, 1)], constant_values=0.5)),
    ("Pad-reflect", lambda: _op("Pad", {"mode": "reflect"}, [X, _v([0, 0, 2, 1, 0, 0, 1, 2])]), (2, 3, 4, 5),
     "normal", lambda x, t: np.pad(x, [(0, 0), (0, 0), (2, 1), (1, 2)], mode="reflect")),
    ("Pad-edge-crop", lambda: _op("Pad", {"mode": "edge"}, [X, _v([0, -1, 2, 0, 2, -1])]), (2, 4, 3), "normal",
     lambda x, t: np.pad(x, [(0, 0), (0, 2), (2, 0)], mode="edge")[:, 1:, :-1]),
    ("Pad-wrap-axes", lambda: _op("Pad", {"mode": "wrap"}, [X, _v([1, 2]), None, _v([-1])]), (2, 3), "normal",
     lambda x, t: np.pad(x, [(0, 0), (1, 2)], mode="wrap")),
    ("Pad-opset2-attrs", lambda: _op("Pad", {"mode": "constant", "pads": [0, 1, 0, 1], "value": -1.0}), (2, 3),
     "normal", lambda x, t: np.pad(x, [(0, 0), (1, 1)], constant_values=-1.0)),
]


def _input(shape, kind, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * (4.0 if kind == "wide" else 1.0)
    # away from kinks (0, bounds, 6, -2.5/2.5) and ties, where central differences would straddle them
    for kink in (-2.5, -0.5, 0.0, 0.2, 0.7, 2.5, 6.0):
        x = np.where(np.abs(x - kink) < 1e-3, x + 3e-3, x)
    return x


@pytest.mark.parametrize("make, shape, kind, reference", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_forward_and_gradients(make, shape, kind, reference):
    m = make()
    x = _input(shape, kind)
    tensors = {**dict(m.named_parameters()), **dict(m.named_buffers())}
    np.testing.assert_allclose(m(x.astype(np.float32)), reference(x, tensors), rtol=1e-5, atol=1e-6)
    m.astype(np.float64)
    layer_gradcheck(m, x, training=False)


def test_max_ties_share_the_gradient_like_torch():
    torch = pytest.importorskip("torch")
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], np.float32)
    g = np.array([[6.0], [9.0]], np.float32)
    m = nn.OnnxOp("ReduceMax", {"axes": [1]})
    y, cache = m.forward(x)
    xt = torch.from_numpy(x).requires_grad_(True)
    torch.amax(xt, 1, keepdim=True).backward(torch.from_numpy(g))
    np.testing.assert_array_equal(m.backward(cache, g, m.zeros_like_parameters()), xt.grad.numpy())
    pair = nn.OnnxOp("Max", inputs=[X, X])
    a, b = np.array([1.0, 2.0, 5.0], np.float32), np.array([1.0, 3.0, 4.0], np.float32)
    y, cache = pair.forward((a, b))
    at, bt = (torch.from_numpy(v).requires_grad_(True) for v in (a, b))
    torch.maximum(at, bt).backward(torch.ones(3))
    ga, gb = pair.backward(cache, np.ones(3, np.float32), pair.zeros_like_parameters())
    np.testing.assert_array_equal(ga, at.grad.numpy())
    np.testing.assert_array_equal(gb, bt.grad.numpy())


def test_integer_clip_and_reductions_for_shape_arithmetic():
    shape = np.array([2, 7, 9], np.int64)
    np.testing.assert_array_equal(nn.OnnxOp("Clip", {"min": 3.0, "max": 8.0})(shape), [3, 7, 8])
    np.testing.assert_array_equal(nn.OnnxOp("ReduceMax", {"keepdims": 0})(shape), 9)
    np.testing.assert_array_equal(nn.OnnxOp("Sum", inputs=[X, _v([1, 1, 1])])(shape), [3, 8, 10])


def test_einsum_of_two_computed_operands_and_refused_diagonals():
    from sparkdl.nn.onnx_op_einsum import check_equation
    m = nn.OnnxOp("Einsum", {"equation": "bij,bjk->bik"}, inputs=[X, X]).astype(np.float64)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    y, cache = m.forward((a, b))
    np.testing.assert_allclose(y, a @ b, rtol=1e-12)
    g = rng.standard_normal(y.shape)
    ga, gb = m.backward(cache, g, m.zeros_like_parameters())
    np.testing.assert_allclose(ga, g @ b.transpose(0, 2, 1), rtol=1e-12)
    np.testing.assert_allclose(gb, a.transpose(0, 2, 1) @ g, rtol=1e-12)
    assert "repeats a letter" in check_equation("nii->ni")
    assert "malformed" in check_equation("ij->j->i")
    assert "in no operand" in check_equation("ij->ijk")
    assert check_equation("...ij, ...jk -> ...ik") is None


def test_lrn_matches_torch_local_response_norm():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(4).standard_normal((2, 7, 3, 3)).astype(np.float32)
    m = nn.OnnxOp("LRN", {"size": 5, "alpha": 0.01, "beta": 0.75, "bias": 1.5})
    y, cache = m.forward(x)
    xt = torch.from_numpy(x).requires_grad_(True)
    yt = torch.nn.LocalResponseNorm(5, alpha=0.01, beta=0.75, k=1.5)(xt)
    g = np.random.default_rng(5).standard_normal(y.shape).astype(np.float32)
    yt.backward(torch.from_numpy(g))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.backward(cache, g, m.zeros_like_parameters()), xt.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dims, kernel, strides, pads, include", [
    (1, [3], [2], [1, 1], 0), (1, [2], [1], [0, 1], 1), (3, [2, 1, 3], [1, 2, 1], [0, 0, 1, 0, 0, 1], 0),
    (3, [5, 1, 1], [1, 1, 1], [0] * 6, 0)])
def test_average_pool_nd_matches_torch_and_gradcheck(dims, kernel, strides, pads, include):
    torch = pytest.importorskip("torch")
    shape = (2, 3, 7) if dims == 1 else (2, 2, 6, 5, 4)
    x = np.random.default_rng(6).standard_normal(shape)
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads, "count_include_pad": include}
    m = nn.OnnxOp("AveragePool", attrs)
    if pads[:dims] == pads[dims:]:  # torch pads symmetrically
        pool = torch.nn.functional.avg_pool1d if dims == 1 else torch.nn.functional.avg_pool3d
        expected = pool(torch.from_numpy(x), kernel, strides, pads[:dims], count_include_pad=bool(include)).numpy()
        np.testing.assert_allclose(m(x.astype(np.float32)), expected, rtol=1e-5, atol=1e-6)
    layer_gradcheck(m.astype(np.float64), x, training=False)
