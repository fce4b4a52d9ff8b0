"""Import of the operators the model zoo needs, one hand-built node at a time: outputs against onnxruntime
(the reference implementation of the ONNX semantics), the layer or generic node each becomes, float64
gradients of the imported module, export back (onnxruntime again), and the refusals that name the node."""
import numpy as np
import pytest
from onnx import helper, numpy_helper

from sparkdl import nn
from tests.gradcheck import layer_gradcheck
from tests.onnx_helpers import make_model

ort = pytest.importorskip("onnxruntime")
sonnx = pytest.importorskip("sparkdl.onnx")
OnnxImportError = sonnx.OnnxImportError


def _c(name, value, dtype=np.float32):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, dtype), name))


def _i(name, value):
    return _c(name, value, np.int64)


S = (3, 4, 5)  # per-sample shape of the test input (N, 3, 4, 5)

# (id, nodes (input "x", output "y"), output per-sample shape, opset, expected module class, initializers)
CASES = [
    ("Clip-relu6", [_c("lo", 0.0), _c("hi", 6.0), helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], S, 17,
     nn.ReLU6, []),
    ("Clip-hardtanh", [_c("lo", -0.5), _c("hi", 1.5), helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], S, 13,
     nn.Hardtanh, []),
    ("Clip-min-only", [_c("lo", 0.25), helper.make_node("Clip", ["x", "lo"], ["y"])], S, 17, nn.Hardtanh, []),
    ("Clip-max-only", [_c("hi", -0.25), helper.make_node("Clip", ["x", "", "hi"], ["y"])], S, 17, nn.Hardtanh, []),
    ("Clip-opset9-attrs", [helper.make_node("Clip", ["x"], ["y"], min=0.0, max=6.0)], S, 9, nn.ReLU6, []),
    ("Clip-degenerate", [_c("lo", 1.0), _c("hi", 0.5), helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], S, 17,
     nn.OnnxOp, []),
    ("HardSigmoid-torch", [helper.make_node("HardSigmoid", ["x"], ["y"], alpha=1 / 6)], S, 17, nn.Hardsigmoid, []),
    ("HardSigmoid-onnx", [helper.make_node("HardSigmoid", ["x"], ["y"], alpha=0.3, beta=0.4)], S, 17, nn.OnnxOp,
     []),
    ("HardSwish", [helper.make_node("HardSwish", ["x"], ["y"])], S, 14, nn.Hardswish, []),
    ("Softplus", [helper.make_node("Softplus", ["x"], ["y"])], S, 17, nn.Softplus, []),
    ("Erf", [helper.make_node("Erf", ["x"], ["y"])], S, 17, nn.OnnxOp, []),
    ("PRelu-channels", [helper.make_node("PRelu", ["x", "act.weight"], ["y"])], S, 17, nn.PReLU,
     [("act.weight", np.array([[[0.1]], [[-0.2]], [[0.3]]], np.float32))]),
    ("PRelu-shared", [helper.make_node("PRelu", ["x", "act.weight"], ["y"])], S, 17, nn.PReLU,
     [("act.weight", np.array([0.2], np.float32))]),
    ("PRelu-last-axis", [helper.make_node("PRelu", ["x", "act.weight"], ["y"])], S, 17, nn.OnnxOp,
     [("act.weight", np.linspace(-0.5, 0.5, 5).astype(np.float32))]),
    ("ReduceSum", [_i("axes", [1, 3]), helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)], (4,), 13,
     nn.OnnxOp, []),
    ("ReduceMax-opset13-attr", [helper.make_node("ReduceMax", ["x"], ["y"], axes=[-1])], (3, 4, 1), 13, nn.OnnxOp,
     []),
    ("ReduceMin-opset18", [_i("axes", [2]), helper.make_node("ReduceMin", ["x", "axes"], ["y"])], (3, 1, 5), 18,
     nn.OnnxOp, []),
    ("ReduceMean-spatial", [_i("axes", [-1, -2]), helper.make_node("ReduceMean", ["x", "axes"], ["y"])], (3, 1, 1),
     18, nn.AdaptiveAvgPool2d, []),
    ("Sum-three", [helper.make_node("Sum", ["x", "b", "c"], ["y"])], S, 13, nn.OnnxOp,
     [("b", np.ones((5,), np.float32)), ("c", np.full((4, 1), 2.0, np.float32))]),
    ("Max-variadic", [_c("b", 0.1), helper.make_node("Neg", ["x"], ["x2"]),
                      helper.make_node("Max", ["x", "b", "x2"], ["y"])], S, 13, nn.OnnxOp, []),
    ("Min-broadcast", [helper.make_node("Min", ["x", "b"], ["y"])], S, 13, nn.OnnxOp,
     [("b", np.linspace(-1, 1, 20).reshape(4, 5).astype(np.float32))]),
    ("Pad-constant", [_i("pads", [0, 0, 1, 2, 0, 0, 2, 1]), _c("v", 0.5),
                      helper.make_node("Pad", ["x", "pads", "v"], ["y"])], (3, 7, 8), 13, nn.OnnxOp, []),
    ("Pad-reflect", [_i("pads", [0, 0, 1, 2, 0, 0, 2, 1]), helper.make_node("Pad", ["x", "pads"], ["y"],
                                                                            mode="reflect")], (3, 7, 8), 13,
     nn.OnnxOp, []),
    ("Pad-edge-axes", [_i("pads", [2, 1]), _i("axes", [-1]), helper.make_node("Pad", ["x", "pads", "", "axes"],
                                                                                 ["y"], mode="edge")],
     (3, 4, 8), 18, nn.OnnxOp, []),
    ("ConvTranspose", [helper.make_node("ConvTranspose", ["x", "up.weight", "up.bias"], ["y"], strides=[2, 2],
                                        pads=[1, 1, 1, 1], output_padding=[1, 0])], (2, 8, 9), 17,
     nn.ConvTranspose2d, [("up.weight", np.linspace(-1, 1, 3 * 2 * 9).reshape(3, 2, 3, 3).astype(np.float32)),
                          ("up.bias", np.array([0.1, -0.2], np.float32))]),
    ("ConvTranspose-groups", [helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=3, dilations=[2, 1])],
     (3, 6, 6), 13, nn.ConvTranspose2d, [("w", np.linspace(-1, 1, 3 * 2 * 2).reshape(3, 1, 2, 2).astype(np.float32))]),
    ("Conv-same-lower", [helper.make_node("Conv", ["x", "c.weight"], ["y"], auto_pad="SAME_LOWER", strides=[2, 2])],
     (2, 2, 3), 13, nn.Conv2d, [("c.weight", np.linspace(-1, 1, 2 * 3 * 4 * 2).reshape(2, 3, 4, 2).astype(np.float32))]),
    ("Conv-asymmetric-pads", [helper.make_node("Conv", ["x", "c.weight"], ["y"], pads=[0, 2, 1, 0])], (2, 4, 6), 13,
     nn.Conv2d, [("c.weight", np.linspace(-1, 1, 2 * 3 * 4).reshape(2, 3, 2, 2).astype(np.float32))]),
    ("InstanceNormalization", [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3)], S,
     17, nn.GroupNorm, [("s", np.array([0.5, 1.0, 2.0], np.float32)), ("b", np.array([0.0, 0.3, -1.0], np.float32))]),
    ("Resize-nearest-scales", [_c("scales", [1.0, 1.0, 2.0, 3.0]), helper.make_node(
        "Resize", ["x", "", "scales"], ["y"], mode="nearest", coordinate_transformation_mode="asymmetric",
        nearest_mode="floor")], (3, 8, 15), 13, nn.Upsample, []),
    ("Resize-linear-sizes-axes", [_i("sizes", [7, 3]), helper.make_node(
        "Resize", ["x", "", "", "sizes"], ["y"], mode="linear", axes=[2, 3])], (3, 7, 3), 18, nn.Upsample, []),
    ("Resize-pytorch-half-pixel", [_c("roi", []), _c("scales", [1.0, 1.0, 1.5, 2.0]), helper.make_node(
        "Resize", ["x", "roi", "scales"], ["y"], mode="linear", coordinate_transformation_mode="pytorch_half_pixel")],
     (3, 6, 10), 11, nn.Upsample, []),
    ("Resize-align-corners-sizes", [_i("sizes", [2, 3, 9, 4]), helper.make_node(
        "Resize", ["x", "", "", "sizes"], ["y"], mode="linear", coordinate_transformation_mode="align_corners")],
     (3, 9, 4), 13, nn.Upsample, []),
    ("Einsum", [helper.make_node("Einsum", ["x", "w"], ["y"], equation="nchw,wk->nchk")], (3, 4, 2), 12, nn.OnnxOp,
     [("w", np.linspace(-1, 1, 10).reshape(5, 2).astype(np.float32))]),
    ("LRN", [helper.make_node("LRN", ["x"], ["y"], size=3, alpha=0.2, beta=0.5, bias=1.5)], S, 13, nn.OnnxOp, []),
    ("Pad-opset9", [helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 0, 0, 0, 2, 0, 0], value=-1.0)], (6, 4, 5),
     9, nn.OnnxOp, []),
]


