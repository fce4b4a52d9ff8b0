"""Conv2d and pooling specifics: argument and input errors, default init, chunked GEMM path, ties/NaN."""
import math

import numpy as np
import pytest

from sparkdl import nn
from sparkdl.nn import conv_algorithm, conv_chunks
from sparkdl.nn.conv import conv2d_backward, conv2d_forward

torch = pytest.importorskip("torch")


# ---------------------------------------------------------------- Conv2d arguments
@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(in_channels=0, out_channels=4, kernel_size=3), ValueError, "in_channels must be >= 1, got 0"),
    (dict(in_channels=3, out_channels=2.5, kernel_size=3), TypeError, "out_channels must be an int, got float"),
    (dict(in_channels=3, out_channels=4, kernel_size=(3, 3, 3)), ValueError, "kernel_size must be an int or a pair"),
    (dict(in_channels=3, out_channels=4, kernel_size=3, stride=0), ValueError, "stride must be >= 1, got 0"),
    (dict(in_channels=3, out_channels=4, kernel_size=3, padding=-1), ValueError, "padding must be >= 0, got -1"),
    (dict(in_channels=3, out_channels=4, kernel_size=3, dilation=(1, 0)), ValueError, "dilation must be >= 1"),
    (dict(in_channels=3, out_channels=4, kernel_size=3, groups=2), ValueError,
     "in_channels must be divisible by groups, got in_channels=3, groups=2"),
    (dict(in_channels=4, out_channels=6, kernel_size=3, groups=4), ValueError,
     "out_channels must be divisible by groups, got out_channels=6, groups=4"),
    (dict(in_channels=3, out_channels=4, kernel_size=3, bias="yes"), TypeError, "bias must be a bool"),
])
def test_conv_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        nn.Conv2d(**kwargs)


def test_conv_bad_inputs():
    m = nn.Conv2d(3, 4, 3, padding=0, dilation=(1, 2))
    with pytest.raises(ValueError, match=r"Conv2d: expected 4-D input \(N, C, H, W\), got 3-D"):
        m.forward(np.zeros((3, 8, 8), np.float32))
    with pytest.raises(ValueError, match=r"in_channels=3 channels \(axis 1\), got shape \(2, 5, 8, 8\)"):
        m.forward(np.zeros((2, 5, 8, 8), np.float32))
    # dilated kernel is 3 x 5: width 4 is too small, height 3 is just enough
    with pytest.raises(ValueError, match=r"input spatial size \(3, 4\) with padding \(0, 0\) is smaller than the "
                                         r"dilated kernel \(3, 5\); output size would be \(1, 0\)"):
        m.forward(np.zeros((1, 3, 3, 4), np.float32))
    assert m.forward(np.zeros((1, 3, 3, 5), np.float32))[0].shape == (1, 4, 1, 1)
    with pytest.raises(TypeError, match="input dtype must be float32"):
        m.forward(np.zeros((1, 3, 8, 8), np.float64))
    with pytest.raises(TypeError, match="must be a numpy.ndarray, got list"):
        m.forward([[[[0.0]]]])


# ---------------------------------------------------------------- Conv2d init
@pytest.mark.parametrize("args", [dict(in_channels=16, out_channels=32, kernel_size=3),
                                  dict(in_channels=8, out_channels=64, kernel_size=(5, 3), groups=4)])
