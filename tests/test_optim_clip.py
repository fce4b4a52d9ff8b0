"""Gradient clipping: global norm from shard partials, torch's clip_grad_norm_/clip_grad_value_, optimizer hooks."""
import math

import numba
import numpy as np
import pytest

from sparkdl.nn import Layout
from sparkdl.optim import SGD, Adam, clip_coef, clip_grad_norm, clip_grad_value, partial_sq_norm

torch = pytest.importorskip("torch")


def test_global_norm_from_shards_equals_whole_vector_norm():
    g = np.random.default_rng(0).standard_normal(50_001).astype(np.float32)
    whole = partial_sq_norm(g)
    expected = float(np.dot(g.astype(np.float64), g.astype(np.float64)))
    assert whole == pytest.approx(expected, rel=1e-13)
    for cuts in ([0, 1, 50_000, 50_001], [0, 8191, 8192, 30_000, 50_001], [0, 25_000, 25_000, 50_001]):
        parts = [partial_sq_norm(g[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]
        assert math.fsum(parts) == pytest.approx(whole, rel=1e-13)
    assert partial_sq_norm(g[:0]) == 0.0
    assert partial_sq_norm(np.array([3.0, 4.0], np.float32)) == 25.0


def test_partial_sq_norm_does_not_depend_on_thread_count():
    g = np.random.default_rng(1).standard_normal(100_000).astype(np.float32)
    previous = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = partial_sq_norm(g)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        many = partial_sq_norm(g)
    finally:
        numba.set_num_threads(previous)
    assert one == many


def test_clip_coef_formula():
    assert clip_coef(25.0, 1.0) == 1.0 / (5.0 + 1e-6)
    assert clip_coef(0.01, 1.0) == 1.0          # norm 0.1 < 1: no clipping (clamped to 1)
    assert clip_coef(0.0, 2.0) == 1.0
    with pytest.raises(ValueError, match=r"max_norm must be > 0, got 0"):
        clip_coef(1.0, 0)
    with pytest.raises(ValueError, match=r"total_sq_norm must be >= 0"):
        clip_coef(-1.0, 1.0)


@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(max_norm):
    rng = np.random.default_rng(2)
    shapes = [(3, 4), (3,), (5, 2, 2)]
    tensors = [torch.tensor(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    flat = np.concatenate([t.numpy().ravel() for t in tensors])
    params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    for p, t in zip(params, tensors):
        p.grad = t.clone()
    norm_t = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False)
    norm = clip_grad_norm(flat, max_norm)
    assert norm == pytest.approx(float(norm_t), rel=1e-6)
    np.testing.assert_allclose(flat, np.concatenate([p.grad.numpy().ravel() for p in params]), rtol=1e-6)
    if max_norm < norm:
        assert math.sqrt(partial_sq_norm(flat)) == pytest.approx(max_norm, rel=1e-5)


def test_clip_grad_value_matches_torch():
    g = np.random.default_rng(3).standard_normal(30).astype(np.float32)
    p = torch.nn.Parameter(torch.zeros(30))
    p.grad = torch.tensor(g)
    torch.nn.utils.clip_grad_value_([p], 0.3, foreach=False)
    clip_grad_value(g, 0.3)
    np.testing.assert_array_equal(g, p.grad.numpy())
    with pytest.raises(ValueError, match=r"clip_value must be > 0"):
        clip_grad_value(g, 0.0)
    with pytest.raises(TypeError, match=r"grad must be a float32/float64 numpy.ndarray"):
        clip_grad_value([1.0], 1.0)


def test_sharded_clip_norm_update_equals_whole_vector_update():
    rng = np.random.default_rng(4)
    p0 = rng.standard_normal(1000).astype(np.float32)
    g = (10 * rng.standard_normal(1000)).astype(np.float32)
    opt = SGD(lr=0.1, clip_norm=1.0)
    whole = p0.copy()
    opt.update(whole, g, opt.init_state(0, 1000))
    # the norm-clipped step has length lr * max_norm
    assert np.linalg.norm((whole - p0).astype(np.float64)) == pytest.approx(0.1, rel=1e-5)
    cuts = [0, 100, 555, 1000]
    total = sum(opt.partial_sq_norm(g[a:b], a) for a, b in zip(cuts[:-1], cuts[1:]))
    sharded = p0.copy()
    for a, b in zip(cuts[:-1], cuts[1:]):
        opt.update(sharded[a:b], g[a:b], opt.init_state(a, b), lo=a, grad_sq_norm=total)
    np.testing.assert_allclose(sharded, whole, rtol=1e-6)


def test_update_does_not_modify_grads_and_clip_value_applies():
    opt = SGD(lr=1.0, clip_value=0.5)
    p = np.zeros(3, np.float32)
    g = np.array([2.0, -0.25, -3.0], np.float32)
    opt.update(p, g, opt.init_state(0, 3))
    np.testing.assert_array_equal(p, [-0.5, 0.25, 0.5])
    np.testing.assert_array_equal(g, [2.0, -0.25, -3.0])


def test_clip_norm_needs_global_norm_on_a_partial_shard():
    opt = Adam(clip_norm=1.0)
    g = np.ones(10, np.float32)
    with pytest.raises(ValueError, match=r"clip_norm on shard \[5, 10\) needs grad_sq_norm"):
        opt.update(np.zeros(5, np.float32), g[5:], opt.init_state(5, 10), lo=5)
    opt.configure(Layout([("w", (10,))]))
    with pytest.raises(ValueError, match=r"clip_norm on shard \[0, 5\) needs grad_sq_norm"):
        opt.update(np.zeros(5, np.float32), g[:5], opt.init_state(0, 5))
    p = np.zeros(10, np.float32)
    opt.update(p, g, opt.init_state(0, 10))    # the whole configured vector: norm computed locally
    assert np.all(p < 0)


def test_frozen_elements_do_not_count_in_the_norm():
    layout = Layout([("w", (4,)), ("frozen", (3,))])
    opt = SGD(lr=1.0, clip_norm=1.0).configure(layout, [{"params": ["frozen"], "frozen": True}])
    g = np.array([3, 0, 0, 4, 100, 100, 100], np.float32)
    assert opt.partial_sq_norm(g) == 25.0
    assert opt.partial_sq_norm(g[3:], 3) == 16.0
    p = np.zeros(7, np.float32)
    opt.update(p, g, opt.init_state(0, 7))
    np.testing.assert_allclose(p, [-0.6, 0, 0, -0.8, 0, 0, 0], rtol=1e-5)   # g / (5 + 1e-6) on w only
