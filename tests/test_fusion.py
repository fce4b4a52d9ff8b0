"""Inference-time Conv2d (-> BatchNorm2d) (-> Add) (-> activation) fusion: ``model(x)`` (Module.infer) equals the unfused
evaluation-mode forward pass within 1e-5 with a BatchNorm folded, bit for bit without one, in Sequential,
Residual, Concat and Graph containers; only eligible runs fuse; training and parameters are untouched."""
import numpy as np
import pytest

from sparkdl import nn
from sparkdl.nn.fusion import fusable_run, graph_runs


def _bn(c, rng, **kw):
    """A BatchNorm2d with non-trivial running statistics and affine parameters."""
    bn = nn.BatchNorm2d(c, **kw)
    if bn.track_running_stats:
        bn.running_mean[...] = rng.standard_normal(c)
        bn.running_var[...] = rng.uniform(0.3, 2.0, c)
    if bn.affine:
        bn.weight[...] = rng.standard_normal(c)
        bn.bias[...] = rng.standard_normal(c)
    return bn


def _assert_close(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _mobile_block(rng):
    """MobileNetV2-style: 1x1 expansion + BN + ReLU6, depthwise 3x3 + BN + ReLU6, 1x1 projection + BN, residual."""
    body = nn.Sequential(nn.Conv2d(8, 24, 1, bias=False), _bn(24, rng), nn.ReLU6(),
                         nn.Conv2d(24, 24, 3, padding=1, groups=24, bias=False), _bn(24, rng), nn.ReLU6(),
                         nn.Conv2d(24, 8, 1, bias=False), _bn(8, rng))
    return nn.Residual(body)


def test_sequential_residual_concat_fuse_and_match_unfused():
    rng = np.random.default_rng(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1), _bn(8, rng), nn.ReLU(),  # with a conv bias
        _mobile_block(rng),
        nn.Concat(nn.Sequential(nn.Conv2d(8, 4, 3, padding=1), _bn(4, rng, affine=False), nn.Hardtanh(-0.5, 0.5)),
                  nn.Sequential(nn.Conv2d(8, 4, 1), _bn(4, rng, eps=1e-3))),
        nn.Conv2d(8, 6, 3), _bn(6, rng, track_running_stats=False), nn.ReLU(),  # batch statistics: not fused
        nn.AdaptiveAvgPool2d(1), nn.Flatten())
    x = rng.standard_normal((5, 3, 17, 15)).astype(np.float32)
    params, buffers = model.flat_parameters.copy(), model.flat_buffers.copy()
    want = model.forward(x, training=False)[0]
    _assert_close(model(x), want)
    _assert_close(model.infer(x), want)
    np.testing.assert_array_equal(model.flat_parameters, params)  # folding copies; nothing is written back
    np.testing.assert_array_equal(model.flat_buffers, buffers)
    assert not np.allclose(model(x, training=True), want)  # training still uses batch statistics


def test_which_runs_fuse():
    conv, bn, relu = nn.Conv2d(4, 6, 3), nn.BatchNorm2d(6), nn.ReLU()
    assert fusable_run([conv, bn, relu], 0) == 3 and fusable_run([conv, bn, nn.ReLU6()], 0) == 3
    assert fusable_run([conv, bn, nn.Sigmoid()], 0) == 2 and fusable_run([conv, bn], 0) == 2
    assert fusable_run([conv, nn.BatchNorm2d(6, track_running_stats=False), relu], 0) == 0
    assert fusable_run([conv, relu, bn], 0) == 2 and fusable_run([bn, conv, bn], 0) == 0
    assert fusable_run([conv, nn.Hardswish()], 0) == 2 and fusable_run([conv, nn.Sigmoid()], 0) == 0
    assert fusable_run([nn.Conv1d(4, 6, 3), nn.BatchNorm1d(6)], 0) == 0 and fusable_run([conv], 0) == 0


