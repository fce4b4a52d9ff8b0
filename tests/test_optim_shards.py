"""Sharding: whole-vector update == shard-by-shard update bit for bit; parameter groups; state round trip."""
import numpy as np
import pytest

from sparkdl.nn import Layout
from sparkdl.optim import (SGD, Adadelta, Adagrad, Adam, Adamax, AdamW, RMSprop, no_weight_decay_on_bias_and_norm)
from sparkdl.optim._elem import PARALLEL_MIN_SIZE

MAKERS = {
    "sgd": lambda: SGD(lr=0.05),
    "sgd-momentum-wd": lambda: SGD(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
    "sgd-nesterov": lambda: SGD(lr=0.05, momentum=0.9, nesterov=True),
    "adam": lambda: Adam(lr=0.01, weight_decay=0.01),
    "adam-amsgrad": lambda: Adam(lr=0.01, amsgrad=True),
    "adamw": lambda: AdamW(lr=0.01, weight_decay=0.1, amsgrad=True),
    "adagrad": lambda: Adagrad(lr=0.05, lr_decay=0.01, weight_decay=0.01, initial_accumulator_value=0.1),
    "rmsprop": lambda: RMSprop(lr=0.01, weight_decay=0.01),
    "rmsprop-centered-momentum": lambda: RMSprop(lr=0.01, momentum=0.9, centered=True),
    "adadelta": lambda: Adadelta(weight_decay=0.01),
    "adamax": lambda: Adamax(weight_decay=0.01),
    "adam-clip-norm": lambda: Adam(lr=0.01, clip_norm=5.0),
    "sgd-clip-value": lambda: SGD(lr=0.05, momentum=0.9, clip_value=0.5),
}

# 600 + 20 + 350 + 10 + 20 = 1000 elements
LAYOUT = Layout([("a.weight", (20, 30)), ("a.bias", (20,)), ("b.weight", (10, 35)), ("b.bias", (10,)),
                 ("c.scale", (20,))])
GROUPS = [{"params": r"\.bias$", "weight_decay": 0.0, "lr": 0.02}, {"params": ["c.scale"], "frozen": True}]
FROZEN = slice(980, 1000)


def run_sharded(make, bounds, *, steps=4, groups=False, seed=0):
    """Update flat shard by shard over ``bounds`` (sorted cut points); return params and concatenated state."""
    n = bounds[-1]
    rng = np.random.default_rng(seed)
    flat = rng.standard_normal(n).astype(np.float32)
    grads = rng.standard_normal((steps, n)).astype(np.float32)
    opt = make()
    if groups:
        opt.configure(LAYOUT, GROUPS)
    shards = list(zip(bounds[:-1], bounds[1:]))
    states = [opt.init_state(lo, hi) for lo, hi in shards]
    for k in range(steps):
        g = grads[k]
        sq = opt.partial_sq_norm(g, 0) if opt.clip_norm else None   # the engine sums shard partials once
        for (lo, hi), st in zip(shards, states):
            opt.update(flat[lo:hi], g[lo:hi], st, lo=lo, lr=opt.lr * (1 + k % 3), grad_sq_norm=sq)
    merged = {key: np.concatenate([st[key] for st in states]) for key in opt.state_names}
    assert all(st["step"] == steps for st in states)
    return flat, merged


SPLITS = [[0, 1, 999, 1000], [0, 333, 666, 1000], [0, 7, 7, 500, 613, 998, 1000], [0, 600, 620, 1000]]


@pytest.mark.parametrize("groups", [False, True], ids=["defaults", "groups"])
@pytest.mark.parametrize("name", list(MAKERS))
def test_sharded_update_is_bit_identical(name, groups):
    whole, whole_state = run_sharded(MAKERS[name], [0, 1000], groups=groups)
    for bounds in SPLITS:
        flat, state = run_sharded(MAKERS[name], bounds, groups=groups)
        np.testing.assert_array_equal(flat.view(np.uint32), whole.view(np.uint32), err_msg=str(bounds))
        for key in whole_state:
            np.testing.assert_array_equal(state[key].view(np.uint32), whole_state[key].view(np.uint32))


@pytest.mark.parametrize("name", ["adam-amsgrad", "rmsprop-centered-momentum", "adagrad", "sgd-nesterov"])
def test_parallel_kernel_equals_serial_shards(name):
    """A vector above PARALLEL_MIN_SIZE runs the prange kernel; its serial shards must agree bit for bit."""
    n = 2 * PARALLEL_MIN_SIZE + 5
    whole, _ = run_sharded(MAKERS[name], [0, n], steps=3)
    flat, _ = run_sharded(MAKERS[name], list(range(0, n, 10007)) + [n], steps=3)
    np.testing.assert_array_equal(flat.view(np.uint32), whole.view(np.uint32))


# ----------------------------------------------------------------------------- parameter groups
@pytest.mark.parametrize("name", list(MAKERS))
def test_frozen_elements_and_their_state_never_change(name):
    opt = MAKERS[name]()
    start = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    flat, state = run_sharded(MAKERS[name], [0, 1000], groups=True, steps=4, seed=0)
    fresh = opt.init_state(0, 1000)
    np.testing.assert_array_equal(flat[FROZEN], start[FROZEN])
    assert np.all(flat[:980] != start[:980])
    for key in opt.state_names:
        np.testing.assert_array_equal(state[key][FROZEN], fresh[key][FROZEN])


def test_no_weight_decay_on_bias_and_group_lr():
    opt = SGD(lr=0.1, weight_decay=0.5).configure(LAYOUT, GROUPS)
    flat = np.ones(1000, np.float32)
    state = opt.init_state(0, 1000)
    opt.update(flat, np.zeros(1000, np.float32), state)
    np.testing.assert_allclose(flat[:600], 1 - 0.1 * 0.5)     # decayed weights
    np.testing.assert_array_equal(flat[600:620], 1.0)         # bias: no decay
    opt.update(flat, np.ones(1000, np.float32), state, lr=0.05)
    # the bias group's lr 0.02 is scaled like the default (0.05 / 0.1): effective 0.01
    np.testing.assert_allclose(flat[600:620], 1 - 0.01, rtol=1e-6)
    np.testing.assert_allclose(flat[:600], 0.95 - 0.05 * (1 + 0.5 * 0.95), rtol=1e-6)
    np.testing.assert_array_equal(flat[FROZEN], 1.0)


def test_group_selectors_are_equivalent():
    by_list = SGD().configure(LAYOUT, [{"params": ["a.bias", "b.bias"], "lr": 0.5}])
    by_regex = SGD().configure(LAYOUT, [{"params": "bias", "lr": 0.5}])
    by_call = SGD().configure(LAYOUT, [{"params": lambda n: n.endswith(".bias"), "lr": 0.5}])
    expected = [{"params": ["a.bias", "b.bias"], "lr": 0.5}]
    assert by_list.param_groups_config() == by_regex.param_groups_config() == by_call.param_groups_config() == expected
    seg = by_regex.segments(590, 640)          # a.weight tail, a.bias, head of b.weight
    assert seg.lo.tolist() == [0, 10, 30] and seg.hi.tolist() == [10, 30, 50]
    np.testing.assert_allclose(seg.lr, [0.01, 0.5, 0.01])


@pytest.mark.parametrize("groups,exc,match", [
    ([{"params": "bias"}, {"params": ["a.bias"]}], ValueError,
     r"'a.bias' is selected by param_groups\[0\] and param_groups\[1\]"),
    ([{"params": ["a.bias", "nope"]}], ValueError, r"param_groups\[0\] names unknown parameters \['nope'\]"),
    ([{"params": "zzz"}], ValueError, r"param_groups\[0\] selects no parameter"),
    ([{"params": "bias", "momentum": 0.9}], ValueError, r"allows keys \['params', 'lr', 'weight_decay', 'frozen'\]"),
    ([{"lr": 0.1}], ValueError, r"'params' required"),
    ([{"params": 3}], TypeError, r"must be a list of names, a regex str or a callable"),
    ([{"params": "bias", "lr": -1}], ValueError, r"param_groups\[0\]\['lr'\] must be in \[0.0, inf\)"),
    ({"params": "bias"}, TypeError, r"param_groups must be a list of dicts"),
    ([{"params": "("}], ValueError, r"not a valid regex"),
])
def test_param_group_errors(groups, exc, match):
    with pytest.raises(exc, match=match):
        Adam().configure(LAYOUT, groups)


def test_configure_needs_a_layout():
    with pytest.raises(TypeError, match=r"layout must be a sparkdl.nn.Layout, got dict"):
        Adam().configure({"w": (3,)})


def test_no_weight_decay_preset():
    layout = Layout([("conv.weight", (8, 3, 3, 3)), ("conv.bias", (8,)), ("bn.weight", (8,)), ("bn.bias", (8,)),
                     ("fc.weight", (10, 8))])
    assert no_weight_decay_on_bias_and_norm(layout) == [
        {"params": ["conv.bias", "bn.weight", "bn.bias"], "weight_decay": 0.0}]
    assert no_weight_decay_on_bias_and_norm(Layout([("w", (2, 2))])) == []
    opt = AdamW().configure(layout, no_weight_decay_on_bias_and_norm(layout))
    assert opt.segments(0, layout.size).weight_decay.tolist() == [0.01, 0.0, 0.01]


# ----------------------------------------------------------------------------- state serialization
@pytest.mark.parametrize("name", list(MAKERS))
def test_state_round_trip_through_npz(name, tmp_path):
    rng = np.random.default_rng(3)
    opt = MAKERS[name]().configure(LAYOUT, GROUPS)
    flat = rng.standard_normal(1000).astype(np.float32)
    grads = rng.standard_normal((8, 1000)).astype(np.float32)
    lo, hi = 300, 1000
    state = opt.init_state(lo, hi)
    assert set(state) == {"step", *opt.state_names}
    for k in range(4):
        opt.update(flat[lo:hi], grads[k, lo:hi], state, lo=lo, grad_sq_norm=12.0)
    np.savez(tmp_path / "state.npz", **state)
    with np.load(tmp_path / "state.npz", allow_pickle=False) as f:
        loaded = {k: f[k] for k in f.files}
    assert int(loaded["step"]) == 4
    resumed = flat.copy()
    for k in range(4, 8):
        opt.update(flat[lo:hi], grads[k, lo:hi], state, lo=lo, grad_sq_norm=12.0)
        opt.update(resumed[lo:hi], grads[k, lo:hi], loaded, lo=lo, grad_sq_norm=12.0)
    np.testing.assert_array_equal(resumed.view(np.uint32), flat.view(np.uint32))
    assert state["step"] == loaded["step"] == 8
    for key in opt.state_names:
        np.testing.assert_array_equal(loaded[key], state[key])


def test_pickled_optimizer_updates_identically():
    """The engine ships the configured optimizer to executors (Spark pickles closures)."""
    import pickle
    opt = AdamW(lr=0.01, clip_norm=1.0).configure(LAYOUT, GROUPS)
    clone = pickle.loads(pickle.dumps(opt))
    g = np.random.default_rng(5).standard_normal(1000).astype(np.float32)
    a, b = np.ones(1000, np.float32), np.ones(1000, np.float32)
    opt.update(a[:500], g[:500], opt.init_state(0, 500), grad_sq_norm=3.0)
    clone.update(b[:500], g[:500], clone.init_state(0, 500), grad_sq_norm=3.0)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["adam-amsgrad", "rmsprop-centered-momentum", "adadelta"])
def test_float64_shards_match_float32_closely(name):
    rng = np.random.default_rng(6)
    p32 = rng.standard_normal(50).astype(np.float32)
    p64 = p32.astype(np.float64)
    opt = MAKERS[name]()
    s32, s64 = opt.init_state(0, 50), opt.init_state(0, 50, dtype=np.float64)
    assert s64[opt.state_names[0]].dtype == np.float64
    for _ in range(5):
        g = rng.standard_normal(50)
        opt.update(p32, g.astype(np.float32), s32)
        opt.update(p64, g, s64)
    np.testing.assert_allclose(p32, p64, rtol=1e-5, atol=1e-6)
