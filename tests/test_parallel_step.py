"""Rows of a training step split across threads (sparkdl.step.threads): which models, and the same gradients."""
import numba
import numpy as np
import pytest

from sparkdl import nn
from sparkdl.config import get_num_threads, set_num_threads
from sparkdl.models import lenet5, mlp
from sparkdl.step import (MIN_ROWS_PER_THREAD, gradient_sum, rows_independent, split_gradient_sum, sum_reduction,
                          task_gradient_sum)

two_threads = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs a numba pool of 2 threads")


def test_only_models_with_independent_rows_are_split():
    assert rows_independent(lenet5()) and rows_independent(mlp()) and rows_independent(mlp(dropout=0.1))
    assert not rows_independent(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)))  # batch statistics
    assert not rows_independent(nn.Sequential(nn.Flatten(0), nn.Linear(8, 2)))  # merges the batch axis
    assert not rows_independent(nn.Sequential(nn.Linear(8, 2), nn.Flatten(-2)))  # may reach the batch axis
    # attention and recurrences couple positions along their time axis: split only when the batch is axis 0
    assert rows_independent(nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True))
    assert not rows_independent(nn.TransformerEncoderLayer(8, 2, dim_feedforward=16))
    assert not rows_independent(nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2))
    assert rows_independent(nn.TransformerClassifier(20, 3, max_length=8, d_model=8, nhead=2))
    for rnn in (nn.RNN, nn.LSTM, nn.GRU):
        assert rows_independent(nn.Sequential(nn.SequenceLengths(), nn.Embedding(9, 4),
                                              rnn(4, 4, num_layers=2, dropout=0.2, batch_first=True), nn.RNNOutput()))
        assert not rows_independent(nn.Sequential(rnn(4, 4), nn.RNNOutput()))
    assert not rows_independent(nn.Sequential(nn.MultiheadAttention(8, 2), nn.Flatten(), nn.Linear(8, 2)))
    assert rows_independent(mlp(), nn.CrossEntropyLoss(reduction="sum"))
    assert rows_independent(mlp(), nn.loss.SampleWeightedLoss(nn.MSELoss(), target_shape=(10,)))

    class InBatchLoss(nn.MSELoss):  # a user loss may couple the rows: never split
        pass
    assert not rows_independent(mlp(), InBatchLoss())

    class BatchCentered(nn.Identity):  # a user layer may couple the rows too, even under a listed base class
        def forward(self, x, *, training=False, rng=None):
            return x - x.mean(axis=0), None
    assert not rows_independent(nn.Sequential(BatchCentered(), nn.Linear(4, 2)))
    assert rows_independent(nn.Sequential(nn.Identity(), nn.Linear(4, 2)))


@pytest.fixture
def threads2():
    previous = get_num_threads()
    set_num_threads(2)
    yield
    set_num_threads(previous)


def _batch(n=70):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, n)


@two_threads
def test_split_gradient_is_the_sum_of_the_parts_in_order(threads2):
    model, loss = lenet5().initialize(0), sum_reduction(nn.CrossEntropyLoss())
    x, y = _batch()
    split = model.zeros_like_parameters()
    value, count = task_gradient_sum(model, loss, x, y, None, split)  # 2 threads: rows 0-34 and 35-69
    set_num_threads(1)
    parts, total = [], 0.0
    for lo, hi in ((0, 35), (35, 70)):
        g = model.zeros_like_parameters()
        total += gradient_sum(model, loss, x[lo:hi], y[lo:hi], None, g)[0]
        parts.append(g)
    np.testing.assert_array_equal(split, parts[0] + parts[1])  # bitwise: added in part order
    assert value == total and count == 70.0
    whole = model.zeros_like_parameters()
    whole_value, _ = gradient_sum(model, loss, x, y, None, whole)
    np.testing.assert_allclose(split, whole, rtol=2e-5, atol=2e-6)  # one batch: the same up to float rounding
    assert abs(value - whole_value) < 1e-4 * abs(whole_value)


