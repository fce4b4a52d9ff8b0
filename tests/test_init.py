"""Initializers: fans and gains against PyTorch, sample statistics against the formulas on large arrays,
determinism, errors; default Linear/Conv2d init bounds; Module.initialize determinism."""
import math

import numpy as np
import pytest

from sparkdl import nn
from sparkdl.nn import init

torch = pytest.importorskip("torch")

SHAPES = [(3, 4), (8, 3, 5), (16, 4, 3, 3), (4, 5, 2, 3, 3), (1, 1)]
N_BIG = (384, 96, 3, 3)  # 331,776 samples; fan_in = 864, fan_out = 3456


def _rng(seed=0):
    return np.random.default_rng(seed)


def _big(dtype=np.float32):
    return np.empty(N_BIG, dtype)


@pytest.mark.parametrize("shape", SHAPES)
def test_fans_match_pytorch(shape):
    assert init.calculate_fan_in_and_fan_out(shape) == torch.nn.init._calculate_fan_in_and_fan_out(
        torch.empty(shape))


@pytest.mark.parametrize("name,param", [("linear", None), ("conv1d", None), ("conv2d", None), ("conv3d", None),
                                        ("conv_transpose2d", None), ("sigmoid", None), ("tanh", None),
                                        ("relu", None), ("selu", None), ("leaky_relu", None),
                                        ("leaky_relu", 0.2), ("leaky_relu", 0), ("leaky_relu", math.sqrt(5))])
def test_gain_matches_pytorch(name, param):
    assert init.calculate_gain(name, param) == pytest.approx(torch.nn.init.calculate_gain(name, param), rel=1e-15)


def _assert_stats(x, mean, std, bound=None):
    """Sample mean within 5 standard errors, sample std within 1.5% (~7 standard errors at this size)."""
    n = x.size
    assert abs(float(x.mean()) - mean) < 5 * std / math.sqrt(n)
    assert float(x.std()) == pytest.approx(std, rel=0.015)
    if bound is not None:  # uniform: inside [-bound, bound] and reaching close to both ends
        assert float(np.abs(x).max()) <= bound
        assert float(x.max()) > 0.999 * bound and float(x.min()) < -0.999 * bound


def test_uniform_and_normal_statistics():
    x = init.uniform_(_big(), _rng(), -0.5, 1.5)
    assert x.min() >= -0.5 and x.max() <= 1.5 and x.max() > 1.499 and x.min() < -0.499
    _assert_stats(x - 0.5, 0.0, 2.0 / math.sqrt(12))
    _assert_stats(init.normal_(_big(), _rng(), 3.0, 0.2) - 3.0, 0.0, 0.2)


