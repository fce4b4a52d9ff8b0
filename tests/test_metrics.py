"""Metrics: hand-worked values, merged partition states == whole-data state, errors."""
import functools

import numpy as np
import pytest

from sparkdl.metrics import MAE, MSE, BinaryAUC, Loss, Top1Accuracy, TopKAccuracy

sklearn_metrics = pytest.importorskip("sklearn.metrics")


def _partitioned(metric, output, target, cuts, tree="left"):
    """Update one state per partition (several batches each) and merge them."""
    bounds = [0, *cuts, len(target)]
    states = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        s = metric.zero()
        for b in range(lo, hi, 3):  # batches of 3 inside the partition
            s = metric.update(s, output[b:min(b + 3, hi)], target[b:min(b + 3, hi)])
        states.append(s)
    if tree == "left":
        return functools.reduce(metric.merge, states)
    while len(states) > 1:  # pairwise tree, like treeReduce
        states = [metric.merge(*states[i:i + 2]) if i + 1 < len(states) else states[i]
                  for i in range(0, len(states), 2)]
    return states[0]


def test_top1_hand_worked():
    out = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.3, 0.3, 0.4], [0.5, 0.5, 0.0]], np.float32)
    tgt = np.array([1, 2, 2, 1])  # hit, miss, hit, miss (tie -> lower index 0 wins)
    m = Top1Accuracy()
    assert m.name == "Top1Accuracy"
    s = m.update(m.zero(), out, tgt)
    assert s == {"total": 2, "count": 4}
    assert m.result(s) == 0.5


def test_top1_binary_single_column():
    out = np.array([[0.2], [0.7], [0.6], [0.1]], np.float32)
    assert Top1Accuracy().compute(out, np.array([0, 1, 0, 0])) == 0.75
    assert Top1Accuracy(threshold=0.0).compute(np.array([-1.0, 2.0, -0.5]), np.array([0, 1, 1])) == pytest.approx(2 / 3)


def test_topk_hand_worked_and_ties():
    out = np.array([[0.1, 0.5, 0.2, 0.2],   # target 2: rank 1 (0.2 ties 0.2 at index 3, lower index first)
                    [0.1, 0.5, 0.2, 0.2],   # target 3: rank 2 (tie with index 2 which comes first)
                    [0.9, 0.0, 0.05, 0.05]])  # target 1: rank 3
    tgt = np.array([2, 3, 1])
    assert TopKAccuracy(1).compute(out, tgt) == 0.0
    assert TopKAccuracy(2).compute(out, tgt) == pytest.approx(1 / 3)
    assert TopKAccuracy(3).compute(out, tgt) == pytest.approx(2 / 3)
    assert TopKAccuracy(4).compute(out, tgt) == 1.0
    assert TopKAccuracy(5).name == "Top5Accuracy"


def test_topk1_equals_top1():
    rng = np.random.default_rng(0)
    out = rng.integers(0, 3, (200, 5)).astype(np.float32)  # many ties
    tgt = rng.integers(0, 5, 200)
    assert TopKAccuracy(1).compute(out, tgt) == Top1Accuracy().compute(out, tgt)


@pytest.mark.parametrize("tree", ["left", "pairwise"])
def test_merge_equals_whole_accuracy(tree):
    rng = np.random.default_rng(1)
    out = rng.standard_normal((101, 7)).astype(np.float32)
    tgt = rng.integers(0, 7, 101)
    for m in (Top1Accuracy(), TopKAccuracy(3)):
        whole = m.update(m.zero(), out, tgt)
        merged = _partitioned(m, out, tgt, [10, 11, 50, 77], tree)
        assert merged == whole
        assert m.merge(m.zero(), whole) == whole
    ref = np.mean(np.argmax(out, 1) == tgt)
    assert Top1Accuracy().compute(out, tgt) == pytest.approx(ref)


def test_mae_mse_values_and_merge():
    out = np.array([[1.0], [2.0], [4.0]], np.float32)
    tgt = np.array([1.5, 2.0, 1.0], np.float32)  # (N,1) vs (N,) accepted
    assert MAE().compute(out, tgt) == pytest.approx((0.5 + 0 + 3) / 3)
    assert MSE().compute(out, tgt) == pytest.approx((0.25 + 0 + 9) / 3)
    rng = np.random.default_rng(2)
    o, t = rng.standard_normal((50, 4)), rng.standard_normal((50, 4))
    for m, ref in ((MAE(), np.abs(o - t).mean()), (MSE(), np.square(o - t).mean())):
        assert m.result(_partitioned(m, o, t, [5, 30])) == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("tree", ["left", "pairwise"])
