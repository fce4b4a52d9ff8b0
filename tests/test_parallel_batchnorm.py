"""BatchNorm models with a training batch's rows split across threads: the parts exchange their statistics
(sparkdl.nn.row_parts), so the step equals the whole batch's to float rounding; which models split (the work rule)."""
import threading

import numba
import numpy as np
import pytest

import sparkdl.onnx
from sparkdl import nn
from sparkdl.config import get_num_threads, set_num_threads
from sparkdl.nn.row_parts import RowParts, current_part, row_part
from sparkdl.step import gradient_sum, rows_independent, rows_splittable, split_gradient_sum, sum_reduction
from sparkdl.step.threads import MIN_FLOPS_PER_SYNC, _splits, task_gradient_sum
from sparkdl.step.work import forward_flops_per_row

two_threads = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs a numba pool of 2 threads")


def _run_parts(parts, fn):
    """``fn(index)`` on ``parts.parts`` threads at once; their results in part order."""
    out = [None] * parts.parts
    errors = []

    def run(i):
        try:
            with row_part(parts, i):
                out[i] = fn(i)
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(1, parts.parts)]
    for t in threads:
        t.start()
    run(0)
    for t in threads:
        t.join(30)
    return out, errors


def test_row_parts_add_in_part_order_and_give_every_part_the_same_bits():
    parts = RowParts(3)
    values = [(np.array([1e16, 1.0]), 2.0), (np.array([1.0, 2.0]), 3.0), (np.array([-1e16, 3.0]), 4.0)]
    out, errors = _run_parts(parts, lambda i: [parts.sum(i, values[i]) for _ in range(4)])  # 4 rounds
    assert not errors
    expect = ((1e16 + 1.0) + -1e16, 6.0)  # in part order: 1.0 is lost to rounding, as ((v0 + v1) + v2) loses it
    for rounds in out:
        for s in rounds:
            np.testing.assert_array_equal(s[0], [expect[0], expect[1]])
            assert s[1] == 9.0
    got, _ = _run_parts(RowParts(2), lambda i: current_part()[1])
    assert got == [0, 1] and current_part() is None


def test_a_failing_part_releases_the_others():
    parts = RowParts(2)

    def fn(i):
        if i == 1:
            raise ValueError("part 1 failed")
        return parts.sum(i, (np.zeros(2),))  # would wait forever without the abort
    _, errors = _run_parts(parts, fn)
    assert sorted(type(e).__name__ for e in errors) == ["BrokenBarrierError", "ValueError"]
    with pytest.raises(ValueError, match="parts must be an integer >= 2, got 1"):
        RowParts(1)


def test_forward_flops_per_row_follows_the_spatial_size():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 4, 1), nn.Flatten(), nn.Linear(64, 10))
    # 8x8 conv 3->8 3x3: 2*8*3*9*64; pool -> 4x4; 1x1 conv 8->4: 2*4*8*16; Linear 64->10: 2*64*10
    assert forward_flops_per_row(model, (3, 8, 8)) == 2 * 8 * 3 * 9 * 64 + 2 * 4 * 8 * 16 + 2 * 64 * 10
    strided = nn.Sequential(nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=4), nn.AdaptiveAvgPool2d(1),
                            nn.Flatten(), nn.Linear(4, 2))
    assert forward_flops_per_row(strided, (4, 9, 9)) == 2 * 4 * 1 * 9 * 25 + 2 * 4 * 2  # 9x9 -> 5x5, depthwise
    assert forward_flops_per_row(nn.Sequential(nn.Linear(5, 3), nn.ReLU()), (5,)) == 30


def _bn_cnn(seed=0, dtype=np.float32):
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Residual(nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16, momentum=None))),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 12), nn.BatchNorm1d(12),
                         nn.ReLU(), nn.Linear(12, 5)).astype(dtype).initialize(seed)


@two_threads
@pytest.mark.parametrize("threads", [2, 3])
def test_split_batchnorm_step_equals_the_whole_batch(threads):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((50, 3, 8, 8)) * 3 + 1, rng.integers(0, 5, 50)
    loss = sum_reduction(nn.CrossEntropyLoss())
    whole, split = _bn_cnn(dtype=np.float64), _bn_cnn(dtype=np.float64)
    g_whole, g_split = whole.zeros_like_parameters(), split.zeros_like_parameters()
    for _ in range(2):  # twice: the running statistics' second update builds on the first
        value = split_gradient_sum(split, loss, x, y, g_split, threads)
        whole_value, _ = gradient_sum(whole, loss, x, y, None, g_whole)
        np.testing.assert_allclose(g_split, g_whole, rtol=1e-10, atol=1e-12)
        assert value == pytest.approx(whole_value, rel=1e-12)
        # running mean, variance (unbiased, from the whole batch's count) and batch counters: updated once
        np.testing.assert_allclose(split.flat_buffers, whole.flat_buffers, rtol=1e-12, atol=1e-14)
    again = split.zeros_like_parameters()
    split_gradient_sum(_bn_cnn(dtype=np.float64), loss, x, y, again, threads)
    split_gradient_sum(_bn_cnn(dtype=np.float64), loss, x, y, g_split, threads)
    np.testing.assert_array_equal(again, g_split)  # reproducible bit for bit