def test_conv_default_init_matches_pytorch_bounds(args):
    torch.manual_seed(0)
    ours, theirs = nn.Conv2d(**args).initialize(7), torch.nn.Conv2d(**args)
    fan_in, _ = torch.nn.init._calculate_fan_in_and_fan_out(theirs.weight)
    bound = 1.0 / math.sqrt(fan_in)  # PyTorch: kaiming_uniform_(a=sqrt(5)) and bias U(-1/sqrt(fan_in), ..)
    assert ours.weight.shape == tuple(theirs.weight.shape)
    for name, w in (("weight", ours.weight), ("bias", ours.bias)):
        t = getattr(theirs, name).detach().numpy()
        assert np.abs(w).max() <= bound and np.abs(t).max() <= bound, name
        assert np.abs(w).max() > 0.8 * bound and np.abs(t).max() > 0.8 * bound, name  # >= 64 draws each
    w = ours.weight.ravel()
    assert abs(w.mean()) < 0.05 * bound
    assert w.std() == pytest.approx(bound / math.sqrt(3), rel=0.05)  # std of U(-b, b)
    assert not np.array_equal(nn.Conv2d(**args).initialize(8).weight, ours.weight)
    np.testing.assert_array_equal(nn.Conv2d(**args).initialize(7).weight, ours.weight)


def test_conv_config_round_trip():
    m = nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=1, dilation=(1, 2), groups=2, bias=False)
    cfg = m.get_config()
    assert cfg == {"in_channels": 4, "out_channels": 6, "kernel_size": [3, 2], "stride": [2, 1], "padding": [1, 1],
                   "dilation": [1, 2], "groups": 2, "bias": False}
    m2 = nn.Conv2d.from_config(cfg)
    assert m2.get_config() == cfg and m2.num_parameters() == 6 * 2 * 3 * 2


# ---------------------------------------------------------------- Conv2d chunked GEMM path
def _torch_conv_check(m, x, atol=2e-5):
    tm = torch.nn.Conv2d(**{k: v for k, v in m.get_config().items()})
    tm.load_state_dict({k: torch.from_numpy(v) for k, v in m.state_dict().items()})
    y, cache = m.forward(x)
    xt = torch.from_numpy(x).requires_grad_(True)
    yt = tm(xt)
    gy = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
    yt.backward(torch.from_numpy(gy))
    gp = m.zeros_like_parameters()
    gx = m.backward(cache, gy, gp)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=atol)
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-5, atol=atol)
    grads = m.parameter_layout().views(gp)
    for name, p in tm.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=1e-4, atol=atol, err_msg=name)


@pytest.mark.parametrize("samples_per_chunk", [1, 2])
@pytest.mark.parametrize("args", [dict(in_channels=3, out_channels=4, kernel_size=3, padding=1),
                                  dict(in_channels=4, out_channels=4, kernel_size=3, stride=2, groups=2)])
def test_conv_multi_chunk_matches_pytorch(monkeypatch, samples_per_chunk, args):
    """Several chunks (and a short last one) accumulate the weight gradient across chunks correctly."""
    m = nn.Conv2d(**args).initialize(3)
    x = np.random.default_rng(0).standard_normal((5, args["in_channels"], 9, 8)).astype(np.float32)
    ho, wo = m.output_size(9, 8)
    _, _, wq, _, k, _ = m._plan(x.shape, ho, wo)
    per_sample = (k + m.out_channels) * ho * wq * 4  # bytes of im2col columns + GEMM output per sample
    monkeypatch.setattr(conv_chunks, "_CHUNK_BYTES", per_sample * samples_per_chunk)
    assert m._plan(x.shape, ho, wo)[-1] == samples_per_chunk
    _torch_conv_check(m, x)


def test_conv_larger_layer_matches_pytorch():
    m = nn.Conv2d(16, 24, 3, padding=1).initialize(5)
    x = np.random.default_rng(2).standard_normal((6, 16, 12, 10)).astype(np.float32)
    assert m.algorithm(x.shape) == "winograd"
    _torch_conv_check(m, x, atol=1e-4)


@pytest.mark.parametrize("make", [lambda: nn.Conv2d(8, 4, 3, padding=1), lambda: nn.Conv2d(3, 4, 3, stride=2),
                                  lambda: nn.MaxPool2d(2), lambda: nn.AvgPool2d(2), lambda: nn.AdaptiveAvgPool2d(1)])
