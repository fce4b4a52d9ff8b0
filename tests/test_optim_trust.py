"""LARS and LAMB: exact cross-shard per-tensor norms (whole vector == shard by shard, bit for bit, whatever
the cut points), hand-worked steps from the papers' update rules, convergence on a quadratic, errors."""
import math
from fractions import Fraction

import numpy as np
import pytest

from sparkdl.nn import Layout
from sparkdl.optim import (LAMB, LARS, SGD, Adam, combine_tensor_norms, no_weight_decay_on_bias_and_norm,
                           optimizer_config, optimizer_from_config)
from sparkdl.optim._elem import PARALLEL_MIN_SIZE
from sparkdl.optim.trust import square_sum, sum_to_float, tensor_pieces

# 600 + 20 + 350 + 10 + 20 = 1000 elements, as tests/test_optim_shards.py
LAYOUT = Layout([("a.weight", (20, 30)), ("a.bias", (20,)), ("b.weight", (10, 35)), ("b.bias", (10,)),
                 ("c.scale", (20,))])
GROUPS = [{"params": r"\.bias$", "weight_decay": 0.0, "lr": 0.02}, {"params": ["c.scale"], "frozen": True}]
MAKERS = {
    "lars": lambda: LARS(lr=0.5, weight_decay=0.01),
    "lars-momentum-always": lambda: LARS(lr=0.5, momentum=0.9, dampening=0.1, weight_decay=0.01, always_adapt=True),
    "lars-nesterov-clip": lambda: LARS(lr=0.5, momentum=0.9, nesterov=True, weight_decay=1e-3, clip_norm=5.0),
    "lamb": lambda: LAMB(lr=0.01),
    "lamb-always-clip-value": lambda: LAMB(lr=0.01, weight_decay=0.0, always_adapt=True, clip_value=0.5),
    "lamb-clip-norm": lambda: LAMB(lr=0.01, betas=(0.8, 0.99), clip_norm=3.0),
}
SPLITS = [[0, 1, 999, 1000], [0, 333, 666, 1000], [0, 7, 7, 500, 613, 998, 1000], [0, 600, 620, 1000]]


def run_sharded(make, bounds, *, steps=4, groups=True, seed=0, layout=LAYOUT):
    """The engine's protocol: every shard's partial norms, combined, then every shard's update."""
    n = bounds[-1]
    rng = np.random.default_rng(seed)
    flat = rng.standard_normal(n).astype(np.float32)
    grads = rng.standard_normal((steps, n)).astype(np.float32)
    opt = make().configure(layout, GROUPS if groups else None)
    shards = list(zip(bounds[:-1], bounds[1:]))
    states = [opt.init_state(lo, hi) for lo, hi in shards]
    for k in range(steps):
        g, lr = grads[k], opt.lr * (1 + k % 3)
        sq = opt.partial_sq_norm(g, 0) if opt.clip_norm else None
        norms = combine_tensor_norms(opt.partial_tensor_norms(flat[lo:hi], g[lo:hi], st, lo, lr, grad_sq_norm=sq)
                                     for (lo, hi), st in zip(shards, states))
        for (lo, hi), st in zip(shards, states):
            opt.update(flat[lo:hi], g[lo:hi], st, lo=lo, lr=lr, grad_sq_norm=sq,
                       tensor_norms=None if (lo, hi) == (0, n) else norms)
    return flat, {key: np.concatenate([st[key] for st in states]) for key in opt.state_names}


@pytest.mark.parametrize("groups", [False, True], ids=["defaults", "groups"])
@pytest.mark.parametrize("name", list(MAKERS))
def test_sharded_update_is_bit_identical(name, groups):
    whole, whole_state = run_sharded(MAKERS[name], [0, 1000], groups=groups)
    for bounds in SPLITS:
        flat, state = run_sharded(MAKERS[name], bounds, groups=groups)
        np.testing.assert_array_equal(flat.view(np.uint32), whole.view(np.uint32), err_msg=str(bounds))
        for key in whole_state:
            np.testing.assert_array_equal(state[key].view(np.uint32), whole_state[key].view(np.uint32))


def test_large_tensor_parallel_kernels_and_many_cuts():
    n = 2 * PARALLEL_MIN_SIZE + 5
    layout = Layout([("w", (n - 7,)), ("b", (7,))])
    make = lambda: LAMB(lr=0.01, always_adapt=True)  # noqa: E731
    whole, _ = run_sharded(make, [0, n], steps=2, groups=False, layout=layout)
    flat, _ = run_sharded(make, list(range(0, n, 10007)) + [n], steps=2, groups=False, layout=layout)
    np.testing.assert_array_equal(flat.view(np.uint32), whole.view(np.uint32))