@two_threads
def test_split_step_is_reproducible_and_falls_back_for_small_or_coupled_batches(threads2, monkeypatch):
    model, loss = mlp().initialize(1), sum_reduction(nn.CrossEntropyLoss())
    x, y = _batch(64)
    a, b = model.zeros_like_parameters(), model.zeros_like_parameters()
    task_gradient_sum(model, loss, x, y, None, a)
    task_gradient_sum(model, loss, x, y, None, b)
    np.testing.assert_array_equal(a, b)
    calls = []
    monkeypatch.setattr("sparkdl.step.threads.split_gradient_sum", lambda *args: calls.append(args) or 0.0)
    small = 2 * MIN_ROWS_PER_THREAD - 1
    task_gradient_sum(model, loss, x[:small], y[:small], None, a)
    assert not calls  # too few rows per thread
    bn = nn.Sequential(nn.Flatten(), nn.Linear(784, 8), nn.BatchNorm1d(8), nn.Linear(8, 10)).initialize(0)
    task_gradient_sum(bn, loss, x, y, None, bn.zeros_like_parameters())
    assert not calls  # BatchNorm with too little work per layer for its synchronisations (test_parallel_batchnorm)
    gradient_sum(model, loss, x, y, None, a)
    assert not calls  # the single-process trainer's step is never split (bitwise the same at any thread count)
    task_gradient_sum(model, loss, x, y, None, a)
    assert len(calls) == 1


V, T = 30, 6  # vocabulary and sequence length of the token models


def _tokens(n, rng, pad):
    ids = rng.integers(1, V, (n, T))
    if pad:  # right-padded with -1 after 1..T tokens (what SequenceLengths reads)
        ids[np.arange(T) >= rng.integers(1, T + 1, n)[:, None]] = -1
    return ids


def _tel(**kw):
    return nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True, **kw)


# every newly splittable family with dropout active: (model, batch of 40 rows)
_FAMILIES = {
    "mlp-dropout": (lambda: mlp(in_features=20, hidden=(16, 12), dropout=0.3),
                    lambda rng: rng.standard_normal((40, 20)).astype(np.float32)),
    "attention": (lambda: nn.Sequential(nn.MultiheadAttention(8, 2, dropout=0.3, batch_first=True), nn.Flatten(),
                                        nn.Linear(T * 8, 10)),
                  lambda rng: rng.standard_normal((40, T, 8)).astype(np.float32)),
    "transformer-layer": (lambda: nn.Sequential(_tel(dropout=0.1), nn.Flatten(), nn.Linear(T * 8, 10)),
                          lambda rng: rng.standard_normal((40, T, 8)).astype(np.float32)),
    "transformer-encoder-pre-norm": (lambda: nn.Sequential(nn.TransformerEncoder(_tel(dropout=0.2, norm_first=True), 2,
                                                                                 nn.LayerNorm(8)),
                                                           nn.Flatten(), nn.Linear(T * 8, 10)),
                                     lambda rng: rng.standard_normal((40, T, 8)).astype(np.float32)),
    "transformer-classifier": (lambda: nn.Sequential(nn.SequenceLengths(), nn.TransformerClassifier(
        V, 10, max_length=T, d_model=8, nhead=2, num_layers=1, dim_feedforward=16, dropout=0.2)),
                               lambda rng: _tokens(40, rng, pad=True)),
    "lstm": (lambda: nn.Sequential(nn.SequenceLengths(), nn.Embedding(V, 8, padding_idx=0),
                                   nn.LSTM(8, 6, num_layers=2, dropout=0.3, batch_first=True), nn.RNNOutput("last"),
                                   nn.Linear(6, 10)),
             lambda rng: _tokens(40, rng, pad=True)),
    "gru-bidirectional": (lambda: nn.Sequential(nn.Embedding(V, 8), nn.GRU(8, 5, num_layers=2, dropout=0.25,
                                                                           batch_first=True, bidirectional=True),
                                                nn.RNNOutput("output"), nn.Flatten(), nn.Linear(T * 10, 10)),
                          lambda rng: _tokens(40, rng, pad=False)),
    "rnn-relu": (lambda: nn.Sequential(nn.Embedding(V, 8), nn.RNN(8, 6, num_layers=3, nonlinearity="relu",
                                                                   dropout=0.2, batch_first=True),
                                       nn.RNNOutput("last"), nn.Linear(6, 10)),
                 lambda rng: _tokens(40, rng, pad=False)),
}


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("family", sorted(_FAMILIES))
def test_split_with_dropout_equals_the_whole_batch_and_advances_the_rng_alike(family, threads):
    make, data = _FAMILIES[family]
    model, loss = make().initialize(3), sum_reduction(nn.CrossEntropyLoss())
    rng = np.random.default_rng(0)
    x, y = data(rng), rng.integers(0, 10, 40)
    assert rows_independent(model, loss)
    split_rng, whole_rng = np.random.default_rng(5), np.random.default_rng(5)
    split, whole = model.zeros_like_parameters(), model.zeros_like_parameters()
    value = split_gradient_sum(model, loss, x, y, split, threads, split_rng)
    whole_value, _ = gradient_sum(model, loss, x, y, whole_rng, whole)
    scale = np.abs(whole).max()
    np.testing.assert_allclose(split, whole, rtol=1e-5, atol=1e-6 * scale)  # the same masks: float rounding only
    assert abs(value - whole_value) <= 1e-5 * abs(whole_value)
    assert split_rng.bit_generator.state == whole_rng.bit_generator.state  # the caller's stream moved alike
    other = model.zeros_like_parameters()
    gradient_sum(model, loss, x, y, np.random.default_rng(6), other)
    assert np.abs(other - whole).max() > 1e-3 * scale  # the masks matter: another seed, another gradient