@pytest.mark.parametrize("gain", [1.0, init.calculate_gain("relu")])
def test_xavier_statistics(gain):
    fan_in, fan_out = 96 * 9, 384 * 9
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    _assert_stats(init.xavier_uniform_(_big(), _rng(1), gain), 0.0, a / math.sqrt(3), bound=a)
    _assert_stats(init.xavier_normal_(_big(), _rng(2), gain), 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


@pytest.mark.parametrize("mode,fan", [("fan_in", 96 * 9), ("fan_out", 384 * 9)])
@pytest.mark.parametrize("a,nonlinearity", [(0.0, "relu"), (0.0, "leaky_relu"), (math.sqrt(5), "leaky_relu"),
                                            (0.0, "tanh")])
def test_kaiming_statistics(mode, fan, a, nonlinearity):
    std = init.calculate_gain(nonlinearity, a) / math.sqrt(fan)
    x = init.kaiming_uniform_(_big(), _rng(3), a=a, mode=mode, nonlinearity=nonlinearity)
    _assert_stats(x, 0.0, std, bound=math.sqrt(3) * std)
    _assert_stats(init.kaiming_normal_(_big(), _rng(4), a=a, mode=mode, nonlinearity=nonlinearity), 0.0, std)


@pytest.mark.parametrize("fn", ["xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_"])
def test_std_agrees_with_pytorch_samples(fn):
    ours = getattr(init, fn)(_big(), _rng(5))
    theirs = getattr(torch.nn.init, fn)(torch.empty(N_BIG), generator=torch.Generator().manual_seed(0)).numpy()
    assert ours.std() == pytest.approx(theirs.std(), rel=0.02)
    assert np.abs(ours).max() == pytest.approx(np.abs(theirs).max(), rel=0.02 if "uniform" in fn else 0.25)


@pytest.mark.parametrize("fn,kwargs", [("uniform_", {}), ("normal_", {}), ("xavier_uniform_", {}),
                                       ("xavier_normal_", {}), ("kaiming_uniform_", {"a": 1.0}),
                                       ("kaiming_normal_", {"mode": "fan_out"})])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_in_place_deterministic_and_seed_dependent(fn, kwargs, dtype):
    f = getattr(init, fn)
    x = np.empty((32, 16, 3), dtype)
    assert f(x, _rng(7), **kwargs) is x and x.dtype == dtype
    np.testing.assert_array_equal(x, f(np.empty_like(x), _rng(7), **kwargs))
    assert not np.array_equal(x, f(np.empty_like(x), _rng(8), **kwargs))


def test_constant_fills():
    x = np.full((3, 4), 7.0, np.float32)
    assert init.zeros_(x) is x and not x.any()
    assert (init.ones_(x) == 1).all()
    assert (init.constant_(x, -2.5) == -2.5).all()


def test_zero_element_arrays_are_a_no_op():
    for fn in (init.xavier_uniform_, init.xavier_normal_, init.kaiming_uniform_, init.kaiming_normal_):
        x = np.empty((0, 5), np.float32)
        assert fn(x, _rng()) is x


def test_errors():
    w = np.empty((4, 3), np.float32)
    with pytest.raises(ValueError, match="mode must be 'fan_in' or 'fan_out', got 'fan_avg'"):
        init.kaiming_uniform_(w, _rng(), mode="fan_avg")
    with pytest.raises(ValueError, match="mode must be 'fan_in' or 'fan_out'"):
        init.kaiming_normal_(w, _rng(), mode="in")
    for fn in (init.xavier_uniform_, init.xavier_normal_, init.kaiming_uniform_, init.kaiming_normal_):
        with pytest.raises(ValueError, match=r">= 2 dimensions, got shape \(5,\)"):
            fn(np.empty(5, np.float32), _rng())
        with pytest.raises(TypeError, match="floating-point numpy.ndarray, got ndarray of int64"):
            fn(np.zeros((2, 2), np.int64), _rng())
        with pytest.raises(TypeError, match="rng must be a numpy.random.Generator, got NoneType"):
            fn(w, None)
        with pytest.raises(TypeError, match="floating-point numpy.ndarray, got list"):
            fn([[0.0, 0.0]], _rng())
    with pytest.raises(ValueError, match=">= 2 dimensions"):
        init.calculate_fan_in_and_fan_out((7,))
    with pytest.raises(ValueError, match="nonlinearity must be one of"):
        init.kaiming_normal_(w, _rng(), nonlinearity="swish")
    with pytest.raises(ValueError, match="negative slope must be a number"):
        init.calculate_gain("leaky_relu", True)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator, got RandomState"):
        init.normal_(w, np.random.RandomState(0))
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        init.uniform_(w, None)
    with pytest.raises(ValueError, match="need a <= b"):
        init.uniform_(w, _rng(), 1.0, 0.0)
    with pytest.raises(ValueError, match="std must be >= 0"):
        init.normal_(w, _rng(), 0.0, -1.0)


def test_linear_default_init_matches_pytorch_formula():
    layer = nn.Linear(300, 500)
    bound = 1.0 / math.sqrt(300)  # kaiming_uniform_(a=sqrt(5)) and the bias rule of torch.nn.Linear
    ref = torch.nn.Linear(300, 500)
    for ours, theirs in ((layer.weight, ref.weight), (layer.bias, ref.bias)):
        theirs = theirs.detach().numpy()
        assert np.abs(ours).max() <= bound and np.abs(theirs).max() <= bound
        assert np.abs(ours).max() > 0.98 * bound
        assert ours.std() == pytest.approx(bound / math.sqrt(3), rel=0.1 if ours.ndim == 1 else 0.01)
        assert ours.std() == pytest.approx(theirs.std(), rel=0.15 if ours.ndim == 1 else 0.02)


def test_conv2d_default_init_matches_pytorch_formula():
    layer = nn.Conv2d(12, 64, kernel_size=3)
    bound = 1.0 / math.sqrt(12 * 9)
    w, b = layer.weight, layer.bias
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.98 * bound
    assert w.std() == pytest.approx(bound / math.sqrt(3), rel=0.03)
    assert np.abs(b).max() <= bound


def _mlp():
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))


def test_module_initialize_is_deterministic_and_seed_dependent():
    a, b = _mlp().initialize(11), _mlp().initialize(11)
    np.testing.assert_array_equal(a.flat_parameters, b.flat_parameters)
    first = a.flat_parameters.copy()
    a.initialize(11)
    np.testing.assert_array_equal(a.flat_parameters, first)  # re-initialising the same model repeats
    c = _mlp().initialize(12)
    assert not np.any(c.flat_parameters == first)
    sd = a.state_dict()  # same-shaped layers at different positions draw different values
    assert not np.array_equal(sd["2.weight"], sd["4.weight"])
    assert a.initialize(3) is a
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        a.initialize(-1)