def test_square_sum_is_exact_and_cut_independent():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(5000) * np.exp2(rng.integers(-140, 60, 5000))).astype(np.float32)
    x[:3] = [np.float32(1e-45), np.float32(3e-39), 0.0]  # subnormals and zero
    exact = sum(Fraction(float(v)) ** 2 for v in x)
    total = square_sum(x)
    assert isinstance(total, int) and Fraction(total, 2 ** 298) == exact
    assert sum_to_float(total) == float(exact)  # one correct rounding
    assert square_sum(x[:1234]) + square_sum(x[1234:4001]) + square_sum(x[4001:]) == total
    assert math.isinf(sum_to_float(square_sum(np.array([1.0, np.inf], np.float32))))
    assert math.isnan(sum_to_float(square_sum(np.array([np.nan, np.inf], np.float32))))
    assert square_sum(np.zeros(0, np.float32)) == 0
    assert square_sum(np.array([3.0, 4.0])) == 25.0  # float64: float sums


def test_tensor_pieces_split_segments_at_tensor_boundaries():
    opt = LARS(weight_decay=0.1).configure(LAYOUT, GROUPS)
    lo, hi, lr, wd, t = tensor_pieces(LAYOUT, 590, opt.segments(590, 990))
    assert lo.tolist() == [0, 10, 30, 380] and hi.tolist() == [10, 30, 380, 390]  # c.scale is frozen
    assert t.tolist() == [0, 1, 2, 3] and wd.tolist() == [0.1, 0.0, 0.1, 0.0]


def test_lars_hand_worked_step():
    """You et al. 2017, Algorithm 1: w = (3, 4), g = (0.6, 0.8): ||w|| = 5, ||g|| = 1; eta 0.001, beta 0.1:
    local lr = 0.001 * 5 / (1 + 0.1 * 5) = 1/300, update = (g + beta w) / 300 = (0.003, 0.004)."""
    opt = LARS(lr=1.0, weight_decay=0.1, trust_coefficient=0.001, eps=0.0)
    w = np.array([3.0, 4.0], np.float64)
    opt.update(w, np.array([0.6, 0.8]), opt.init_state(0, 2, np.float64))
    np.testing.assert_allclose(w, [3 - 0.003, 4 - 0.004], rtol=1e-14)
    # with momentum 0.9, two steps at lr 2: v1 = d1, v2 = 0.9 v1 + d2 (the paper's v, times 1/lr)
    opt = LARS(lr=2.0, momentum=0.9, weight_decay=0.1, eps=0.0)
    w, state = np.array([3.0, 4.0]), opt.init_state(0, 2, np.float64)
    opt.update(w, np.array([0.6, 0.8]), state)
    w1 = np.array([3 - 2 * 0.003, 4 - 2 * 0.004])
    np.testing.assert_allclose(w, w1, rtol=1e-14)
    g2 = np.array([-1.0, 2.0])
    opt.update(w, g2, state)
    d2 = 0.001 * np.linalg.norm(w1) / (np.linalg.norm(g2) + 0.1 * np.linalg.norm(w1)) * (g2 + 0.1 * w1)
    np.testing.assert_allclose(w, w1 - 2 * (0.9 * np.array([0.003, 0.004]) + d2), rtol=1e-13)


def test_lamb_hand_worked_step():
    """You et al. 2019, Algorithm 2, step 1: m_hat = g, v_hat = g^2, so r = g / |g| = (1, 1) (eps 0);
    u = r + 0.1 w = (1.3, 1.4), ratio = ||w|| / ||u|| = 5 / sqrt(3.65); w -= 0.1 * ratio * u."""
    opt = LAMB(lr=0.1, weight_decay=0.1, eps=0.0)
    w, state = np.array([3.0, 4.0]), opt.init_state(0, 2, np.float64)
    opt.update(w, np.array([0.6, 0.8]), state)
    ratio = 5 / math.sqrt(3.65)
    w1 = np.array([3 - 0.1 * ratio * 1.3, 4 - 0.1 * ratio * 1.4])
    np.testing.assert_allclose(w, w1, rtol=1e-14)
    np.testing.assert_allclose(state["exp_avg"], [0.06, 0.08], rtol=1e-14)
    np.testing.assert_allclose(state["exp_avg_sq"], [0.00036, 0.00064], rtol=1e-12)
    g2 = np.array([0.2, -0.4])  # step 2, by the formulas
    m = 0.9 * np.array([0.06, 0.08]) + 0.1 * g2
    v = 0.999 * np.array([0.00036, 0.00064]) + 0.001 * g2 ** 2
    u = (m / (1 - 0.9 ** 2)) / np.sqrt(v / (1 - 0.999 ** 2)) + 0.1 * w1
    opt.update(w, g2, state)
    np.testing.assert_allclose(w, w1 - 0.1 * np.linalg.norm(w1) / np.linalg.norm(u) * u, rtol=1e-12)


