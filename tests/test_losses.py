"""Losses: float64 gradient check, PyTorch parity, mean == sum / normalizer, large-logit stability against a
float64 numpy reference, batch 1, persistence config, and the error contract."""
import json

import numpy as np
import pytest
from scipy.special import expit, log_softmax

from sparkdl.nn import loss as L
from tests.cases import all_loss_cases
from tests.gradcheck import numeric_grad

torch = pytest.importorskip("torch")
CASES = all_loss_cases()
ids = [c.id for c in CASES]


def _inputs(case, seed=0):
    return case.inputs(np.random.default_rng(seed))


def _with(loss, **changes):
    return type(loss)(**{**loss.get_config(), **changes})


def _as64(t):
    return t.astype(np.float64) if t.dtype.kind == "f" else t


# ---------------------------------------------------------------------------------------- numpy reference
def _ref_elementwise(loss, x, t):
    """Per-element (losses, d losses / d x) in float64, written from the textbook formulas."""
    name, d = type(loss).__name__, x - t
    if name == "MSELoss":
        return d * d, 2 * d
    if name == "L1Loss":
        return np.abs(d), np.sign(d)
    if name == "SmoothL1Loss":
        b, a = loss.beta, np.abs(d)
        if b == 0:
            return a, np.sign(d)
        return np.where(a < b, 0.5 * d * d / max(b, 1e-300), a - 0.5 * b), np.where(a < b, d / max(b, 1e-300), np.sign(d))
    if name == "BCELoss":
        w = 1.0 if loss.weight is None else loss.weight
        log_p = np.maximum(np.log(np.where(x > 0, x, 1e-300)), -100.0)
        log_q = np.maximum(np.log(np.where(x < 1, 1 - x, 1e-300)), -100.0)
        return -w * (t * log_p + (1 - t) * log_q), w * (x - t) / np.maximum(x * (1 - x), 1e-12)
    assert name == "BCEWithLogitsLoss"
    pw = 1.0 if loss.pos_weight is None else loss.pos_weight
    w = 1.0 if loss.weight is None else loss.weight
    log_sig, log_one_minus = -np.logaddexp(0, -x), -np.logaddexp(0, x)
    per = -w * (pw * t * log_sig + (1 - t) * log_one_minus)
    return per, -w * (pw * t * (1 - expit(x)) - (1 - t) * expit(x))


def _ref_class(loss, x, y):
    c = x.shape[1]
    z = np.moveaxis(x, 1, -1).reshape(-1, c)
    y = y.reshape(-1)
    w = np.ones(c) if loss.weight is None else loss.weight
    valid = y != loss.ignore_index
    yv = np.where(valid, y, 0)
    rows = np.arange(y.size)
    logp = z if isinstance(loss, L.NLLLoss) else log_softmax(z, axis=1)
    eps = getattr(loss, "label_smoothing", 0.0)
    target = np.zeros_like(z)
    target[rows, yv] = (1 - eps) * w[yv]
    target += eps / c * w
    target[~valid] = 0
    per = -(target * logp).sum(1)
    grad = -target if isinstance(loss, L.NLLLoss) else np.exp(logp) * target.sum(1, keepdims=True) - target
    grad = np.moveaxis(grad.reshape(x.shape[:1] + x.shape[2:] + (c,)), -1, 1)
    return per, float(w[yv][valid].sum()), grad


def reference(loss, x, t):
    """(value, grad) of ``loss`` in float64 numpy, for reduction 'mean' or 'sum'."""
    x = x.astype(np.float64)
    if isinstance(loss, (L.CrossEntropyLoss, L.NLLLoss)):
        per, norm, grad = _ref_class(loss, x, t)
    else:
        per, grad = _ref_elementwise(loss, x, t.astype(np.float64))
        norm = float(x.size)
    scale = 1.0 / norm if loss.reduction == "mean" else 1.0
    return float(per.sum()) * scale, grad * scale