def test_parts_that_draw_differently_are_an_error():
    class RowNoise(nn.Identity):  # draws one number per row: not split-invariant
        def forward(self, x, *, training=False, rng=None):
            return x + rng.random((len(x), 1)).astype(x.dtype), None

    model, loss = nn.Sequential(RowNoise(), nn.Linear(4, 3)).initialize(0), sum_reduction(nn.MSELoss())
    x = np.ones((40, 4), np.float32)
    with pytest.raises(RuntimeError, match="drew different amounts from the random generator"):
        split_gradient_sum(model, loss, x, np.zeros((40, 3), np.float32), model.zeros_like_parameters(), 3,
                           np.random.default_rng(0))  # parts of 13, 13 and 14 rows


def test_split_gradient_sum_writes_into_grad_out_with_one_thread_per_part():
    model, loss = mlp().initialize(2), sum_reduction(nn.CrossEntropyLoss())
    x, y = _batch(48)
    out = np.full(model.num_parameters(), np.nan, np.float32)
    value = split_gradient_sum(model, loss, x, y, out, 3)
    parts = [model.zeros_like_parameters() for _ in range(3)]
    expect = sum(gradient_sum(model, loss, x[lo:lo + 16], y[lo:lo + 16], None, g)[0]
                 for lo, g in zip((0, 16, 32), parts))
    np.testing.assert_array_equal(out, parts[0] + parts[1] + parts[2])
    assert value == expect


def test_a_forked_child_gets_fresh_threads():
    """pyspark forks its Python workers: a child must not wait on the parent's (absent) pool threads."""
    import multiprocessing
    model, loss = mlp().initialize(2), sum_reduction(nn.CrossEntropyLoss())
    x, y = _batch(48)
    out = model.zeros_like_parameters()
    expect = split_gradient_sum(model, loss, x, y, out, 2)  # the parent's pool now exists
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=lambda: queue.put(split_gradient_sum(model, loss, x, y, out.copy(), 2)))
    child.start()
    child.join(60)
    assert child.exitcode == 0 and queue.get(timeout=5) == expect


@two_threads
def test_an_error_in_a_part_names_the_row_of_the_whole_batch(threads2):
    model, loss = mlp(dropout=0.2).initialize(0), sum_reduction(nn.CrossEntropyLoss())
    x, y = _batch(64)
    y[40] = 99  # a label out of range, in the second part (rows 32-63)
    with pytest.raises(ValueError, match=r"40") as split:  # the whole batch is rerun with the step's generator
        task_gradient_sum(model, loss, x, y, np.random.default_rng(0), model.zeros_like_parameters())
    assert get_num_threads() == 2  # part 0 ran on this thread at 1 thread; the task's count is back
    with pytest.raises(ValueError) as whole:
        gradient_sum(model, loss, x, y, np.random.default_rng(0), model.zeros_like_parameters())
    assert str(split.value) == str(whole.value)


@two_threads
def test_the_calling_thread_keeps_its_thread_count(threads2):
    model, loss = mlp().initialize(0), sum_reduction(nn.CrossEntropyLoss())
    x, y = _batch(64)
    split_gradient_sum(model, loss, x, y, model.zeros_like_parameters(), 2)
    assert get_num_threads() == 2 and numba.get_num_threads() == 2


@two_threads
def test_split_also_when_the_threading_layer_serializes_parallel_kernels(threads2, monkeypatch):
    """Whether TBB loads must not change the bits: the rows split on a workqueue host too (its parallel kernels
    take turns); tests/test_host_independence.py compares the bits of the two layers."""
    calls = []
    monkeypatch.setattr("sparkdl.step.threads.split_gradient_sum", lambda *args: calls.append(args) or 0.0)
    monkeypatch.setattr("sparkdl.config.serializes_parallel_kernels", lambda: True)
    model, loss = mlp().initialize(0), sum_reduction(nn.CrossEntropyLoss())
    x, y = _batch(64)
    task_gradient_sum(model, loss, x, y, None, model.zeros_like_parameters())
    assert len(calls) == 1