def test_graph_fuses_only_runs_whose_inner_values_nothing_else_uses():
    rng = np.random.default_rng(1)
    nodes = [("conv1", nn.Conv2d(4, 8, 3, padding=1, bias=False), "x"), ("bn1", _bn(8, rng), "conv1"),
             ("relu1", nn.ReLU(), "bn1"),
             ("conv2", nn.Conv2d(8, 8, 3, padding=1, bias=False), "relu1"), ("bn2", _bn(8, rng), "conv2"),
             ("add", nn.Add(), ["bn2", "relu1"]), ("relu2", nn.ReLU(), "add"),  # a ResNet basic block
             ("conv3", nn.Conv2d(8, 8, 1), "relu2"), ("bn3", _bn(8, rng), "conv3"),
             ("relu3", nn.ReLU(), "bn3"), ("side", nn.ReLU6(), "bn3"),  # bn3 has two users: no activation fused
             ("conv4", nn.Conv2d(8, 8, 1), "relu2"), ("bn4", _bn(8, rng), "conv4"),  # conv4 is an output
             ("cat", nn.Concatenate(), ["relu3", "side", "bn4"])]
    g = nn.Graph("x", nodes, ["cat", "conv4"])
    assert graph_runs(g) == {"conv1": ("conv1", "bn1", "relu1"), "conv2": ("conv2", "bn2", "add", "relu2"),
                             "conv3": ("conv3", "bn3")}
    x = rng.standard_normal((3, 4, 9, 8)).astype(np.float32)
    want = g.forward(x, training=False)[0]
    got = g(x)
    for a, b in zip(got, want):
        _assert_close(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_resnet_stem_on_every_algorithm(dtype):
    """The fold goes through whichever algorithm the rule picks: winograd, im2col, pointwise, cut taps, direct."""
    rng = np.random.default_rng(2)
    layers = []
    for conv in (nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 16, 3, padding=1), nn.Conv2d(16, 16, 3, stride=2, padding=1),
                 nn.Conv2d(16, 32, 1), nn.Conv2d(32, 32, 3, padding=1, groups=32)):
        layers += [conv, _bn(conv.out_channels, rng), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Conv2d(32, 8, 3, padding=1), _bn(8, rng)).astype(dtype)
    for hw in (10, 2):  # 2x2 input: the last convolutions run on a 1x1 map, cut to their centre taps
        x = rng.standard_normal((4, 3, hw, hw)).astype(dtype)
        _assert_close(model(x), model.forward(x)[0])


def _acts():
    return [nn.ReLU(), nn.ReLU6(), nn.Hardtanh(-0.3, 0.7), nn.Hardswish()]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_activation_without_batchnorm_fuses_bit_for_bit_on_every_algorithm(dtype):
    """Conv -> activation, as PyTorch's dynamo exporter writes MobileNet (BatchNorm folded into the Conv): the
    activation runs as the convolution's epilogue and equals conv forward + activation forward exactly, NaN and
    signed zeros included."""
    rng = np.random.default_rng(3)
    convs = {"depthwise 3x3": nn.Conv2d(8, 8, 3, padding=1, groups=8), "depthwise 5x5 s2": nn.Conv2d(8, 8, 5, 2, 2, groups=8),
             "depthwise 3x3 s3 d2": nn.Conv2d(8, 8, 3, 3, 2, dilation=2, groups=8),
             "pointwise": nn.Conv2d(8, 12, 1), "pointwise no bias": nn.Conv2d(8, 12, 1, bias=False),
             "3x3": nn.Conv2d(8, 12, 3, padding=1), "7x7 s2": nn.Conv2d(8, 4, 7, 2, 3)}
    for hw in (16, 5):
        x = rng.standard_normal((3, 8, hw, hw)).astype(dtype) * 4
        x[0, 0, 1, 1] = np.nan
        for name, conv in convs.items():
            for act in _acts():
                model = nn.Sequential(conv, act).initialize(int(rng.integers(1 << 30))).astype(dtype)
                layers = list(model._modules.values())
                assert fusable_run(layers, 0) == 2
                want = layers[1].forward(layers[0].forward(x)[0])[0]
                got = model(x)
                assert got.dtype == want.dtype and (type(act) is nn.ReLU or np.isnan(got).any()), (name, act)
                np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=f"{name} {act}")
    zeros = np.zeros((2, 8, 6, 6), np.float32)
    for act in _acts():
        model = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8), act).initialize(0)
        conv = list(model._modules.values())[0]
        conv.weight[...], conv.bias[...] = -1.0, -0.0  # -0.0 + -1 * 0 ...: -0.0, which ReLU makes +0.0
        want = act.forward(conv.forward(zeros)[0])[0]
        assert np.signbit(conv.forward(zeros)[0]).all()
        np.testing.assert_array_equal(model(zeros).view(np.uint32), want.view(np.uint32))


