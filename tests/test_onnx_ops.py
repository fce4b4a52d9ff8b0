"""nn.OnnxOp (ONNX operators on whole arrays): forward against a plain-numpy expression written here, backward
(input and parameter gradients) by float64 central differences; and an imported recurrent graph (RecurrentPart,
the glue) checked the same way."""
import numpy as np
import pytest

from sparkdl import nn
from tests.gradcheck import layer_gradcheck

X = "x"


def _op(op_type, attrs=None, inputs=(X,), parameters=None, buffers=None, values=None):
    m = nn.OnnxOp(op_type, attrs, list(inputs), parameters, buffers)
    rng = np.random.default_rng(7)
    for name, arr in list(m.named_parameters()) + list(m.named_buffers()):
        arr[...] = rng.uniform(1.0, 2.0, arr.shape) if values is None else values[name]
    return m


def _t(name):
    return {"tensor": name}


def _v(value):
    return {"value": value, "dtype": "int64"}


# (id, module, input shape, positive input, numpy reference of (x, tensors))
CASES = [
    ("Sub-broadcast", lambda: _op("Sub", inputs=[X, _t("b")], parameters={"b": [3]}), (2, 4, 3), False,
     lambda x, t: x - t["b"]),
    ("Div-by-parameter", lambda: _op("Div", inputs=[_t("a"), X], parameters={"a": [1, 3]}), (2, 3), True,
     lambda x, t: t["a"] / x),
    ("Pow-square", lambda: _op("Pow", inputs=[X, _t("e")], buffers={"e": []}, values={"e": 2.0}), (3, 2), False,
     lambda x, t: x ** 2),
    ("Sqrt", lambda: _op("Sqrt"), (2, 3), True, lambda x, t: np.sqrt(x)),
    ("Reciprocal", lambda: _op("Reciprocal"), (2, 3), True, lambda x, t: 1 / x),
    ("Exp", lambda: _op("Exp"), (2, 3), False, lambda x, t: np.exp(x)),
    ("Neg", lambda: _op("Neg"), (2, 3), False, lambda x, t: -x),
    ("ReduceMean-keepdims", lambda: _op("ReduceMean", {"axes": [-1]}), (2, 3, 4), False,
     lambda x, t: x.mean(-1, keepdims=True)),
    ("ReduceMean-axes-input", lambda: _op("ReduceMean", {"keepdims": 0}, [X, _v([1, 2])]), (2, 3, 4), False,
     lambda x, t: x.mean((1, 2))),
    ("Where", lambda: _op("Where", inputs=[{"value": [[True, False, True]], "dtype": "bool"}, X, _t("y")],
                          parameters={"y": [2, 1]}), (2, 3), False,
     lambda x, t: np.where([[True, False, True]], x, t["y"])),
    ("Expand", lambda: _op("Expand", inputs=[X, _v([1, 4, 3])]), (2, 1, 3), False,
     lambda x, t: np.broadcast_to(x, (2, 4, 3))),
    ("Concat-axis0-with-parameter", lambda: _op("Concat", {"axis": 0}, [X, _t("c")], {"c": [1, 3]}), (2, 3), False,
     lambda x, t: np.concatenate([x, t["c"]], 0)),
    ("Slice-steps", lambda: _op("Slice", inputs=[X, _v([3, 0]), _v([0, 9]), _v([1, 2]), _v([-1, 2])]), (2, 5, 4),
     False, lambda x, t: x[:, 3:0:-1, 0:9:2]),
    ("Gather-axis1-2d", lambda: _op("Gather", {"axis": 1}, [X, _v([[0, 2], [2, -1]])]), (2, 4, 3), False,
     lambda x, t: x[:, [[0, 2], [2, 3]]]),
    ("Transpose", lambda: _op("Transpose", {"perm": [2, 0, 1]}), (2, 3, 4), False, lambda x, t: x.transpose(2, 0, 1)),
    ("Unsqueeze-Squeeze", lambda: _op("Unsqueeze", inputs=[X, _v([0, -1])]), (2, 3), False,
     lambda x, t: x[None, :, :, None]),
    ("MatMul-parameter", lambda: _op("MatMul", inputs=[X, _t("w")], parameters={"w": [4, 2]}), (2, 3, 4), False,
     lambda x, t: x @ t["w"]),
    ("Softmax-axis1", lambda: _op("Softmax", {"axis": 1}), (2, 4, 3), False,
     lambda x, t: np.exp(x) / np.exp(x).sum(1, keepdims=True)),
    ("Reshape-zero-copy", lambda: _op("Reshape", inputs=[X, _v([0, -1, 2])]), (2, 3, 4), False,
     lambda x, t: x.reshape(2, 6, 2)),
]