def _se_graph():
    """A squeeze-excitation block as PyTorch's exporter writes it: the scale multiplied by an ONNX Mul node."""
    return nn.Graph("x", [
        ("conv", nn.Conv2d(3, 8, 3, padding=1), "x"), ("bn", nn.BatchNorm2d(8), "conv"), ("act", nn.ReLU(), "bn"),
        ("pool", nn.AdaptiveAvgPool2d(1), "act"), ("gate", nn.Hardsigmoid(), "pool"),
        ("scale", nn.OnnxOp("Mul", inputs=["x", "x"]), ["act", "gate"]), ("flat", nn.Flatten(), "scale"),
        ("fc", nn.Linear(8 * 64, 4), "flat")], "fc")


def test_which_models_split():
    bn = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    assert rows_splittable(bn) and not rows_independent(bn)
    assert rows_splittable(_se_graph()) and not rows_independent(_se_graph())
    assert rows_independent(nn.Graph("x", [("a", nn.Linear(4, 4), "x"), ("r", nn.ReLU6(), "a")], "r"))
    fixed = nn.Graph("x", [("a", nn.Linear(4, 4), "x")], "a", batch_size=8)
    assert not rows_splittable(fixed)  # its nodes compute exactly 8 rows
    constant = nn.OnnxOp("Mul", inputs=["x", {"tensor": "w"}], buffers={"w": (4,)})
    assert not rows_splittable(nn.Graph("x", [("m", constant, "x")], "m"))  # the constant may carry the batch
    reshape = nn.OnnxOp("Reshape", inputs=["x", {"value": [-1], "dtype": "int64"}])
    assert not rows_splittable(nn.Graph("x", [("r", reshape, "x")], "r"))

    class MyNorm(nn.BatchNorm2d):  # a subclass may redefine forward: never split
        pass
    assert not rows_splittable(nn.Sequential(nn.Conv2d(3, 4, 3), MyNorm(4)))


def test_batchnorm_models_split_only_with_enough_work_per_layer():
    loss = sum_reduction(nn.CrossEntropyLoss())
    model = _bn_cnn()
    syncs = 3  # BatchNorm layers
    x = np.zeros((64, 3, 8, 8), np.float32)
    per_row = forward_flops_per_row(model, (3, 8, 8))
    assert 32 * per_row < MIN_FLOPS_PER_SYNC * syncs and not _splits(model, loss, x, 2)  # 32 rows: too little
    big = np.zeros((64, 3, 112, 112), np.float32)
    assert 32 * forward_flops_per_row(model, (3, 112, 112)) >= MIN_FLOPS_PER_SYNC * syncs
    assert _splits(model, loss, big, 2) and not _splits(model, loss, big, 1)
    assert _splits(nn.Sequential(nn.Flatten(), nn.Linear(192, 4)), loss, x, 2)  # no BatchNorm: rows suffice


@two_threads
def test_an_error_in_a_batchnorm_part_is_raised_without_waiting(monkeypatch):
    monkeypatch.setattr("sparkdl.step.threads.MIN_FLOPS_PER_SYNC", 0)  # split this small model
    model, loss = _bn_cnn(), sum_reduction(nn.CrossEntropyLoss())
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((40, 3, 8, 8)).astype(np.float32), rng.integers(0, 5, 40)
    y[30] = 7  # out of range, in part 1 (rows 20-39): part 0 waits for it in the first BatchNorm's backward
    previous = get_num_threads()
    try:
        set_num_threads(2)
        with pytest.raises(ValueError, match="30"):
            task_gradient_sum(model, loss, x, y, None, model.zeros_like_parameters())
    finally:
        set_num_threads(previous)


@two_threads
def test_imported_squeeze_excitation_graph_splits_like_the_whole_batch(tmp_path):
    graph = _se_graph().initialize(3)
    path = str(tmp_path / "se.onnx")
    sparkdl.onnx.save(graph, path, input_shape=(3, 8, 8))
    whole, split = sparkdl.onnx.load(path), sparkdl.onnx.load(path)
    assert rows_splittable(split)
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((40, 3, 8, 8)).astype(np.float32), rng.integers(0, 4, 40)
    loss = sum_reduction(nn.CrossEntropyLoss())
    g_whole, g_split = whole.zeros_like_parameters(), split.zeros_like_parameters()
    gradient_sum(whole, loss, x, y, None, g_whole)
    previous = get_num_threads()
    try:
        set_num_threads(2)
        split_gradient_sum(split, loss, x, y, g_split, 2)
    finally:
        set_num_threads(previous)
    np.testing.assert_allclose(g_split, g_whole, rtol=2e-4, atol=2e-5 * np.abs(g_whole).max())
    np.testing.assert_allclose(split.flat_buffers, whole.flat_buffers, rtol=1e-5, atol=1e-6)


def test_too_few_rows_for_the_parts_is_an_error_not_a_wait():
    """A one-row part of a BatchNorm1d batch would skip the exchange its partner waits in: refused up front."""
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2)).initialize(0)
    x, y = np.ones((3, 4), np.float32), np.array([0, 1, 0])
    with pytest.raises(ValueError, match="3 rows cannot make 2 parts of at least 2 rows each"):
        split_gradient_sum(model, sum_reduction(nn.CrossEntropyLoss()), x, y, model.zeros_like_parameters(), 2)