def test_graph_fuses_conv_activation_runs_as_the_dynamo_exporter_writes_them():
    rng = np.random.default_rng(4)
    nodes = [("expand", nn.Conv2d(4, 16, 1), "x"), ("clip1", nn.ReLU6(), "expand"),
             ("dw", nn.Conv2d(16, 16, 3, padding=1, groups=16), "clip1"), ("hs", nn.Hardswish(), "dw"),
             ("project", nn.Conv2d(16, 4, 1), "hs"), ("add", nn.Add(), ["project", "x"]),
             ("conv", nn.Conv2d(4, 4, 3, padding=1), "add"), ("relu", nn.ReLU(), "conv"),
             ("other", nn.Sigmoid(), "conv")]  # conv has two users: nothing fused into it
    g = nn.Graph("x", nodes, ["relu", "other"]).initialize(0)
    assert graph_runs(g) == {"expand": ("expand", "clip1"), "dw": ("dw", "hs"), "project": ("project", "add")}
    x = rng.standard_normal((2, 4, 9, 9)).astype(np.float32)
    for got, want in zip(g(x), g.forward(x, training=False)[0]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_graph_fuses_residual_joins_bit_for_bit(dtype):
    """``conv -> add -> act`` and ``conv -> add`` (ResNet's and MobileNetV2's joins as the dynamo exporter writes
    them, BatchNorm folded) equal the unfused layers exactly, NaN and signed zeros included, with the residual as
    either operand and computed before or after the convolution (a projection shortcut later in node order)."""
    rng = np.random.default_rng(5)
    for act in _acts() + [None]:
        nodes = [("stem", nn.Conv2d(4, 8, 3, padding=1), "x"), ("relu0", nn.Hardswish(), "stem"),  # keeps NaN
                 ("conv1", nn.Conv2d(8, 8, 3, padding=1), "relu0"),  # winograd
                 ("add1", nn.Add(), ["relu0", "conv1"])]
        last = "add1"
        if act is not None:
            nodes.append(("act1", act, "add1"))
            last = "act1"
        nodes += [("conv2", nn.Conv2d(8, 6, 3, stride=2, padding=1), last),  # im2col; its shortcut comes after
                  ("short", nn.Conv2d(8, 6, 1, stride=2), last), ("add2", nn.Add(), ["conv2", "short"]),
                  ("relu2", nn.ReLU6(), "add2"),
                  ("dw", nn.Conv2d(6, 6, 3, padding=1, groups=6), "relu2"), ("add3", nn.Add(), ["dw", "relu2"])]
        g = nn.Graph("x", nodes, ["add3"]).initialize(int(rng.integers(1 << 30))).astype(dtype)
        runs = graph_runs(g)
        assert runs["conv1"] == ("conv1", "add1") + (("act1",) if act is not None else ())
        assert runs["conv2"] == ("conv2", "add2", "relu2") and runs["dw"] == ("dw", "add3")
        x = rng.standard_normal((3, 4, 10, 9)).astype(dtype) * 4
        x[0, 1, 2, 3] = np.nan
        got, want = g(x), g.forward(x, training=False)[0]
        assert got.dtype == want.dtype and (np.isnan(got).any() or type(act) is nn.ReLU)
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=str(act))


def test_residual_join_after_a_folded_batchnorm_and_a_bad_join():
    rng = np.random.default_rng(6)
    nodes = [("conv", nn.Conv2d(4, 4, 3, padding=1, bias=False), "x"), ("bn", _bn(4, rng), "conv"),
             ("add", nn.Add(), ["bn", "x"]), ("relu", nn.ReLU(), "add")]
    g = nn.Graph("x", nodes, ["relu"]).initialize(0)
    assert graph_runs(g) == {"conv": ("conv", "bn", "add", "relu")}
    x = rng.standard_normal((2, 4, 7, 7)).astype(np.float32)
    _assert_close(g(x), g.forward(x, training=False)[0])
    # a join whose operands differ in shape fails as the unfused Add does
    bad = nn.Graph("x", [("conv", nn.Conv2d(4, 4, 3), "x"), ("add", nn.Add(), ["conv", "x"])], ["add"]).initialize(0)
    assert graph_runs(bad) == {"conv": ("conv", "add")}
    with pytest.raises(ValueError, match="Add: all inputs must have the same shape"):
        bad(x)