@pytest.mark.parametrize("make, shape, positive, reference", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_onnx_op_forward_and_gradients(make, shape, positive, reference):
    m = make()
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 2.0, shape) if positive else rng.standard_normal(shape)
    tensors = {**dict(m.named_parameters()), **dict(m.named_buffers())}
    np.testing.assert_allclose(m(x.astype(np.float32)), reference(x, tensors), rtol=1e-5, atol=1e-6)
    m.astype(np.float64)
    layer_gradcheck(m, x, training=False)


def test_integer_shape_arithmetic_has_no_gradient():
    shape = nn.OnnxOp("Shape", {"start": 1})
    y, cache = shape.forward(np.zeros((2, 3, 4), np.float32))
    np.testing.assert_array_equal(y, [3, 4])
    assert shape.backward(cache, None, shape.zeros_like_parameters()) is None
    div = nn.OnnxOp("Div", inputs=[X, _v(-2)])  # ONNX integer Div truncates toward zero
    np.testing.assert_array_equal(div(np.array([7, -7])), [-3, 3])


def test_bad_op_config():
    with pytest.raises(ValueError, match="op_type must be one of"):
        nn.OnnxOp("Conv")
    with pytest.raises(ValueError, match=r"inputs\[1\] = \{'tensor': 'w'\} must be"):
        nn.OnnxOp("MatMul", inputs=[X, _t("w")])


def test_imported_gru_graph_gradients_float64():
    """RecurrentPart (Y and per-layer Y_h), the Transpose/Reshape/Gather/Slice/Concat glue and the stacked GRU's
    own backward."""
    torch = pytest.importorskip("torch")
    sonnx = pytest.importorskip("sparkdl.onnx")
    from tests.onnx_helpers import torch_to_onnx
    from tests.test_onnx_sequence import BiGRU
    torch.manual_seed(0)
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    model = sonnx.load(torch_to_onnx(BiGRU(), x)).astype(np.float64)
    assert any(isinstance(m, nn.RecurrentPart) for _, m in model.named_modules())
    layer_gradcheck(model, x.astype(np.float64), training=False, rtol=1e-4, atol=1e-6, max_params=80)


def test_gather_backward_on_table_rows_sums_repeated_ids_in_order_as_numpy_add_at():
    # Axis 0 (an embedding table) takes the numba scatter; it must add in the order np.add.at does (same bits).
    rng = np.random.default_rng(0)
    table = rng.standard_normal((50, 3, 4)).astype(np.float32)
    ids = rng.integers(0, 50, (6, 40))
    ids[0, :10] = 7  # one row hit many times: float32 sums depend on the order
    op = nn.OnnxOp("Gather", {"axis": 0}, inputs=["x", "x"])
    y, cache = op.forward((table, ids))
    g = (rng.standard_normal(y.shape) * 10.0 ** rng.integers(-4, 5, y.shape)).astype(np.float32)
    gx, gids = op.backward(cache, g, None)
    expect = np.zeros_like(table)
    np.add.at(expect, ids.reshape(-1), g.reshape(-1, 3, 4))
    assert gids is None
    np.testing.assert_array_equal(gx, expect)
    np.testing.assert_array_equal(y, table[ids])