def test_empty_batch(make):
    m = make()
    y, cache = m.forward(np.zeros((0, m.in_channels if hasattr(m, "in_channels") else 3, 6, 6), np.float32))
    assert y.shape[0] == 0 and y.ndim == 4
    gp = np.full(m.num_parameters(), np.nan, np.float32)
    gx = m.backward(cache, y, gp)
    assert gx.shape[0] == 0 and np.array_equal(gp, np.zeros_like(gp))  # gradients overwritten with zeros


def test_winograd_dispatch():
    shape = (2, 8, 16, 16)
    assert nn.Conv2d(8, 4, 3).algorithm(shape) == "winograd"
    assert nn.Conv2d(8, 4, 3, padding=5, bias=False).algorithm(shape) == "winograd"
    for m in (nn.Conv2d(7, 4, 3), nn.Conv2d(8, 4, 3, stride=2), nn.Conv2d(8, 4, 3, dilation=2),
              nn.Conv2d(8, 4, 3, groups=2), nn.Conv2d(8, 4, (3, 5)), nn.Conv2d(8, 4, 5)):
        assert m.algorithm((2, m.in_channels, 16, 16)) != "winograd", m


@pytest.mark.parametrize("padding", [0, 1, 2, 4])
@pytest.mark.parametrize("hw", [(6, 9), (7, 4), (3, 3)])
def test_winograd_equals_im2col_float64(monkeypatch, padding, hw):
    """The two algorithms agree to float64 rounding: forward, input and parameter gradients, several chunks."""
    rng = np.random.default_rng(4)
    m = nn.Conv2d(9, 5, 3, padding=padding).initialize(1).astype(np.float64)
    x = rng.standard_normal((3, 9) + hw)
    monkeypatch.setattr(conv_chunks, "_CHUNK_BYTES", 1)  # one sample per chunk
    ho, wo = m.output_size(*hw)
    gy = rng.standard_normal((3, 5, ho, wo))
    results = []
    for algorithm in ("winograd", "im2col"):
        y = conv2d_forward(algorithm, x, m.weight, m.bias, m.geometry(), ho, wo)
        gw = np.zeros_like(m.weight)
        results.append((y, conv2d_backward(algorithm, x, m.weight, gy, m.geometry(), gw), gw))
    for a, b in zip(results[0][:3], results[1][:3]):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)