def test_zero_weight_decay_tensors_are_not_adapted():
    """always_adapt=False: a weight_decay=0 tensor gets ratio 1, so LARS is SGD and LAMB is Adam on it."""
    rng = np.random.default_rng(1)
    p0, grads = rng.standard_normal(1000).astype(np.float32), rng.standard_normal((3, 1000)).astype(np.float32)
    for ours, theirs, exact in ((LARS(lr=0.1, momentum=0.9), SGD(lr=0.1, momentum=0.9), True),
                                (LAMB(lr=0.01, weight_decay=0.0, eps=1e-8), Adam(lr=0.01), False)):
        a, b = p0.copy(), p0.copy()
        sa, sb = ours.init_state(0, 1000), theirs.init_state(0, 1000)
        for g in grads:
            ours.update(a, g, sa)
            theirs.update(b, g, sb)
        if exact:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    layout = Layout([("w", (30, 20)), ("bias", (400,))])
    opt = LARS(lr=0.1, weight_decay=0.1).configure(layout, no_weight_decay_on_bias_and_norm(layout))
    norms = opt.partial_tensor_norms(p0.copy(), grads[0], opt.init_state(0, 1000))
    assert list(norms) == [0]  # only the decayed tensor needs (and gets) norms


@pytest.mark.parametrize("make,steps", [(lambda: LARS(lr=5.0, momentum=0.9, weight_decay=1e-4), 400),
                                        (lambda: LAMB(lr=0.05, weight_decay=0.0, always_adapt=True), 400)])
def test_converges_on_a_quadratic(make, steps):
    """f(w) = 1/2 sum a_i (w_i - c_i)^2 over two tensors with different scales and curvatures."""
    rng = np.random.default_rng(0)
    layout = Layout([("big", (40,)), ("small", (10,))])
    a = np.concatenate([rng.uniform(0.5, 2, 40), rng.uniform(5, 20, 10)])
    c = np.concatenate([rng.normal(3, 1, 40), rng.normal(0.5, 0.1, 10)]).astype(np.float32)
    w = np.concatenate([rng.normal(0, 3, 40), rng.normal(0, 0.3, 10)]).astype(np.float32)
    f = lambda v: 0.5 * float(np.sum(a * (v - c) ** 2))  # noqa: E731
    opt = make().configure(layout)
    state, f0 = opt.init_state(0, 50), f(w)
    for k in range(steps):
        lr = opt.lr * 0.5 * (1 + math.cos(math.pi * k / steps))  # cosine decay, as large-batch recipes use
        opt.update(w, (a * (w - c)).astype(np.float32), state, lr=lr)
    assert f(w) < 1e-4 * f0


def test_errors_and_config_round_trip():
    opt = LAMB(lr=0.01).configure(LAYOUT)
    p, g = np.ones(500, np.float32), np.ones(500, np.float32)
    with pytest.raises(ValueError, match=r"LAMB: shard \[0, 500\) needs tensor_norms"):
        opt.update(p, g, opt.init_state(0, 500))
    with pytest.raises(ValueError, match=r"LAMB: tensor_norms has no entry for tensor 1 \('a.bias'\) of shard "
                                         r"\[500, 1000\)"):
        opt.update(p, g, opt.init_state(500, 1000), lo=500, tensor_norms={0: (1.0, 1.0)})
    with pytest.raises(ValueError, match=r"LARS: trust_coefficient must be in \(0.0, inf\)"):
        LARS(trust_coefficient=0)
    with pytest.raises(ValueError, match="LARS: nesterov needs momentum > 0 and dampening == 0"):
        LARS(nesterov=True)
    with pytest.raises(TypeError, match="LAMB: always_adapt must be a bool"):
        LAMB(always_adapt=1)
    with pytest.raises(ValueError, match=r"LAMB: betas\[1\] must be in \[0.0, 1.0\)"):
        LAMB(betas=(0.9, 1.0))
    for o in (LARS(lr=0.3, momentum=0.8, weight_decay=1e-4, trust_coefficient=0.02, always_adapt=True),
              LAMB(lr=0.002, betas=(0.8, 0.9), eps=1e-7, weight_decay=0.1, clip_norm=1.0)):
        clone = optimizer_from_config(optimizer_config(o.configure(LAYOUT, GROUPS)), LAYOUT)
        assert optimizer_config(clone) == optimizer_config(o) and repr(clone) == repr(o)


def test_float64_shards_match_float32_closely():
    """float64 vectors use float64 partial sums (not exact ints): shard by shard still agrees to rounding."""
    rng = np.random.default_rng(4)
    p32 = rng.standard_normal(1000).astype(np.float32)
    grads = rng.standard_normal((3, 1000))
    for make in (MAKERS["lars-momentum-always"], MAKERS["lamb"]):
        results = []
        for dtype, bounds in ((np.float32, [0, 1000]), (np.float64, [0, 1000]), (np.float64, [0, 7, 613, 1000])):
            opt, flat = make().configure(LAYOUT, GROUPS), p32.astype(dtype)
            shards = list(zip(bounds[:-1], bounds[1:]))
            states = [opt.init_state(lo, hi, dtype=dtype) for lo, hi in shards]
            for g in grads.astype(dtype):
                norms = combine_tensor_norms(opt.partial_tensor_norms(flat[lo:hi], g[lo:hi], st, lo)
                                             for (lo, hi), st in zip(shards, states))
                for (lo, hi), st in zip(shards, states):
                    opt.update(flat[lo:hi], g[lo:hi], st, lo=lo, tensor_norms=norms)
            results.append(flat)
        np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(results[2], results[1], rtol=1e-13, atol=1e-15)