# ---------------------------------------------------------------------------------------- generic checks
@pytest.mark.parametrize("case", CASES, ids=ids)
def test_gradcheck_float64(case):
    x, t = _inputs(case, 1)
    x, t = x.astype(np.float64), _as64(t)
    loss = case.make()
    value, cache = loss.forward(x, t)
    assert isinstance(value, float)
    grad = loss.backward(cache, 1.7)
    assert grad.shape == x.shape and grad.dtype == np.float64
    num = numeric_grad(lambda: loss.forward(x, t)[0], x)
    np.testing.assert_allclose(grad, 1.7 * num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_gradcheck_float64_reduction_none(case):
    x, t = _inputs(case, 2)
    x, t = x.astype(np.float64), _as64(t)
    loss = _with(case.make(), reduction="none")
    value, cache = loss.forward(x, t)
    r = np.random.default_rng(5).standard_normal(value.shape)
    grad = loss.backward(cache, r)
    np.testing.assert_allclose(grad, numeric_grad(lambda: float(np.sum(loss.forward(x, t)[0] * r)), x),
                               rtol=1e-6, atol=1e-8)


def _torch_run(case, x, t, reduction=None, upstream=None):
    tm = case.torch_make()
    if reduction is not None:
        tm.reduction = reduction
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    tt = case.torch_target(t) if case.torch_target else torch.from_numpy(t)
    out = tm(xt, tt)
    out.backward(torch.from_numpy(upstream) if upstream is not None else None)
    return out.detach().numpy(), xt.grad.numpy()


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_matches_pytorch(case):
    x, t = _inputs(case, 3)
    loss = case.make()
    value, cache = loss.forward(x, t)
    grad = loss.backward(cache)
    tv, tg = _torch_run(case, x, t)
    assert value == pytest.approx(float(tv), rel=case.rtol, abs=case.atol)
    assert grad.dtype == np.float32 and grad.shape == x.shape
    np.testing.assert_allclose(grad, tg, rtol=case.rtol, atol=case.atol)
    assert loss(x, t) == value


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_matches_pytorch_reduction_none(case):
    x, t = _inputs(case, 4)
    loss = _with(case.make(), reduction="none")
    value, cache = loss.forward(x, t)
    upstream = np.random.default_rng(6).standard_normal(value.shape).astype(np.float32)
    grad = loss.backward(cache, upstream)
    tv, tg = _torch_run(case, x, t, "none", upstream)
    assert value.dtype == np.float32 and value.shape == tv.shape
    np.testing.assert_allclose(value, tv, rtol=case.rtol, atol=case.atol)
    np.testing.assert_allclose(grad, tg, rtol=case.rtol, atol=case.atol)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_batch_of_one_matches_pytorch(case):
    x, t = _inputs(case, 7)
    x, t = np.ascontiguousarray(x[:1]), np.ascontiguousarray(t[:1])
    loss = case.make()
    if isinstance(loss, (L.BCEWithLogitsLoss, L.BCELoss)) and loss.weight is not None and loss.weight.ndim == x.ndim:
        pytest.skip("a per-row BCE weight of length N does not apply to one row")
    value, cache = loss.forward(x, t)
    tv, tg = _torch_run(case, x, t)
    if np.isnan(tv):  # the single target is ignored: 0 / 0 as in PyTorch
        assert np.isnan(value)
    else:
        assert value == pytest.approx(float(tv), rel=case.rtol, abs=case.atol)
    np.testing.assert_allclose(loss.backward(cache), tg, rtol=case.rtol, atol=case.atol)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_mean_equals_sum_over_normalizer_exactly(case):
    x, t = _inputs(case, 8)
    mean, total = _with(case.make(), reduction="mean"), _with(case.make(), reduction="sum")
    norm = mean.normalizer(t)
    assert isinstance(norm, float) and norm > 0 and total.normalizer(t) == norm
    assert mean(x, t) == total(x, t) / norm
    gm = mean.backward(mean.forward(x, t)[1], 2.0)
    gs = total.backward(total.forward(x, t)[1], 2.0)
    np.testing.assert_allclose(gm * norm, gs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_matches_numpy_reference(case):
    x, t = _inputs(case, 9)
    loss = case.make()
    value, cache = loss.forward(x.astype(np.float64), _as64(t))
    ref_value, ref_grad = reference(loss, x, t)
    assert value == pytest.approx(ref_value, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(loss.backward(cache), ref_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_large_logits_are_finite_and_exact(case):
    x, t = _inputs(case, 10)
    x = (x * 1e4).astype(np.float32)
    if isinstance(case.make(), L.NLLLoss):
        x = np.minimum(x, 0)  # log-probabilities are <= 0
    if isinstance(case.make(), L.BCELoss):
        x = np.clip(x - 5e3, 0, 1)  # probabilities saturated at exactly 0 and 1: the log clamp at -100
    loss = case.make()
    value, cache = loss.forward(x, t)
    grad = loss.backward(cache)
    ref_value, ref_grad = reference(loss, x, t)
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    assert value == pytest.approx(ref_value, rel=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-6 * np.abs(ref_grad).max())


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_config_round_trip(case):
    loss = case.make()
    config = json.loads(json.dumps(loss.get_config()))
    again = L.LOSS_REGISTRY[type(loss).__name__].from_config(config)
    x, t = _inputs(case, 11)
    assert again(x, t) == loss(x, t) and again.get_config() == loss.get_config()
    assert repr(again) == repr(loss)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_non_float_input_is_type_error(case):
    x, t = _inputs(case)
    loss = case.make()
    for bad in (x.astype(np.int64), x.astype(np.float16)):
        with pytest.raises(TypeError, match="input dtype must be float32 or float64"):
            loss.forward(bad, t)
    with pytest.raises(TypeError, match="numpy.ndarray"):
        loss.forward(x.tolist(), t)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_input_is_not_modified(case):
    x, t = _inputs(case)
    x0, t0 = x.copy(), t.copy()
    loss = case.make()
    loss.backward(loss.forward(x, t)[1])
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(t, t0)


# ---------------------------------------------------------------------------------------- specific values
def test_bce_probabilities_saturated_match_pytorch_clamp():
    p = np.array([0.0, 1.0, 0.0, 1.0, 1e-30, 1 - 2 ** -24, 0.5], np.float32)
    t = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0], np.float32)
    loss = L.BCELoss(reduction="none")
    value, cache = loss.forward(p, t)
    grad = loss.backward(cache, np.ones(7))
    tp, tt = torch.tensor(p, requires_grad=True), torch.tensor(t)
    ref = torch.nn.BCELoss(reduction="none")(tp, tt)
    ref.sum().backward()
    np.testing.assert_allclose(value, ref.detach().numpy(), rtol=1e-6)
    np.testing.assert_array_equal(value[:4], [100.0, 100.0, 0.0, 0.0])
    np.testing.assert_allclose(grad, tp.grad.numpy(), rtol=1e-5)
    assert np.isfinite(grad).all()


def test_bce_probabilities_outside_unit_interval_is_error():
    with pytest.raises(ValueError, match=r"BCELoss: input must hold probabilities in \[0, 1\], got input\[1\] = 1.5"):
        L.BCELoss()(np.array([0.5, 1.5], np.float32), np.array([1.0, 0.0], np.float32))
    with pytest.raises(ValueError, match=r"input\[0\] = nan.*BCEWithLogitsLoss"):
        L.BCELoss()(np.array([np.nan], np.float32), np.array([1.0], np.float32))


def test_cross_entropy_extreme_logits_exact():
    x = np.array([[1e4, 0.0, -1e4], [-1e4, 1e4, 0.0]], np.float32)
    loss = L.CrossEntropyLoss(reduction="none")
    np.testing.assert_array_equal(loss(x, np.array([0, 1])), [0.0, 0.0])
    np.testing.assert_array_equal(loss(x, np.array([2, 0])), [2e4, 2e4])
    value, cache = L.CrossEntropyLoss().forward(x, np.array([2, 0]))
    assert value == 2e4
    np.testing.assert_array_equal(L.CrossEntropyLoss().backward(cache), [[0.5, 0, -0.5], [-0.5, 0.5, 0]])


def test_bce_with_logits_extreme_logits_exact():
    x = np.array([1e4, -1e4, 1e4, -1e4, 0.0], np.float32)
    t = np.array([1, 0, 0, 1, 1], np.float32)
    loss = L.BCEWithLogitsLoss(reduction="none")
    np.testing.assert_allclose(loss(x, t), [0, 0, 1e4, 1e4, np.log(2)], rtol=1e-7)
    value, cache = L.BCEWithLogitsLoss(reduction="sum").forward(x, t)
    np.testing.assert_allclose(L.BCEWithLogitsLoss(reduction="sum").backward(cache), [0, 0, 1, -1, -0.5])


def test_normalizers():
    y = np.array([0, 2, 2, -100, 1])
    assert L.CrossEntropyLoss().normalizer(y) == 4.0
    assert L.CrossEntropyLoss(weight=[0.5, 2.0, 0.25]).normalizer(y) == 0.5 + 0.25 + 0.25 + 2.0
    assert L.NLLLoss(ignore_index=2).normalizer(y) == 3.0  # -100 is a (bad) label here, but not counted out
    assert L.CrossEntropyLoss().normalizer(np.zeros((3, 4, 5), np.int64)) == 60.0
    assert L.MSELoss().normalizer(np.zeros((3, 4), np.float32)) == 12.0
    assert L.BCEWithLogitsLoss(weight=[1.0, 5.0]).normalizer(np.zeros((3, 2))) == 6.0


def test_all_targets_ignored_gives_nan_mean_and_zero_grad_like_pytorch():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    y = np.full(3, -100)
    loss = L.CrossEntropyLoss()
    value, cache = loss.forward(x, y)
    assert np.isnan(value)
    np.testing.assert_array_equal(loss.backward(cache), np.zeros_like(x))
    assert L.CrossEntropyLoss(reduction="sum")(x, y) == 0.0


def test_uint_and_int32_labels_accepted():
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    y = np.array([0, 2, 1, 1])
    ref = L.CrossEntropyLoss()(x, y)
    assert L.CrossEntropyLoss()(x, y.astype(np.uint8)) == ref
    assert L.CrossEntropyLoss()(x, y.astype(np.int32)) == ref


def test_regression_target_dtype_is_converted():
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    t = np.random.default_rng(1).integers(0, 2, (4, 3))
    loss = L.BCEWithLogitsLoss()
    assert loss(x, t) == loss(x, t.astype(np.float32)) == loss(x, t.astype(np.float64))
    assert loss.backward(loss.forward(x, t)[1]).dtype == np.float32


# ---------------------------------------------------------------------------------------- errors
def _xy(n=4, c=5):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, c)).astype(np.float32), rng.integers(0, c, n)