# ---------------------------------------------------------------- pooling
@pytest.mark.parametrize("make, exc, match", [
    (lambda: nn.MaxPool2d(0), ValueError, "MaxPool2d: kernel_size must be >= 1, got 0"),
    (lambda: nn.MaxPool2d(3, padding=2), ValueError, "MaxPool2d: padding must be at most half of kernel_size"),
    (lambda: nn.AvgPool2d((2, 4), padding=(1, 3)), ValueError, "AvgPool2d: padding must be at most half"),
    (lambda: nn.MaxPool2d(2, stride=(1, 2, 3)), ValueError, "stride must be an int or a pair"),
    (lambda: nn.MaxPool2d(2, ceil_mode=1), TypeError, "ceil_mode must be a bool"),
    (lambda: nn.AvgPool2d(2, count_include_pad="no"), TypeError, "count_include_pad must be a bool"),
    (lambda: nn.AdaptiveAvgPool2d(0), ValueError, "AdaptiveAvgPool2d: output_size must be >= 1, got 0"),
    (lambda: nn.AdaptiveAvgPool2d((1, 2, 3)), ValueError, "output_size must be an int or a pair"),
    (lambda: nn.AdaptiveAvgPool2d(1.5), TypeError, "output_size must be an int"),
])
def test_pool_bad_arguments(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_pool_defaults_and_bad_inputs():
    assert nn.MaxPool2d(3).stride == (3, 3) and nn.AvgPool2d((2, 3)).stride == (2, 3)
    for m in (nn.MaxPool2d(2), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(2)):
        name = type(m).__name__
        with pytest.raises(ValueError, match=f"{name}: expected 4-D input, got 3-D"):
            m.forward(np.zeros((2, 4, 4), np.float32))
        with pytest.raises(TypeError, match="dtype must be float32"):
            m.forward(np.zeros((1, 2, 4, 4), np.float64))
    with pytest.raises(ValueError, match=r"MaxPool2d: input spatial size \(2, 5\) is too small for "
                                         r"kernel_size=\(3, 3\), padding=\(0, 0\); output size would be \(0, 1\)"):
        nn.MaxPool2d(3).forward(np.zeros((1, 1, 2, 5), np.float32))


def test_maxpool_ties_and_nan_follow_pytorch():
    x = np.zeros((1, 2, 4, 4), np.float32)  # channel 0: all ties; channel 1: a NaN in one window
    x[0, 1] = np.arange(16).reshape(4, 4)
    x[0, 1, 0, 1] = np.nan
    m, tm = nn.MaxPool2d(2, stride=1), torch.nn.MaxPool2d(2, stride=1)
    y, cache = m.forward(x)
    xt = torch.from_numpy(x).requires_grad_(True)
    yt = tm(xt)
    np.testing.assert_array_equal(y, yt.detach().numpy())  # NaN in the same places
    assert np.isnan(y[0, 1, 0, :2]).all() and not np.isnan(y[0, 1, 1:]).any()
    gy = np.arange(1, 19, dtype=np.float32).reshape(y.shape)
    yt.backward(torch.from_numpy(gy))
    gx = m.backward(cache, gy, np.zeros(0, np.float32))
    np.testing.assert_array_equal(gx, xt.grad.numpy())
    assert gx[0, 0, 0, 0] == gy[0, 0, 0, 0] and gx[0, 0, 1, 1] == gy[0, 0, 1, 1]  # first max wins on ties


@pytest.mark.parametrize("hw", [(4, 4), (5, 7)])  # odd sizes: a last row/column in no window
@pytest.mark.parametrize("k,st,pad,ceil", [(2, 2, 0, False), (3, 2, 0, True), (3, 2, 1, False), (3, 1, 1, False)],
                         ids=["2x2", "3x3s2-ceil", "3x3s2-pad", "3x3s1-overlap"])
def test_maxpool_recomputed_winners_follow_pytorch_and_the_index_kernel(hw, k, st, pad, ceil):
    """No indices are kept: backward must route exactly as saved argmax indices do (ties, signed zeros, NaNs)."""
    from sparkdl.kernels import pool as K
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, (3, 4) + hw).astype(np.float32)  # many ties, zeros of both signs
    x[x == 0] = rng.choice([0.0, -0.0], size=int((x == 0).sum()))
    x[0, 0, 0, 1] = np.nan                          # one NaN in a window
    x[0, 1, 0, 0] = x[0, 1, 1, 1] = np.nan          # two NaNs: the last one wins (as PyTorch)
    x[1, 2, :2, :2] = np.nan                        # a window of NaNs
    m = nn.MaxPool2d(k, st, pad, ceil_mode=ceil)
    y, cache = m.forward(x, training=True)
    gy = rng.standard_normal(y.shape).astype(np.float32)
    gx = m.backward(cache, gy, np.zeros(0, np.float32))
    xt = torch.from_numpy(x).requires_grad_(True)
    yt = torch.nn.MaxPool2d(k, st, pad, ceil_mode=ceil)(xt)
    yt.backward(torch.from_numpy(gy))
    np.testing.assert_array_equal(y, yt.detach().numpy())
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-6, atol=0)  # overlapping windows: sums in any order
    planes = x.reshape(-1, *hw)
    y_idx, idx = K.max_pool2d_forward(planes, k, k, st, st, pad, pad, *y.shape[2:])
    np.testing.assert_array_equal(y.reshape(y_idx.shape), y_idx)
    expect = K.max_pool2d_backward(gy.reshape(idx.shape), idx, *hw, k, k, st, st, pad, pad).reshape(x.shape)
    np.testing.assert_array_equal(gx, expect)  # the same windows summed in the same order: bitwise
    assert (np.signbit(gx) == np.signbit(expect)).all()


