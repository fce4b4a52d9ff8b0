"""Specific tests for activations, BatchNorm, Dropout and shape layers (the generic checks live in
tests/test_layers_generic.py, driven by tests/cases/activation.py and tests/cases/norm.py)."""
import warnings

import numpy as np
import pytest

from sparkdl import nn
from sparkdl.io import build_model, get_architecture
from tests.cases.activation import CASES as ACT_CASES
from tests.cases.norm import CASES as NORM_CASES

torch = pytest.importorskip("torch")


def _run(layer, x, **kw):
    y, cache = layer.forward(x, **kw)
    gy = np.random.default_rng(1).standard_normal(y.shape).astype(x.dtype)
    return y, layer.backward(cache, gy, layer.zeros_like_parameters()), gy


# ------------------------------------------------------------------------------------------ activations
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_tanh_stable_at_extremes(dtype):
    x = np.array([-1e4, -800.0, -100.0, -20.0, 0.0, 20.0, 100.0, 800.0, 1e4], dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s, gs, gy = _run(nn.Sigmoid().astype(dtype), x)
        t, gt, _ = _run(nn.Tanh().astype(dtype), x)
    ref = torch.sigmoid(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(s, ref, rtol=1e-6, atol=1e-30)  # sigmoid(-100) is subnormal in float32
    assert s[0] == 0 and s[-1] == 1 and s[4] == 0.5
    assert np.all(np.isfinite(gs)) and gs[0] == 0 and gs[-1] == 0
    np.testing.assert_array_equal(t[[0, -1]], [-1, 1])
    assert np.all(np.isfinite(gt))


@pytest.mark.parametrize("layer_cls", [nn.Softmax, nn.LogSoftmax])
def test_softmax_shift_invariant_and_finite_for_huge_logits(layer_cls):
    x = np.random.default_rng(0).standard_normal((4, 6))
    layer = layer_cls(dim=1).astype(np.float64)
    y0 = layer(x)
    y1 = layer(x + 1000.0)  # exp(1000) overflows float64: only a max-shifted kernel survives
    assert np.all(np.isfinite(y1))
    np.testing.assert_allclose(y1, y0, rtol=1e-10)
    probs = y0 if layer_cls is nn.Softmax else np.exp(y0)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-6)
    big = np.array([[1000.0, 0.0, -1000.0]], np.float32)
    ref = getattr(torch, "softmax" if layer_cls is nn.Softmax else "log_softmax")(torch.from_numpy(big), 1)
    np.testing.assert_allclose(layer_cls(dim=1)(big), ref.numpy(), rtol=1e-6)


def test_softmax_gradient_rows_sum_to_zero():
    x = np.random.default_rng(0).standard_normal((3, 5, 2))
    _, gx, _ = _run(nn.Softmax(dim=1).astype(np.float64), x)
    np.testing.assert_allclose(gx.sum(axis=1), 0, atol=1e-12)


@pytest.mark.parametrize("make,torch_fn", [
    (lambda: nn.ELU(alpha=1.5), lambda t: torch.nn.functional.elu(t, alpha=1.5)),
    (lambda: nn.LeakyReLU(0.3), lambda t: torch.nn.functional.leaky_relu(t, 0.3)),
    (lambda: nn.GELU(), lambda t: torch.nn.functional.gelu(t)),
    (lambda: nn.GELU("tanh"), lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
])
def test_activations_match_torch_on_wide_range(make, torch_fn):
    """Large |x| (saturation, ELU's exp underflow) and exactly 0 (the kink: torch's convention)."""
    x = np.array([-200.0, -30.0, -5.0, -1.0, -1e-3, 0.0, 1e-3, 1.0, 5.0, 30.0, 200.0])
    y, gx, gy = _run(make().astype(np.float64), x)
    xt = torch.from_numpy(x).requires_grad_(True)
    yt = torch_fn(xt)
    yt.backward(torch.from_numpy(gy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_float32_gelu_and_erf_are_within_float32_rounding_of_the_float64_formula():
    """float32 arrays take the vectorised rational erf: against math.erf in float64, GELU within 5e-7 absolute
    (about one ulp of the output for x > 0), its gradient within 5e-7, erf within 2e-7; PyTorch's float32 GELU
    agrees to its own accuracy on the CPU at hand."""
    import math
    x = np.linspace(-12, 12, 240_001, dtype=np.float32)
    x64 = x.astype(np.float64)
    erf = np.vectorize(math.erf)(x64 / math.sqrt(2))
    gelu, dgelu = 0.5 * x64 * (1 + erf), 0.5 * (1 + erf) + x64 * np.exp(-0.5 * x64 * x64) / math.sqrt(2 * math.pi)
    y, cache = nn.GELU().forward(x)
    gx = nn.GELU().backward(cache, np.ones_like(x), None)
    assert y.dtype == gx.dtype == np.float32
    assert np.abs(y - gelu).max() <= 5e-7 and np.abs(gx - dgelu).max() <= 5e-7
    big = x > 1
    assert np.all(np.abs(y[big] - gelu[big]) <= 1.5 * np.spacing(np.abs(y[big])))
    # PyTorch's float32 GELU is as close where it runs its AVX2 kernels (5e-7 of the formula); its AVX-512 kernels
    # (torch.backends.cpu.get_cpu_capability() == "AVX512", e.g. on Zen 5) are 1.07e-6 off, so ours is within 1.2e-6
    torch_y = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    assert np.abs(torch_y - gelu).max() <= 1.5e-6 and np.abs(y - torch_y).max() <= 1.5e-6
    from sparkdl.nn import OnnxOp
    e = OnnxOp("Erf")(x)
    assert e.dtype == np.float32 and np.abs(e - np.vectorize(math.erf)(x64)).max() <= 2e-7
    special = np.array([np.nan, -np.inf, np.inf], np.float32)
    np.testing.assert_array_equal(OnnxOp("Erf")(special), [np.nan, -1, 1])
    assert np.isnan(nn.GELU()(special[:1])).all()
    _, cache = nn.GELU().forward(np.array([np.nan, -np.inf, np.inf, -40, 40], np.float32))
    g = nn.GELU().backward(cache, np.ones(5, np.float32), None)  # libm's exp(-inf) = 0: inf * 0 is NaN, as before
    assert np.isnan(g[:3]).all() and abs(g[3]) < 1e-7 and g[4] == 1


@pytest.mark.parametrize("width", [1, 3, 4, 7, 128, 1000])
def test_float32_softmax_rows_are_within_two_ulp_of_the_float64_softmax(width):
    """float32 rows along the last axis take the vectorised exp: within 2 float32 ulp of the float64 softmax,
    -inf entries give exact zeros, a NaN or an all -inf row gives NaN (as PyTorch)."""
    from sparkdl.kernels import activation as K
    x = (np.random.default_rng(width).standard_normal((64, width)) * 6).astype(np.float32)
    x[1, : width // 2] = -np.inf
    x[2, 0] = np.nan
    x[3] = -np.inf
    ref = np.exp(x.astype(np.float64) - x.max(1, keepdims=True).astype(np.float64))
    ref /= ref.sum(1, keepdims=True)
    y = nn.Softmax(-1)(x)
    ok = ~np.isnan(ref)
    assert np.array_equal(np.isnan(y), ~ok) and np.isnan(y[2]).all() and np.isnan(y[3]).all()
    assert np.all(np.abs(y[ok] - ref[ok]) <= 2 * np.spacing(ref[ok].astype(np.float32)))
    assert np.all(y[1, : width // 2] == 0)
    yt = torch.softmax(torch.from_numpy(x[4:]), -1).numpy()
    np.testing.assert_allclose(y[4:], yt, rtol=3e-6, atol=1e-30)  # PyTorch float32 exp: a few ulp
    np.testing.assert_array_equal(K.softmax(x.reshape(64, width, 1)).reshape(64, width), y)


def test_activation_argument_errors():
    with pytest.raises(ValueError, match="GELU: approximate must be 'none' or 'tanh', got 'fast'"):
        nn.GELU("fast")
    with pytest.raises(TypeError, match="LeakyReLU: negative_slope must be a real number"):
        nn.LeakyReLU("0.1")
    with pytest.raises(TypeError, match="ELU: alpha"):
        nn.ELU(None)
    with pytest.raises(TypeError, match="Softmax: dim must be an int"):
        nn.Softmax(None)
    with pytest.raises(ValueError, match=r"LogSoftmax: dim=2 is out of range for a 2-D input"):
        nn.LogSoftmax(2)(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"Softmax: dim=-3 is out of range"):
        nn.Softmax(-3)(np.zeros((2, 3), np.float32))


def test_noncontiguous_input():
    x = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)[::2, ::3]
    for layer, ref in [(nn.GELU(), torch.nn.GELU()), (nn.Softmax(0), torch.nn.Softmax(0))]:
        np.testing.assert_allclose(layer(x), ref(torch.from_numpy(x.copy())).numpy(), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------------------------- BatchNorm
@pytest.mark.parametrize("make,shape", [(lambda: nn.BatchNorm1d(4), (1, 4)), (lambda: nn.BatchNorm1d(4), (1, 4, 1)),
                                        (lambda: nn.BatchNorm2d(4), (1, 4, 1, 1))])
def test_batchnorm_single_value_per_channel_in_training_uses_running_stats(make, shape):
    """A one-row share of a data-parallel batch (PyTorch raises): normalised and differentiated exactly as in
    evaluation; running mean/variance unchanged, the batch counted."""
    layer = make().astype(np.float64)
    layer.running_mean[...] = [0.5, -1.0, 2.0, 0.0]
    layer.running_var[...] = [4.0, 0.25, 1.0, 9.0]
    layer.weight[...] = [1.0, 2.0, -1.0, 0.5]
    layer.bias[...] = [0.0, 0.1, 0.2, 0.3]
    x = np.arange(1.0, 5.0).reshape(shape)
    y, gx, gy = _run(layer, x, training=True)
    c = (1, 4) + (1,) * (len(shape) - 2)
    rm, rv = np.array([0.5, -1.0, 2.0, 0.0]).reshape(c), np.array([4.0, 0.25, 1.0, 9.0]).reshape(c)
    w, b = np.array([1.0, 2.0, -1.0, 0.5]).reshape(c), np.array([0.0, 0.1, 0.2, 0.3]).reshape(c)
    np.testing.assert_allclose(y, (x - rm) / np.sqrt(rv + 1e-5) * w + b, rtol=1e-12)
    np.testing.assert_allclose(gx, gy * w / np.sqrt(rv + 1e-5), rtol=1e-12)
    np.testing.assert_array_equal(layer.running_mean, rm.reshape(-1))
    np.testing.assert_array_equal(layer.running_var, rv.reshape(-1))
    assert float(layer.num_batches_tracked) == 1


def test_batchnorm_single_value_without_running_stats_outputs_bias():
    layer = nn.BatchNorm1d(3, track_running_stats=False).astype(np.float64)
    layer.bias[...] = [1.0, 2.0, 3.0]
    y, gx, gy = _run(layer, np.array([[5.0, -2.0, 7.0]]), training=True)
    np.testing.assert_array_equal(y, [[1.0, 2.0, 3.0]])  # x - mean(x) = 0 with one value
    np.testing.assert_array_equal(gx, np.zeros((1, 3)))
    g = layer.zeros_like_parameters()
    layer.backward(layer.forward(np.array([[5.0, -2.0, 7.0]]), training=True)[1], gy, g)
    np.testing.assert_array_equal(layer.grad_views(g)["bias"], gy[0])


def _numpy_bn_steps(batches, momentum, eps=1e-5):
    rm, rv = np.zeros(batches[0].shape[1]), np.ones(batches[0].shape[1])
    for t, b in enumerate(batches, 1):
        axes = (0,) + tuple(range(2, b.ndim))
        f = 1.0 / t if momentum is None else momentum
        rm = (1 - f) * rm + f * b.mean(axis=axes)
        rv = (1 - f) * rv + f * b.var(axis=axes, ddof=1)
    return rm, rv


@pytest.mark.parametrize("momentum", [0.1, 0.7, None])
def test_batchnorm_running_stats_updated_in_place(momentum):
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Identity(), nn.BatchNorm2d(3, momentum=momentum))
    bn = model[1]
    batches = [rng.normal(2.0, 3.0, (4, 3, 2, 5)) for _ in range(4)]
    model.astype(np.float64)
    mean_view, root = bn.running_mean, model.flat_buffers
    for b in batches:
        model.forward(b, training=True)
    rm, rv = _numpy_bn_steps(batches, momentum)
    np.testing.assert_allclose(bn.running_mean, rm, rtol=1e-12)
    np.testing.assert_allclose(bn.running_var, rv, rtol=1e-12)
    assert float(bn.num_batches_tracked) == 4
    assert bn.running_mean is mean_view and np.shares_memory(bn.running_mean, root)
    np.testing.assert_allclose(root, np.concatenate([rm, rv, [4.0]]), rtol=1e-12)
    if momentum is None:  # cumulative average = plain mean of the batch means
        np.testing.assert_allclose(rm, np.mean([b.mean(axis=(0, 2, 3)) for b in batches], axis=0), rtol=1e-12)
    # evaluation uses the running statistics and leaves them alone
    x = batches[0][:1]
    y = model(x)
    w, bias = bn.weight[None, :, None, None], bn.bias[None, :, None, None]
    ref = (x - rm[None, :, None, None]) / np.sqrt(rv[None, :, None, None] + 1e-5) * w + bias
    np.testing.assert_allclose(y, ref, rtol=1e-12)
    assert float(bn.num_batches_tracked) == 4


def test_batchnorm_multi_step_matches_torch():
    rng = np.random.default_rng(5)
    ours, theirs = nn.BatchNorm1d(3, momentum=None), torch.nn.BatchNorm1d(3, momentum=None)
    for _ in range(3):
        x = rng.normal(1.0, 2.0, (5, 3, 4)).astype(np.float32)
        np.testing.assert_allclose(ours(x, training=True), theirs(torch.from_numpy(x)).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    for k, v in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[k], v.numpy(), rtol=1e-6, atol=1e-7, err_msg=k)


def test_batchnorm_without_running_stats_uses_batch_stats_in_eval():
    bn = nn.BatchNorm1d(2, track_running_stats=False, affine=False)
    assert bn.flat_buffers.size == 0 and bn.flat_parameters.size == 0 and bn.state_dict() == {}
    x = np.random.default_rng(0).normal(5.0, 2.0, (50, 2))
    bn.astype(np.float64)
    y_eval, y_train = bn(x), bn(x, training=True)
    np.testing.assert_array_equal(y_eval, y_train)
    np.testing.assert_allclose(y_eval.mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(y_eval.var(axis=0), 1, rtol=1e-4)


def test_batchnorm_empty_batch():
    bn = nn.BatchNorm1d(3)
    before = bn.flat_buffers.copy()
    y, gx, _ = _run(bn, np.zeros((0, 3), np.float32), training=True)
    assert y.shape == (0, 3) and gx.shape == (0, 3)
    np.testing.assert_array_equal(bn.flat_buffers, before)


def test_batchnorm_argument_errors():
    with pytest.raises(ValueError, match="BatchNorm1d: num_features must be >= 1, got 0"):
        nn.BatchNorm1d(0)
    with pytest.raises(TypeError, match="BatchNorm2d: num_features must be an int"):
        nn.BatchNorm2d(3.0)
    with pytest.raises(ValueError, match=r"momentum must be a number in \[0, 1\] or None"):
        nn.BatchNorm1d(3, momentum=1.5)
    with pytest.raises(TypeError, match="momentum must be a real number"):
        nn.BatchNorm1d(3, momentum="0.1")
    with pytest.raises(ValueError, match="eps must be >= 0"):
        nn.BatchNorm2d(3, eps=-1e-5)
    with pytest.raises(ValueError, match=r"BatchNorm1d: expected 2-D or 3-D input, got 4-D"):
        nn.BatchNorm1d(3)(np.zeros((2, 3, 4, 4), np.float32))
    with pytest.raises(ValueError, match=r"BatchNorm2d: expected input.shape\[1\] == 3, got shape \(2, 4, 5, 5\)"):
        nn.BatchNorm2d(3)(np.zeros((2, 4, 5, 5), np.float32))


@pytest.mark.parametrize("s", [1, 7, 1024, 1027])  # rows of every length mod 4
def test_batchnorm_kernels_match_float64_two_pass_sums(s):
    # The per-row partial sums must keep the float64 accuracy of a two-pass mean and variance, also for data far
    # from zero (a one-pass sum of squares would lose it), and give the gradients' sums likewise.
    from sparkdl.kernels import batchnorm as K
    rng = np.random.default_rng(0)
    x = (1e4 + rng.standard_normal((5, 3, s))).astype(np.float32)
    g = rng.standard_normal((5, 3, s)).astype(np.float32)
    x64 = x.astype(np.float64)
    mean, var = K.batch_norm_stats(x)
    np.testing.assert_allclose(mean, x64.mean(axis=(0, 2)), rtol=1e-15)
    np.testing.assert_allclose(var, x64.var(axis=(0, 2)), rtol=1e-12, atol=1e-18)
    invstd = 1.0 / np.sqrt(var + 1e-5)
    w = np.array([0.5, 1.0, 2.0], np.float32)
    gx, gw, gb = K.batch_norm_backward(x, g, mean, invstd, w, True)
    x_hat = (x64 - mean[None, :, None]) * invstd[None, :, None]
    np.testing.assert_allclose(gb, g.astype(np.float64).sum(axis=(0, 2)), rtol=1e-6)
    np.testing.assert_allclose(gw, (g * x_hat).sum(axis=(0, 2)), rtol=1e-5, atol=1e-6)
    m = 5 * s
    expect = (w * invstd)[None, :, None] / m * (m * g - gb[None, :, None] - x_hat * gw[None, :, None])
    np.testing.assert_allclose(gx, expect, rtol=1e-5, atol=1e-6)


def test_batchnorm_backward_eval_is_affine_scaling():
    bn = nn.BatchNorm1d(2).astype(np.float64)
    bn.running_var[...] = [4.0, 0.25]
    bn.weight[...] = [3.0, -1.0]
    _, gx, gy = _run(bn, np.random.default_rng(0).standard_normal((5, 2)))
    np.testing.assert_allclose(gx, gy * np.array([3.0, -1.0]) / np.sqrt(np.array([4.0, 0.25]) + 1e-5), rtol=1e-14)


# --------------------------------------------------------------------------------------------- Dropout
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_mask_statistics(p):
    layer = nn.Dropout(p)
    x = np.ones((200, 500), np.float32)
    y, cache = layer.forward(x, training=True, rng=np.random.default_rng(7))
    kept = y != 0
    n = x.size
    assert abs(kept.mean() - (1 - p)) < 5 * np.sqrt(p * (1 - p) / n)
    np.testing.assert_allclose(y[kept], np.float32(1 / (1 - p)), rtol=1e-7)  # survivors scaled by 1/(1-p)
    assert abs(y.mean() - 1) < 5 * np.sqrt(p / (1 - p) / n)  # E[y] = x
    gy = np.random.default_rng(0).standard_normal(x.shape).astype(np.float32)
    gx = layer.backward(cache, gy, layer.zeros_like_parameters())
    np.testing.assert_array_equal(gx, gy * y)  # the same mask and scale (x = 1)


def test_dropout_determinism_and_eval_identity():
    layer = nn.Dropout(0.5)
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    a = layer(x, training=True, rng=np.random.default_rng(3))
    b = layer(x, training=True, rng=np.random.default_rng(3))
    c = layer(x, training=True, rng=np.random.default_rng(4))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    for kw in ({}, {"training": False, "rng": np.random.default_rng(3)}):
        y, cache = layer.forward(x, **kw)
        np.testing.assert_array_equal(y, x)
        np.testing.assert_array_equal(layer.backward(cache, x, layer.zeros_like_parameters()), x)
    np.testing.assert_array_equal(nn.Dropout(0.0)(x, training=True), x)  # p = 0 needs no rng
    np.testing.assert_array_equal(nn.Dropout(1.0)(x, training=True, rng=np.random.default_rng(0)), 0)
    y64 = nn.Dropout(0.5).astype(np.float64)(x.astype(np.float64), training=True, rng=np.random.default_rng(3))
    assert y64.dtype == np.float64


def test_dropout_errors():
    with pytest.raises(ValueError, match="needs a random generator"):
        nn.Dropout(0.2).forward(np.ones((2, 2), np.float32), training=True)
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match=rf"Dropout: p .* must be in \[0, 1\], got {p}"):
            nn.Dropout(p)
    with pytest.raises(TypeError, match="Dropout: p must be a real number"):
        nn.Dropout("0.5")


# ---------------------------------------------------------------------------------------- shape layers
def test_reshape_errors_and_inference():
    with pytest.raises(ValueError, match=r"Reshape: a sample of shape \(7,\) \(7 values\) cannot be reshaped "
                                         r"to \(2, 3\)"):
        nn.Reshape((2, 3))(np.zeros((4, 7), np.float32))
    with pytest.raises(ValueError, match="cannot be reshaped"):
        nn.Reshape((-1, 4))(np.zeros((2, 6), np.float32))
    with pytest.raises(ValueError, match="at most one -1"):
        nn.Reshape((-1, -1))
    with pytest.raises(ValueError, match="positive"):
        nn.Reshape((3, 0))
    with pytest.raises(TypeError, match="Reshape: shape entry must be an int"):
        nn.Reshape((2.0, 3))
    layer = nn.Reshape((-1, 3))
    y, gx, gy = _run(layer, np.arange(12, dtype=np.float32).reshape(2, 6))
    assert y.shape == (2, 2, 3) and gx.shape == (2, 6)
    np.testing.assert_array_equal(gx, gy.reshape(2, 6))


def test_flatten_errors():
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="start_dim=2 comes after end_dim=1"):
        nn.Flatten(2, 1)(x)
    with pytest.raises(ValueError, match=r"Flatten: start_dim=3 is out of range for a 3-D input"):
        nn.Flatten(3)(x)
    with pytest.raises(ValueError, match="end_dim=-4 is out of range"):
        nn.Flatten(0, -4)(x)
    with pytest.raises(TypeError, match="Flatten: start_dim must be an int"):
        nn.Flatten(1.0)
    assert nn.Flatten(-2)(x).shape == (2, 12)


# ---------------------------------------------------------------------------------- config round trip
@pytest.mark.parametrize("case", ACT_CASES + NORM_CASES, ids=[c.id for c in ACT_CASES + NORM_CASES])
def test_config_round_trip(case):
    layer = case.make()
    rebuilt = build_model(get_architecture(layer))
    assert type(rebuilt) is type(layer) and rebuilt.get_config() == layer.get_config()
    assert repr(rebuilt) == repr(layer)
