"""SampleWeightedLoss over every registry loss case: weights of 1 give the loss itself, an integer weight k equals
k copies of the sample (value and gradient), float64 gradient check, and the target/weight contract."""
import numpy as np
import pytest

from sparkdl.nn import loss as L
from tests.cases import all_loss_cases
from tests.gradcheck import numeric_grad

def _per_row_weight(case):
    """BCE weights with one entry per row do not apply to other batch sizes."""
    loss = case.make()
    return isinstance(loss, (L.BCELoss, L.BCEWithLogitsLoss)) and loss.weight is not None and \
        loss.weight.ndim == case.inputs(np.random.default_rng(0))[0].ndim


CASES = [c for c in all_loss_cases() if not _per_row_weight(c)]
ids = [c.id for c in CASES]


def _weighted(case, reduction, t):
    return L.SampleWeightedLoss(case.make(), t.shape[1:], t.dtype.name, reduction=reduction)


def _pack(t, w):
    return np.concatenate([t.reshape(len(t), -1).astype(np.float64), w[:, None]], axis=1)


def _inputs(case, seed):
    x, t = case.inputs(np.random.default_rng(seed))
    return x.astype(np.float64), (t.astype(np.float64) if t.dtype.kind == "f" else t)


@pytest.mark.parametrize("case", CASES, ids=ids)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_unit_weights_equal_the_loss(case, reduction):
    x, t = _inputs(case, 0)
    base = type(case.make())(**{**case.make().get_config(), "reduction": reduction})
    loss = _weighted(case, reduction, t)
    packed = _pack(t, np.ones(len(t)))
    value, cache = loss.forward(x, packed)
    ref, ref_cache = base.forward(x, t)
    assert value == pytest.approx(ref, rel=1e-12, abs=1e-14)
    assert loss.normalizer(packed) == base.normalizer(t)
    np.testing.assert_allclose(loss.backward(cache, 0.7), base.backward(ref_cache, 0.7), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("case", CASES, ids=ids)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_integer_weight_equals_copies_of_the_sample(case, reduction):
    x, t = _inputs(case, 1)
    k = np.random.default_rng(2).integers(0, 4, len(x))
    k[0] = max(k[0], 1)
    base = type(case.make())(**{**case.make().get_config(), "reduction": reduction})
    idx = np.repeat(np.arange(len(x)), k)
    ref, ref_cache = base.forward(x[idx], t[idx])
    ref_grad = np.zeros_like(x)
    np.add.at(ref_grad, idx, base.backward(ref_cache, 1.0))
    loss = _weighted(case, reduction, t)
    value, cache = loss.forward(x, _pack(t, k.astype(np.float64)))
    if np.isnan(ref):
        assert np.isnan(value)
        return
    assert value == pytest.approx(ref, rel=1e-10)
    np.testing.assert_allclose(loss.backward(cache, 1.0), ref_grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_gradcheck_float64(case):
    x, t = _inputs(case, 3)
    w = np.random.default_rng(4).uniform(0.1, 3.0, len(x))
    loss = _weighted(case, "mean", t)
    packed = _pack(t, w)
    value, cache = loss.forward(x, packed)
    num = numeric_grad(lambda: loss.forward(x, packed)[0], x)
    np.testing.assert_allclose(loss.backward(cache, 1.3), 1.3 * num, rtol=1e-6, atol=1e-8)


def test_weighted_mean_is_pysparks_convention():
    x = np.array([[0.0], [1.0], [3.0]])
    y = np.zeros((3, 1))
    w = np.array([1.0, 2.0, 0.5])
    loss = L.SampleWeightedLoss(L.MSELoss(), (1,), "float64")
    assert loss(x, _pack(y, w)) == pytest.approx((0 + 2 * 1 + 0.5 * 9) / 3.5)


def test_target_and_weight_contract():
    loss = L.SampleWeightedLoss(L.CrossEntropyLoss(), (), "int64")
    x = np.zeros((2, 3))
    with pytest.raises(ValueError, match=r"target must have shape \(N, 2\)"):
        loss(x, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="sample weights must be finite and >= 0, got -1.0 for sample 1"):
        loss(x, np.array([[0, 1.0], [2, -1.0]]))
    again = L.LOSS_REGISTRY["SampleWeightedLoss"].from_config(loss.get_config())
    packed = np.array([[0, 1.0], [2, 3.0]])
    assert again(x + np.eye(2, 3), packed) == loss(x + np.eye(2, 3), packed)
