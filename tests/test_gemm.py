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
    (lambda: nn.Conv2d(16, 16, 3, padding=1, bias=False), (40, 16, 32, 32)),   # winograd, 14 chunks in 2 waves
    (lambda: nn.Conv2d(16, 32, 3, stride=2, padding=1), (40, 16, 32, 32)),     # im2col, chunks in 3 waves
    (lambda: nn.ConvTranspose2d(16, 8, 3, stride=2), (24, 16, 16, 16)),        # im2col_input_grad forward
    (lambda: nn.Conv2d(128, 160, 3, padding=1), (24, 128, 3, 3)),              # im2col, weight gradient direct
    (lambda: nn.Linear(512, 384), (128, 512)),
], ids=["winograd", "im2col", "pointwise", "pointwise-gathered", "grouped", "winograd-thin", "im2col-waves",
        "transposed", "im2col-direct-grad", "linear"])
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


def test_a_stack_of_matmuls_in_an_imported_graph_is_cut_across_threads_with_the_same_bits(threads, monkeypatch):
    # Attention's scores and context products, (N, heads, L, d) @ (N, heads, d, L), forward and backward.
    calls = []
    real = gemm.matmul
    monkeypatch.setattr(gemm, "matmul", lambda *a, **k: calls.append(a[0].shape) or real(*a, **k))
    op = nn.OnnxOp("MatMul", inputs=["x", "x"])
    rng = np.random.default_rng(5)
    q, k = _rand(rng, 8, 4, 128, 64), _rand(rng, 8, 4, 64, 128)  # 67 MFLOP: above MIN_SPLIT_FLOPS
    out = {}
    for t in (1, 2):
        threads(t)
        y, cache = op.forward((q, k), training=True)
        out[t] = (y,) + tuple(op.backward(cache, _rand(np.random.default_rng(6), *y.shape), None))
    assert calls and all(shape[0] == 32 for shape in calls)  # only at 2 threads, on the flattened stack
    for a, b in zip(out[1], out[2]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(out[1][0], np.matmul(q.astype(np.float64), k), rtol=1e-5, atol=1e-5)


def test_row_cuts_fall_on_the_alignment():
    assert gemm._parts(300, 2, gemm.ROW_ALIGN) == [(0, 144), (144, 300)]
    assert gemm._parts(1000, 3, 48) == [(0, 336), (336, 672), (672, 1000)]
    assert gemm._parts(7, 2) == [(0, 4), (4, 7)]


def test_linear_on_inputs_of_more_than_two_axes_is_the_rows_linear_with_torch_values_and_gradients():
    """(N, *, D_in) as torch.nn.Linear: values and gradients equal to the 2-D layer on the flattened rows
    (bitwise), to torch, and to central differences in float64."""
    torch = pytest.importorskip("torch")
    from tests.gradcheck import layer_gradcheck
    layer = nn.Linear(5, 3).initialize(0)
    x = np.random.default_rng(0).standard_normal((4, 2, 6, 5)).astype(np.float32)[:, :, ::2]  # non-contiguous
    y, cache = layer.forward(x, training=True)
    assert y.shape == (4, 2, 3, 3)
    g = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
    gp = layer.zeros_like_parameters()
    gx = layer.backward(cache, g, gp)
    flat = layer.forward(np.ascontiguousarray(x).reshape(-1, 5), training=True)
    gp2 = layer.zeros_like_parameters()
    gx2 = layer.backward(flat[1], g.reshape(-1, 3), gp2)
    np.testing.assert_array_equal(y.reshape(-1, 3), flat[0])
    np.testing.assert_array_equal(gx.reshape(-1, 5), gx2)
    np.testing.assert_array_equal(gp, gp2)
    ref = torch.nn.Linear(5, 3)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(layer.weight))
        ref.bias.copy_(torch.from_numpy(layer.bias))
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    yt = ref(xt)
    yt.backward(torch.from_numpy(g))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)
    views = layer.parameter_layout().views(gp)
    np.testing.assert_allclose(views["weight"], ref.weight.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(views["bias"], ref.bias.grad.numpy(), rtol=1e-5, atol=1e-5)
    layer_gradcheck(nn.Linear(5, 3).astype(np.float64).initialize(2),
                    np.random.default_rng(3).standard_normal((2, 3, 5)), training=True)
    with pytest.raises(ValueError, match=r"Linear: expected input.shape\[-1\] == 5, got shape \(2, 3, 4\)"):
        layer(np.zeros((2, 3, 4), np.float32))
    with pytest.raises(ValueError, match="Linear: expected 2-D input, got 1-D"):
        layer(np.zeros(5, np.float32))
