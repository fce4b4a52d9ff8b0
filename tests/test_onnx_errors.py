"""Bad ONNX input: each kind of bad file gives one clean OnnxImportError (naming the node, operator and what
is supported where there is one); 200 fuzzed files give only OnnxImportError or a module, never a crash."""
import numpy as np
import pytest

from sparkdl import nn
from tests.onnx_helpers import make_model

onnx = pytest.importorskip("onnx")
sonnx = pytest.importorskip("sparkdl.onnx")
from onnx import helper  # noqa: E402

OnnxImportError = sonnx.OnnxImportError


def _conv_net(opset=17, w_shape=(4, 2, 3, 3), pads=(1, 1, 1, 1), x_shape=("N", 2, 6, 6), extra_nodes=()):
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], name="/conv/Conv", pads=list(pads)),
             helper.make_node("Relu", ["c"], ["r"], name="/Relu"),
             helper.make_node("MaxPool", ["r"], ["p"], name="/pool/MaxPool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"], name="/Flatten", axis=1),
             helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["y"], name="/fc/Gemm", transB=1),
             *extra_nodes]
    inits = [("conv.weight", rng.standard_normal(w_shape).astype(np.float32)),
             ("conv.bias", np.zeros(w_shape[0], np.float32)),
             ("fc.weight", rng.standard_normal((3, 36)).astype(np.float32)), ("fc.bias", np.zeros(3, np.float32))]
    out = extra_nodes[-1].output[0] if extra_nodes else "y"
    return make_model(nodes, [("x", list(x_shape))], [(out, ["N", 3])], inits, opset=opset)


def test_valid_reference_file_loads():
    model = sonnx.load(_conv_net())
    assert model(np.zeros((2, 2, 6, 6), np.float32)).shape == (2, 3)


def _error(data, match):
    with pytest.raises(OnnxImportError, match=match):
        sonnx.load(data)


def test_truncated_file():
    data = _conv_net()
    _error(data[: len(data) // 2], "not a valid ONNX file|invalid ONNX model")


def test_random_bytes():
    _error(np.random.default_rng(0).integers(0, 256, 3000, dtype=np.uint8).tobytes(),
           "not a valid ONNX file|not an ONNX model|invalid ONNX model")
    _error(b"", "empty file")


def test_unknown_operator_names_node_and_supported_ops():
    extra = [helper.make_node("Hardmax", ["y"], ["z"], name="/act/Hardmax")]
    _error(_conv_net(extra_nodes=extra), r"node '/act/Hardmax' \(Hardmax\): unsupported operator Hardmax[\s\S]*"
                                         r"supported operators: .*BatchNormalization.*Conv")


def test_opset_out_of_range():
    _error(_conv_net(opset=8), r"opset 8 is outside the supported range 9\.\.22")
    _error(_conv_net(opset=23), r"opset 23 is outside the supported range 9\.\.22")


def test_initializer_shape_mismatch():
    # a Conv weight for 3 input channels on a 2-channel input: (shape inference lets it pass)
    _error(_conv_net(w_shape=(4, 3, 3, 3)), r"node ./conv/Conv. \(Conv\): weight .conv.weight. of shape \(4, 3, 3, 3\) "
                                            r"with group=1 does not fit an input of shape \(None, 2, 6, 6\)")
    # an IR-3 style initializer that is also declared as a graph input, with another shape
    data = _conv_net()
    m = onnx.load_from_string(data)
    m.graph.input.append(helper.make_tensor_value_info("fc.bias", onnx.TensorProto.FLOAT, [4]))
    _error(m.SerializeToString(), r"initializer 'fc.bias' has shape \(3,\) but the graph declares it as an input of "
                                  r"shape \(4,\)")


def test_unsupported_attribute_value_names_node():
    pool = make_model([helper.make_node("MaxPool", ["x"], ["y"], name="/pool", kernel_shape=[2, 2],
                                        pads=[1, 0, 0, 0])], [("x", ["N", 1, 4, 4])], [("y", ["N", 1, 4, 3])])
    _error(pool, r"node '/pool' \(MaxPool\): pads \[1, 0, 0, 0\].*asymmetric")
    flat = make_model([helper.make_node("Flatten", ["x"], ["y"], name="/Flatten", axis=2)], [("x", ["N", 2, 3])],
                      [("y", [None, 3])])
    _error(flat, r"node '/Flatten' \(Flatten\): axis=2 .* supported: axis=1")
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    bad = helper.make_node("LeakyRelu", ["y"], ["z"], name="lk", alpha=0.1)
    bad.attribute.append(helper.make_attribute("beta", 1.0))
    m = onnx.load_from_string(make_model([node, bad], [("x", ["N", 3])], [("z", ["N", 3])]))
    # the checker rejects an attribute the schema does not know, before sparkdl's own check
    _error(m.SerializeToString(), "beta")


def test_dynamic_shape_is_an_error():
    _error(_conv_net(x_shape=("N", 2, "H", 6)), r"graph input 'x' has shape \(None, 2, None, 6\).*dynamic batch "
                                                r"axis 0 only")


def test_computed_weight_is_an_error():
    nodes = [helper.make_node("Relu", ["w0"], ["w"], name="wr"),
             helper.make_node("Conv", ["x", "w"], ["y"], name="conv")]
    data = make_model(nodes, [("x", ["N", 1, 4, 4]), ("w0", [2, 1, 3, 3])], [("y", ["N", 2, 2, 2])])
    _error(data, r"node 'conv' \(Conv\): input 1 \(W\) must be a constant initializer")


def test_pickle_is_refused_without_loading(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "model.pt"
    torch.save({"w": torch.zeros(2)}, path)
    _error(str(path), r"model.pt looks like a PyTorch .pt/.pth file.*safetensors.*torch.onnx.export")
    import pickle
    _error(pickle.dumps({"a": 1}), "pickle")


def test_fuzzed_files_raise_only_onnx_import_error():
    data = bytearray(_conv_net())
    rng = np.random.default_rng(2026)
    loaded = failed = 0
    for i in range(200):
        mutated = bytearray(data)
        kind = i % 4
        if kind == 0:  # flip a few bytes
            for pos in rng.integers(0, len(mutated), rng.integers(1, 8)):
                mutated[pos] = int(rng.integers(0, 256))
        elif kind == 1:  # truncate
            mutated = mutated[: int(rng.integers(1, len(mutated)))]
        elif kind == 2:  # delete a span
            a = int(rng.integers(0, len(mutated) - 1))
            del mutated[a:a + int(rng.integers(1, 32))]
        else:  # insert random bytes
            a = int(rng.integers(0, len(mutated)))
            mutated[a:a] = rng.integers(0, 256, int(rng.integers(1, 16)), dtype=np.uint8).tobytes()
        try:
            sonnx.load(bytes(mutated))
            loaded += 1
        except OnnxImportError:
            failed += 1
    assert loaded + failed == 200 and failed > 100


def _single(node, x_shape, y_shape, inits=(), opset=17):
    return make_model([node], [("x", x_shape)], [("y", y_shape)], inits, opset=opset)


def test_pre13_softmax_semantics():
    # opset 11 Softmax over the last axis means the same as today's: imported
    model = sonnx.load(_single(helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1), ["N", 4], ["N", 4],
                               opset=11))
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(model(x), np.exp(x) / np.exp(x).sum(1, keepdims=True), rtol=1e-6)
    # ... over a middle axis it flattened the trailing axes: refused, naming the rule
    _error(_single(helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1), ["N", 3, 4], ["N", 3, 4], opset=11),
           r"node 'sm' \(Softmax\): axis=1 at opset 11 normalises over the flattened axes")
    _error(_single(helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=0), ["N", 4], ["N", 4]),
           r"supported: a non-batch axis")