def test_auc_exact_vs_sklearn_with_ties(seed, tree):
    rng = np.random.default_rng(seed)
    n = 307
    tgt = rng.integers(0, 2, n)
    # quantised scores -> many ties within and across partitions
    out = (np.round(rng.standard_normal(n) + tgt * 0.7, 1)).astype(np.float32)
    m = BinaryAUC()
    ref = sklearn_metrics.roc_auc_score(tgt, out)
    whole = m.update(m.zero(), out, tgt)
    assert m.result(whole) == pytest.approx(ref, rel=1e-12, abs=1e-15)
    merged = _partitioned(m, out, tgt, [1, 40, 41, 200], tree)
    for k in ("scores", "pos", "neg"):
        np.testing.assert_array_equal(merged[k], whole[k])
    assert m.result(merged) == m.result(whole)


def test_auc_shapes_and_hand_value():
    m = BinaryAUC()
    # pos scores {0.8, 0.4}, neg {0.4, 0.1}: pairs (0.8>0.4)(0.8>0.1)(0.4=0.4 -> 1/2)(0.4>0.1) = 3.5/4
    out = np.array([0.8, 0.4, 0.4, 0.1])
    tgt = np.array([1, 1, 0, 0])
    assert m.compute(out, tgt) == 0.875
    assert m.compute(out[:, None], tgt[:, None]) == 0.875
    two_col = np.stack([1 - out, out], axis=1)
    assert m.compute(two_col, tgt) == 0.875
    assert np.isnan(m.compute(out, np.ones(4, int)))  # one class only: undefined
    assert np.isnan(m.result(m.zero()))


class _SumLoss:  # stands in for a sparkdl loss: per-sample squared error
    def __init__(self, reduction):
        self.reduction = reduction

    def forward(self, x, t):
        s = float(np.square(x - t).sum())
        return (s / self.normalizer(t) if self.reduction == "mean" else s), None

    def normalizer(self, t):
        return t.size


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_loss_metric_is_whole_data_mean(reduction):
    rng = np.random.default_rng(3)
    o, t = rng.standard_normal((23, 2)), rng.standard_normal((23, 2))
    m = Loss(_SumLoss(reduction))
    assert m.name == "Loss"
    assert m.result(_partitioned(m, o, t, [4, 9])) == pytest.approx(np.square(o - t).mean(), rel=1e-12)


def test_empty_results_are_nan():
    for m in (Top1Accuracy(), TopKAccuracy(2), MAE(), MSE()):
        assert np.isnan(m.result(m.zero()))


def test_errors():
    out = np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match=r"target must have shape \(4,\)"):
        Top1Accuracy().compute(out, np.zeros(5, int))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        Top1Accuracy().compute(out, np.array([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="integer class indices"):
        TopKAccuracy(2).compute(out, np.array([0, 1.5, 2, 0]))
    with pytest.raises(ValueError, match=r"\(N, C\)"):
        TopKAccuracy(2).compute(np.zeros((4, 3, 2)), np.zeros(4, int))
    with pytest.raises(ValueError, match="k must be >= 1"):
        TopKAccuracy(0)
    with pytest.raises(TypeError, match="k must be an int"):
        TopKAccuracy(2.0)
    with pytest.raises(TypeError, match="numpy.ndarray"):
        Top1Accuracy().compute([[0.1, 0.9]], np.array([1]))
    with pytest.raises(ValueError, match="output shape"):
        MSE().compute(np.zeros((4, 2)), np.zeros((4, 3)))
    with pytest.raises(ValueError, match="output shape"):
        MAE().compute(np.zeros(4), np.zeros(5))
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        BinaryAUC().compute(np.zeros(3), np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="target must have shape"):
        BinaryAUC().compute(np.zeros(3), np.array([0, 1]))
    with pytest.raises(ValueError, match="NaN"):
        BinaryAUC().compute(np.array([0.1, np.nan]), np.array([0, 1]))
    with pytest.raises(TypeError, match="sparkdl loss"):
        Loss(object())


def test_update_does_not_mutate():
    m = BinaryAUC()
    s0 = m.update(m.zero(), np.array([0.1, 0.2]), np.array([0, 1]))
    copy = {k: v.copy() for k, v in s0.items()}
    m.update(s0, np.array([0.3]), np.array([1]))
    m.merge(s0, s0)
    for k in s0:
        np.testing.assert_array_equal(s0[k], copy[k])


def test_loss_metric_with_real_weighted_loss():
    loss_mod = pytest.importorskip("sparkdl.nn.loss")
    rng = np.random.default_rng(4)
    out = rng.standard_normal((31, 4)).astype(np.float32)
    tgt = rng.integers(0, 4, 31)
    ce = loss_mod.CrossEntropyLoss(weight=[1.0, 2.0, 0.5, 3.0])
    m = Loss(ce)
    # weighted mean = sum of weighted losses / sum of target weights, over all data, whatever the partition
    assert m.result(_partitioned(m, out, tgt, [7, 8, 20])) == pytest.approx(ce.forward(out, tgt)[0], rel=1e-12)
