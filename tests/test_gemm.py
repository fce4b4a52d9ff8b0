"""sparkdl.nn.gemm.matmul: a product cut across the calling thread's numba threads equals numpy's, bit for bit,
and so do the layers built on it (convolutions of every algorithm, Linear) at 1 and 2 threads."""
import numpy as np
import pytest

import sparkdl
from sparkdl import nn
from sparkdl.nn import gemm
from sparkdl.nn.gemm import matmul


@pytest.fixture
def threads():
    previous = sparkdl.get_num_threads()
    yield sparkdl.set_num_threads
    sparkdl.set_num_threads(previous)


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("sa,sb", [
    ((300, 700), (700, 500)),            # rows of a
    ((16, 64, 300), (16, 300, 400)),     # batch axis (Winograd's 16 points)
    ((1, 128, 300), (1, 300, 500)),      # one matrix: rows again
    ((256, 96), (5, 96, 300)),           # a 2-D operand shared by a batch (pointwise per sample)
    ((3, 200, 64), (64, 900)),
    ((16, 576), (576, 8192)),            # few rows: not cut (a cut through b's columns changes BLAS's rounding)
    ((301, 700), (700, 500)),            # row counts that are not multiples of the alignment
    ((2, 250, 300), (300, 999)),
], ids=["2d", "batched", "batch-of-one", "shared-a", "shared-b", "thin-a", "odd-rows", "odd-rows-3d"])
def test_the_cut_product_is_numpys_bit_for_bit(threads, sa, sb):
    rng = np.random.default_rng(0)
    a, b = _rand(rng, *sa), _rand(rng, *sb)
    threads(2)
    assert 2 * np.matmul(a, b).size * a.shape[-1] >= gemm.MIN_SPLIT_FLOPS  # the cut is taken
    np.testing.assert_array_equal(matmul(a, b), np.matmul(a, b))


def test_a_strided_out_view_is_written_in_place(threads):
    rng = np.random.default_rng(1)
    u, v = _rand(rng, 16, 64, 300), _rand(rng, 300, 16, 400)
    m = np.full((64, 16, 400), np.nan, np.float32)
    threads(2)
    res = matmul(u, v.transpose(1, 0, 2), out=m.transpose(1, 0, 2))
    assert np.shares_memory(res, m)
    np.testing.assert_array_equal(m.transpose(1, 0, 2), np.matmul(u, v.transpose(1, 0, 2)))


def test_the_parts_run_on_other_threads(threads, monkeypatch):
    calls = []
    real = gemm.executor

    def spy(n):
        calls.append(n)
        return real(n)
    monkeypatch.setattr(gemm, "executor", spy)
    rng = np.random.default_rng(2)
    a, b = _rand(rng, 400, 400), _rand(rng, 400, 400)
    threads(2)
    matmul(a, b)
    assert calls == [1]  # one part on the pool, one on the caller
    calls.clear()
    threads(1)
    matmul(a, b)
    small = _rand(rng, 8, 8)
    threads(2)
    matmul(small, small)  # below MIN_SPLIT_FLOPS
    assert calls == []


@pytest.mark.parametrize("layer,shape", [
    (lambda: nn.Conv2d(64, 64, 3, padding=1), (8, 64, 16, 16)),                # winograd
    (lambda: nn.Conv2d(32, 64, 3, stride=2, padding=1), (8, 32, 16, 16)),      # im2col
    (lambda: nn.Conv2d(64, 128, 1), (8, 64, 16, 16)),                          # pointwise, per sample
    (lambda: nn.Conv2d(128, 256, 1), (16, 128, 4, 4)),                         # pointwise, gathered
    (lambda: nn.Conv2d(64, 64, 3, padding=1, groups=4), (4, 64, 16, 16)),      # grouped im2col
    (lambda: nn.Linear(512, 384), (128, 512)),
], ids=["winograd", "im2col", "pointwise", "pointwise-gathered", "grouped", "linear"])
def test_layers_give_the_same_bits_at_one_and_two_threads(threads, layer, shape):
    m = layer().initialize(0)
    rng = np.random.default_rng(3)
    x = _rand(rng, *shape)
    out = {}
    for t in (1, 2):
        threads(t)
        y, cache = m.forward(x, training=True)
        grad = np.zeros(m.num_parameters(), np.float32)
        gx = m.backward(cache, np.ones_like(y) * 0.5 + y, grad)
        out[t] = (y, gx, grad)
    for a, b in zip(out[1], out[2]):
        np.testing.assert_array_equal(a, b)


def test_row_cuts_fall_on_the_alignment():
    assert gemm._parts(300, 2, gemm.ROW_ALIGN) == [(0, 144), (144, 300)]
    assert gemm._parts(1000, 3, 48) == [(0, 336), (336, 672), (672, 1000)]
    assert gemm._parts(7, 2) == [(0, 4), (4, 7)]