def test_same_padding_and_its_asymmetric_case():
    w = np.random.default_rng(0).standard_normal((2, 1, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="c", auto_pad="SAME_UPPER")
    model = sonnx.load(_single(node, ["N", 1, 5, 5], ["N", 2, 5, 5], [("w", w)]))
    conv = [m for _, m in model.named_modules() if type(m).__name__ == "Conv2d"][0]
    assert conv.padding == (1, 1)
    # asymmetric (pads [0, 0, 1, 1]): a zero Pad, then an unpadded Conv2d
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="c", auto_pad="SAME_UPPER", strides=[2, 2])
    model = sonnx.load(_single(node, ["N", 1, 6, 6], ["N", 2, 3, 3], [("w", w)]))
    conv = [m for _, m in model.named_modules() if type(m).__name__ == "Conv2d"][0]
    assert conv.padding == (0, 0)
    x = np.random.default_rng(1).standard_normal((2, 1, 6, 6)).astype(np.float32)
    expected = nn.Conv2d(1, 2, 3, stride=2, bias=False)
    expected.weight[...] = w
    np.testing.assert_allclose(model(x), expected(np.pad(x, [(0, 0), (0, 0), (0, 1), (0, 1)])), rtol=1e-6, atol=1e-6)


def test_constant_add_reshape_and_optional_outputs():
    # a constant Add (no MatMul before it) is a generic node: x + b
    bias = ("b", np.arange(4, dtype=np.float32))
    model = sonnx.load(_single(helper.make_node("Add", ["x", "b"], ["y"], name="a"), ["N", 4], ["N", 4], [bias]))
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_array_equal(model(x), x + bias[1])
    shape = ("s", np.array([2, -1], np.int64))
    _error(_single(helper.make_node("Reshape", ["x", "s"], ["y"], name="r"), ["N", 4], [2, None], [shape]),
           r"node 'r' \(Reshape\): shape \[2, -1\] for an input of shape \(None, 4\) does not keep the batch axis")
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "idx"], name="mp", kernel_shape=[2, 2]),
             helper.make_node("Flatten", ["idx"], ["f"], name="f")]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 1, 4, 4])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 1, 3, 3]),
                           helper.make_tensor_value_info("f", onnx.TensorProto.INT64, ["N", 9])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    _error(m.SerializeToString(), r"node 'mp' \(MaxPool\): output 'idx' \(an optional output\) is used")


def test_a_shared_initializer_imports_as_independent_copies_with_a_warning():
    """dynamo's optimizer merges equal initializers into one tensor used twice: each use gets its own copy."""
    w = np.random.default_rng(1).standard_normal((3, 3)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="m1"),
             helper.make_node("MatMul", ["h", "w"], ["y"], name="m2")]
    data = make_model(nodes, [("x", ["N", 3])], [("y", ["N", 3])], [("w", w)])
    with pytest.warns(UserWarning, match=r"initializer 'w' is used by node 'm1' \(MatMul\) and node 'm2' "
                                         r"\(MatMul\): imported as independent copies"):
        model = sonnx.load(data)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(model(x), x @ w @ w, rtol=1e-5, atol=1e-6)
    assert model.num_parameters() == 18  # two 3x3 copies, each its own parameter