@pytest.mark.parametrize("cls", [L.CrossEntropyLoss, L.NLLLoss])
def test_class_losses_reject_bad_targets(cls):
    x, y = _xy()
    with pytest.raises(TypeError, match=rf"{cls.__name__}: target must hold integer class indices.*float32"):
        cls()(x, y.astype(np.float32))
    with pytest.raises(TypeError, match="target must be a numpy.ndarray"):
        cls()(x, list(y))
    bad = y.copy()
    bad[[1, 3]] = [7, 9]
    with pytest.raises(ValueError, match=r"target\[1\] = 7 is not a class index in \[0, 4\]"):
        cls()(x, bad)
    bad[1] = -1
    with pytest.raises(ValueError, match=r"target\[1\] = -1 "):
        cls()(x, bad)
    with pytest.raises(ValueError, match=r"target\[0\] = -100 .*ignore_index=3"):
        cls(ignore_index=3)(x, np.array([-100, 0, 0, 0]))
    spatial = np.zeros((2, 3, 4), np.int64)
    spatial[1, 2, 0] = 5
    with pytest.raises(ValueError, match=r"target\[1, 2, 0\] = 5"):
        cls()(np.zeros((2, 5, 3, 4), np.float32), spatial)
    with pytest.raises(ValueError, match=r"target\[1, 2\] = 5 .*C = len\(weight\)"):
        cls(weight=[1.0] * 5).normalizer(np.array([[0, 1, 2], [3, 4, 5]]))
    for target in (y[:3], y[:, None], np.zeros((4, 2), np.int64)):
        with pytest.raises(ValueError, match=r"target shape must be \(4,\)"):
            cls()(x, target)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        cls()(x[0], y[:1])