def test_adaptive_global_equals_mean_and_pool_configs():
    x = np.random.default_rng(0).standard_normal((3, 4, 7, 5)).astype(np.float32)
    y, _ = nn.AdaptiveAvgPool2d(1).forward(x)
    np.testing.assert_allclose(y[:, :, 0, 0], x.mean(axis=(2, 3)), rtol=1e-5, atol=1e-6)
    for m in (nn.MaxPool2d(3, 2, 1, ceil_mode=True), nn.AvgPool2d((3, 2), None, (1, 0), False, False),
              nn.AdaptiveAvgPool2d((None, 3))):
        assert type(m).from_config(m.get_config()).get_config() == m.get_config()


@pytest.mark.parametrize("args, hw", [
    (dict(in_channels=1, out_channels=6, kernel_size=5, padding=2), (28, 28)),  # LeNet-5's first layer
    (dict(in_channels=3, out_channels=8, kernel_size=(3, 2), padding=(0, 1), dilation=(2, 1)), (9, 7)),
    (dict(in_channels=2, out_channels=1, kernel_size=1, bias=False), (4, 5)),
    (dict(in_channels=5, out_channels=4, kernel_size=(2, 3), padding=(1, 0)), (3, 3)),  # 30 taps: 7 groups of 4 + 2
])
def test_direct_forward_equals_im2col_and_pytorch(monkeypatch, args, hw):
    m = nn.Conv2d(**args)
    x = np.random.default_rng(4).standard_normal((3, args["in_channels"]) + hw)
    assert m.algorithm(x.shape) == "direct"
    m.initialize(3)
    m.astype(np.float64)
    y = m(x)
    monkeypatch.setattr(conv_algorithm, "DIRECT_MAX_OUT_CHANNELS", 0)
    assert m.algorithm(x.shape) != "direct"
    np.testing.assert_allclose(y, m(x), rtol=1e-12, atol=1e-12)  # the same sums in another order
    tm = torch.nn.Conv2d(**args).double()
    tm.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in m.state_dict().items()})
    np.testing.assert_allclose(y, tm(torch.from_numpy(x)).detach().numpy(), rtol=1e-12, atol=1e-12)


def test_direct_forward_is_used_where_it_measured_faster():
    def algorithm(m, hw=28):
        return m.algorithm((64, m.in_channels, hw, hw))
    assert algorithm(nn.Conv2d(1, 6, 5, padding=2)) == "direct"  # LeNet-5's two layers
    assert algorithm(nn.Conv2d(6, 16, 5), 14) == "im2col"
    assert algorithm(nn.Conv2d(3, 32, 3)) == "im2col"  # more output channels: im2col's GEMM is faster
    assert algorithm(nn.Conv2d(16, 16, 3)) == "winograd"
    # the forward alone runs direct up to 150 taps and 32 output channels at stride 1
    def forward(m, hw=28):
        return m.forward_algorithm((64, m.in_channels, hw, hw))
    assert forward(nn.Conv2d(6, 16, 5), 14) == forward(nn.Conv2d(16, 16, 3, padding=1), 32) == "direct"
    assert forward(nn.Conv2d(3, 32, 3, padding=1), 32) == forward(nn.Conv2d(3, 16, 3, padding=1), 32) == "direct"
    assert forward(nn.Conv2d(32, 32, 3, padding=1), 16) == "winograd"  # 288 taps
    assert forward(nn.Conv2d(3, 64, 3, padding=1), 64) == "im2col"  # 64 output channels
    assert forward(nn.Conv2d(3, 16, 3, stride=2, padding=1), 224) == "im2col"
    assert algorithm(nn.Conv2d(1, 6, 5, stride=2)) == "im2col" and algorithm(nn.Conv2d(4, 4, 3, groups=2)) == "im2col"