def _run_ort(data, x):
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def _x(seed=0, n=2):
    x = np.random.default_rng(seed).standard_normal((n, *S)) * 3
    return np.where(np.abs(x) < 1e-2, x + 0.05, x).astype(np.float32)  # no input at the kinks


@pytest.mark.parametrize("nodes, out, opset, cls, inits", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matches_onnxruntime_gradients_and_exports_back(tmp_path, nodes, out, opset, cls, inits):
    data = make_model(nodes, [("x", ["N", *S])], [("y", ["N", *out])], inits, opset=opset)
    model = sonnx.load(data)
    kinds = [type(m) for _, m in model.named_modules() if not isinstance(m, (nn.Graph, nn.Sequential))]
    assert cls in kinds, kinds
    x = _x()
    np.testing.assert_allclose(model(x), _run_ort(data, x), rtol=1e-6, atol=1e-5)  # ort's bilinear: other rounding
    path = sonnx.save(model, tmp_path / "back.onnx", input_shape=S)
    np.testing.assert_allclose(_run_ort(str(path), x), model(x), rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(sonnx.load(path)(x), model(x), rtol=1e-6, atol=1e-6)
    layer_gradcheck(model.astype(np.float64), x.astype(np.float64), training=False, rtol=1e-5, atol=1e-6)


def test_split_becomes_slices():
    for opset, split_nodes in [(13, [_i("split", [1, 2]), helper.make_node("Split", ["x", "split"], ["a", "b"],
                                                                            axis=1)]),
                               (11, [helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[1, 2])]),
                               (18, [helper.make_node("Split", ["x"], ["a", "b"], axis=-1, num_outputs=2)])]:
        last = 1 if opset != 18 else 3
        nodes = split_nodes + [helper.make_node("Mul", ["a", "a"], ["a2"]),
                               helper.make_node("Concat", ["a2", "b"], ["y"], axis=last)]
        data = make_model(nodes, [("x", ["N", *S])], [("y", ["N", *S])], opset=opset)
        model = sonnx.load(data)
        x = _x(1)
        np.testing.assert_allclose(model(x), _run_ort(data, x), rtol=1e-6, atol=1e-6)
        assert sum(isinstance(m, nn.OnnxOp) and m.op_type == "Slice" for _, m in model.named_modules()) == 2


def test_cast_like_and_constant_lists_fold():
    """The unoptimised dynamo export's glue: Constant(value_ints/value_float), CastLike to a computed tensor."""
    nodes = [helper.make_node("Constant", [], ["axes"], value_ints=[-1]),
             helper.make_node("Constant", [], ["half"], value_float=0.5),
             helper.make_node("CastLike", ["half", "x"], ["h"]),
             helper.make_node("Unsqueeze", ["h", "axes"], ["h1"]),
             helper.make_node("Mul", ["x", "h1"], ["y"])]
    data = make_model(nodes, [("x", ["N", *S])], [("y", ["N", *S])], opset=17)
    x = _x(2)
    np.testing.assert_allclose(sonnx.load(data)(x), _run_ort(data, x), rtol=1e-6)


@pytest.mark.parametrize("nodes, out, match", [
    ([_i("pads", [1, 0, 0, 0, 0, 0, 0, 0]), helper.make_node("Pad", ["x", "pads"], ["y"], name="pad")], None,
     r"node 'pad' \(Pad\): pads \[.*\] pad the batch axis 0"),
    ([_i("pads", [0] * 8), helper.make_node("Pad", ["x", "pads"], ["y"], name="pad", mode="mirror")], ["N", *S],
     r"node 'pad' \(Pad\): mode='mirror'; supported: 'constant', 'reflect', 'edge', 'wrap'"),
    ([_i("axes", [0]), helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="sum")], [1, *S],
     r"node 'sum' \(ReduceSum\): reduces over the batch axis 0"),
    ([helper.make_node("ReduceMax", ["x"], ["y"], name="max")], [1, 1, 1, 1],
     r"node 'max' \(ReduceMax\): reduces over the batch"),
    ([helper.make_node("Split", ["x"], ["y", "z"], axis=0, name="split")], None,
     r"node 'split' \(Split\): splits the batch"),
    ([_c("scales", [1.0, 1.0, 2.0, 2.0]), helper.make_node("Resize", ["x", "", "scales"], ["y"], name="up",
                                                           mode="cubic")], ["N", 3, 8, 10],
     r"node 'up' \(Resize\): mode='cubic'.*supported: PyTorch's nearest"),
    ([_c("scales", [1.0, 2.0, 1.0, 1.0]), helper.make_node("Resize", ["x", "", "scales"], ["y"], name="up",
                                                           mode="linear")], ["N", 6, 4, 5],
     r"node 'up' \(Resize\): scales \[1.0, 2.0, 1.0, 1.0\] resize the batch or channel axis"),
    ([helper.make_node("Einsum", ["x"], ["y"], name="ein", equation="ncij->cij")], [3, 4, 5],
     r"node 'ein' \(Einsum\): equation 'ncij->cij' moves or sums the batch axis of 'x'"),
    ([helper.make_node("Einsum", ["x"], ["y"], name="ein", equation="ncii->nci")], ["N", 3, 4],
     r"node 'ein' \(Einsum\): term 'ncii' of 'ncii->nci' repeats a letter"),
    ([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", pads=[1, 0, 0, 0])], ["N", 1, 4, 6],
     r"node 'up' \(ConvTranspose\): pads \[1, 0, 0, 0\] .* are asymmetric"),
])
def test_batch_mixing_and_unsupported_forms_are_refused_naming_the_node(nodes, out, match):
    inits = [("w", np.ones((3, 1, 2, 2), np.float32))] if any(n.op_type == "ConvTranspose" for n in nodes) else []
    data = make_model(nodes, [("x", ["N", *S])], [("y", out or ["M", *S])], inits, opset=13)
    with pytest.raises(OnnxImportError, match=match):
        sonnx.load(data)


def test_folded_pad_is_capped_before_it_runs():
    """A Pad of a constant grows by its pads: the size is predicted and refused before numpy allocates it."""
    nodes = [_c("one", np.ones((1, 1))), _i("pads", [0, 10 ** 6, 0, 10 ** 6]),
             helper.make_node("Pad", ["one", "pads"], ["big"], name="huge"),
             helper.make_node("ReduceMean", ["big"], ["m"], keepdims=0), helper.make_node("Add", ["x", "m"], ["y"])]
    data = make_model(nodes, [("x", ["N", 2])], [("y", ["N", 2])], opset=13)
    with pytest.raises(OnnxImportError, match=r"node 'huge' \(Pad\).*2,000,001 elements.*limit"):
        sonnx.load(data, max_folded_elements=10 ** 6)
    model = sonnx.load(data)  # within the default cap: folded
    np.testing.assert_allclose(model(np.zeros((1, 2), np.float32)), np.full((1, 2), 1 / 2000001), rtol=1e-5)