@pytest.mark.parametrize("cls", [L.CrossEntropyLoss, L.NLLLoss])
def test_class_weight_validation(cls):
    x, y = _xy()
    with pytest.raises(ValueError, match=r"weight has 3 entries but the input has C = 5 classes"):
        cls(weight=[1.0, 2.0, 3.0])(x, y % 3)
    for weight in ([[1.0, 2.0]], [], [1.0, np.nan]):
        with pytest.raises(ValueError, match="weight must be a non-empty 1-D array of finite floats"):
            cls(weight=weight)
    with pytest.raises(TypeError, match="weight must be a 1-D sequence of floats"):
        cls(weight=["a", "b"])
    with pytest.raises(TypeError, match="ignore_index must be an int"):
        cls(ignore_index=1.5)


@pytest.mark.parametrize("cls", [L.MSELoss, L.L1Loss, L.SmoothL1Loss, L.BCEWithLogitsLoss])
def test_elementwise_losses_never_broadcast(cls):
    x = np.zeros((4, 1), np.float32)
    for target in (np.zeros(4, np.float32), np.zeros((4, 2), np.float32), np.zeros((1, 4), np.float32)):
        with pytest.raises(ValueError, match=r"target shape .* must equal input shape \(4, 1\) \(no broadcasting"):
            cls()(x, target)
    with pytest.raises(TypeError, match="target must be a real-valued numpy.ndarray"):
        cls()(x, x.astype(np.complex64))
    with pytest.raises(TypeError, match="target must be a real-valued numpy.ndarray"):
        cls()(x, [[0.0]] * 4)
    with pytest.raises(ValueError, match="at least 1 dimensions"):
        cls()(np.ones((), np.float32), np.ones((), np.float32))


def test_bce_weight_validation():
    x = np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match=r"pos_weight has 2 entries but the input's last axis has C = 3"):
        L.BCEWithLogitsLoss(pos_weight=[1.0, 2.0])(x, x)
    with pytest.raises(ValueError, match=r"weight of shape \(2,\) does not broadcast to the input shape \(4, 3\)"):
        L.BCEWithLogitsLoss(weight=[1.0, 2.0])(x, x)
    with pytest.raises(ValueError, match=r"weight of shape \(8, 3\) does not broadcast"):  # would enlarge the loss
        L.BCEWithLogitsLoss(weight=np.ones((8, 3)))(x, x)
    with pytest.raises(ValueError, match="weight must be finite"):
        L.BCEWithLogitsLoss(weight=[np.inf, 1.0, 1.0])


@pytest.mark.parametrize("cls", [L.CrossEntropyLoss, L.NLLLoss, L.MSELoss, L.L1Loss, L.SmoothL1Loss,
                                 L.BCEWithLogitsLoss])
def test_invalid_reduction(cls):
    with pytest.raises(ValueError, match=rf"{cls.__name__}: reduction must be one of .*got 'avg'"):
        cls(reduction="avg")


def test_invalid_hyperparameters():
    for eps in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\]"):
            L.CrossEntropyLoss(label_smoothing=eps)
    with pytest.raises(TypeError, match="label_smoothing must be a float"):
        L.CrossEntropyLoss(label_smoothing="0.1")
    for beta in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="beta must be >= 0"):
            L.SmoothL1Loss(beta=beta)
    with pytest.raises(TypeError, match="beta must be a float"):
        L.SmoothL1Loss(beta=None)


def test_backward_grad_argument_validation():
    x, y = _xy()
    loss = L.CrossEntropyLoss()
    _, cache = loss.forward(x, y)
    with pytest.raises(TypeError, match=r"grad must be a real scalar for reduction='mean'"):
        loss.backward(cache, np.ones(4))
    np.testing.assert_allclose(loss.backward(cache, np.float64(3.0)), 3 * loss.backward(cache), rtol=1e-6)
    none = L.CrossEntropyLoss(reduction="none")
    _, cache = none.forward(x, y)
    with pytest.raises(ValueError, match=r"grad must be a scalar or have the loss shape \(4,\)"):
        none.backward(cache, np.ones(5))
    np.testing.assert_allclose(none.backward(cache, 2.0), none.backward(cache, np.full(4, 2.0)))
