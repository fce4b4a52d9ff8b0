"""Hand-worked steps, convergence (quadratic, Rosenbrock), hyper-parameter errors and config round trips."""
import json
import math

import numpy as np
import pytest

from sparkdl.nn import Layout
from sparkdl.optim import (SGD, Adadelta, Adagrad, Adam, Adamax, AdamW, CosineAnnealingLR, LinearWarmup,
                           RMSprop, SequentialLR, optimizer_config, optimizer_from_config)


def run(opt, p, grads):
    """Apply ``grads`` (a list of gradient vectors) one step each; return the float64 result."""
    p = np.asarray(p, np.float32).copy()
    state = opt.init_state(0, p.size)
    for g in grads:
        opt.update(p, np.asarray(g, np.float32), state)
    assert state["step"] == len(grads)
    return p.astype(np.float64), state


# ----------------------------------------------------------------------------- hand-worked steps
def test_sgd_hand_steps():
    p, st = run(SGD(lr=0.1, momentum=0.9), [1.0, -2.0], [[0.5, 1.0], [0.5, 1.0]])
    # step 1: buf = g = [0.5, 1]; p = [0.95, -2.1]. step 2: buf = 0.9 g + g = [0.95, 1.9]; p -= 0.1 buf
    np.testing.assert_allclose(p, [0.855, -2.29], rtol=1e-6)
    np.testing.assert_allclose(st["momentum_buffer"], [0.95, 1.9], rtol=1e-6)
    p, _ = run(SGD(lr=0.1, weight_decay=0.1), [1.0], [[0.5]])
    np.testing.assert_allclose(p, [1 - 0.1 * (0.5 + 0.1)], rtol=1e-6)
    p, _ = run(SGD(lr=0.1, momentum=0.9, nesterov=True), [1.0], [[0.5]])
    np.testing.assert_allclose(p, [1 - 0.1 * (0.5 + 0.9 * 0.5)], rtol=1e-6)
    p, _ = run(SGD(lr=0.1, momentum=0.5, dampening=0.5), [1.0], [[1.0], [1.0]])
    # buf1 = 1, p1 = 0.9; buf2 = 0.5 * 1 + 0.5 * 1 = 1; p2 = 0.8
    np.testing.assert_allclose(p, [0.8], rtol=1e-6)


def test_adam_hand_steps():
    # A constant gradient makes the bias-corrected step exactly lr * sign(g) (up to eps).
    p, st = run(Adam(lr=0.1), [1.0, -2.0], [[0.5, -1.0], [0.5, -1.0]])
    np.testing.assert_allclose(p, [0.8, -1.8], rtol=1e-6)
    np.testing.assert_allclose(st["exp_avg"], [0.095, -0.19], rtol=1e-6)          # 0.9*0.05 + 0.1*0.5
    np.testing.assert_allclose(st["exp_avg_sq"], [0.00049975, 0.001999], rtol=1e-5)  # 0.999*0.00025 + 0.001*0.25
    # AMSGrad: g = 1 then 0, so v drops from 0.001 to 0.000999 while max stays 0.001
    m_hat = 0.09 / 0.19
    plain, _ = run(Adam(lr=0.1), [0.0], [[1.0], [0.0]])
    ams, st = run(Adam(lr=0.1, amsgrad=True), [0.0], [[1.0], [0.0]])
    np.testing.assert_allclose(plain, [-0.1 - 0.1 * m_hat / math.sqrt(0.000999 / 0.001999)], rtol=1e-5)
    np.testing.assert_allclose(ams, [-0.1 - 0.1 * m_hat / math.sqrt(0.001 / 0.001999)], rtol=1e-5)
    np.testing.assert_allclose(st["max_exp_avg_sq"], [0.001], rtol=1e-6)
    # L2 weight decay enters the gradient: g = 0.5 + 0.5 * 1 = 1; first step is still lr * sign(g)
    p, st = run(Adam(lr=0.1, weight_decay=0.5), [1.0], [[0.5]])
    np.testing.assert_allclose(st["exp_avg"], [0.1], rtol=1e-6)
    np.testing.assert_allclose(p, [0.9], rtol=1e-6)


def test_adamw_hand_step():
    # p <- p (1 - lr wd) = 0.95 p, then the Adam step of -lr sign(g)
    p, st = run(AdamW(lr=0.1, weight_decay=0.5), [1.0, -2.0], [[0.5, -1.0]])
    np.testing.assert_allclose(p, [0.95 - 0.1, -1.9 + 0.1], rtol=1e-6)
    np.testing.assert_allclose(st["exp_avg"], [0.05, -0.1], rtol=1e-6)


def test_adagrad_hand_steps():
    p, st = run(Adagrad(lr=0.1), [1.0], [[0.5], [0.5]])
    np.testing.assert_allclose(p, [0.9 - 0.1 * 0.5 / math.sqrt(0.5)], rtol=1e-6)
    np.testing.assert_allclose(st["sum"], [0.5], rtol=1e-6)
    p, _ = run(Adagrad(lr=0.1, lr_decay=0.5), [1.0], [[0.5], [0.5]])
    np.testing.assert_allclose(p, [0.9 - (0.1 / 1.5) * 0.5 / math.sqrt(0.5)], rtol=1e-6)
    p, st = run(Adagrad(lr=0.1, initial_accumulator_value=0.75), [1.0], [[0.5]])
    np.testing.assert_allclose(p, [1 - 0.1 * 0.5 / 1.0], rtol=1e-6)   # sqrt(0.75 + 0.25) = 1


def test_rmsprop_hand_steps():
    p, st = run(RMSprop(lr=0.01), [1.0], [[0.5]])
    np.testing.assert_allclose(st["square_avg"], [0.0025], rtol=1e-6)   # 0.01 * 0.25
    np.testing.assert_allclose(p, [1 - 0.01 * 0.5 / 0.05], rtol=1e-6)
    p, st = run(RMSprop(lr=0.01, centered=True), [1.0], [[0.5]])
    np.testing.assert_allclose(st["grad_avg"], [0.005], rtol=1e-6)
    np.testing.assert_allclose(p, [1 - 0.01 * 0.5 / math.sqrt(0.0025 - 0.005 ** 2)], rtol=1e-6)
    p, st = run(RMSprop(lr=0.01, momentum=0.9), [1.0], [[0.5], [0.5]])
    buf2 = 0.9 * 10.0 + 0.5 / math.sqrt(0.99 * 0.0025 + 0.0025)
    np.testing.assert_allclose(st["momentum_buffer"], [buf2], rtol=1e-6)
    np.testing.assert_allclose(p, [0.9 - 0.01 * buf2], rtol=1e-6)


def test_adadelta_hand_step():
    p, st = run(Adadelta(), [1.0], [[0.5]])
    delta = math.sqrt(1e-6) / math.sqrt(0.1 * 0.25 + 1e-6) * 0.5
    np.testing.assert_allclose(p, [1 - delta], rtol=1e-6)
    np.testing.assert_allclose(st["square_avg"], [0.025], rtol=1e-6)
    np.testing.assert_allclose(st["acc_delta"], [0.1 * delta ** 2], rtol=1e-5)


def test_adamax_hand_steps():
    p, st = run(Adamax(), [1.0], [[0.5], [-0.25]])
    # step 1: m = 0.05, u = 0.5, p = 1 - (0.002 / 0.1) * 0.05 / 0.5 = 0.998
    # step 2: m = 0.045 - 0.025 = 0.02, u = max(0.999 * 0.5, 0.25) = 0.4995
    np.testing.assert_allclose(p, [0.998 - (0.002 / 0.19) * 0.02 / 0.4995], rtol=1e-6)
    np.testing.assert_allclose(st["exp_inf"], [0.4995], rtol=1e-6)


# ----------------------------------------------------------------------------- convergence
QUAD_A = np.linspace(1.0, 10.0, 10)
QUAD_C = np.linspace(-2.0, 2.0, 10)


@pytest.mark.parametrize("opt,steps", [
    (SGD(lr=0.1), 200), (SGD(lr=0.02, momentum=0.9, nesterov=True), 300), (Adam(lr=0.1), 400),
    (AdamW(lr=0.1, weight_decay=0.0), 400), (Adagrad(lr=1.0), 400), (RMSprop(lr=0.01), 600),
    (Adadelta(lr=2.0, schedule=CosineAnnealingLR(1000, step_by="iteration")), 1000), (Adamax(lr=0.1), 400),
], ids=lambda v: type(v).__name__ if not isinstance(v, int) else str(v))
def test_converges_on_quadratic(opt, steps):
    """f(x) = 0.5 sum a_i (x_i - c_i)^2 with a in [1, 10]: reach the minimum c."""
    x = np.zeros(10, np.float32)
    state = opt.init_state(0, 10)
    for i in range(steps):
        opt.update(x, (QUAD_A * (x - QUAD_C)).astype(np.float32), state, lr=opt.lr_at(iteration=i))
    np.testing.assert_allclose(x, QUAD_C, atol=1e-2)


def rosenbrock_grad(p):
    x, y = float(p[0]), float(p[1])
    return np.array([-2 * (1 - x) - 400 * x * (y - x * x), 200 * (y - x * x)], np.float32)


@pytest.mark.parametrize("make,steps", [
    (lambda n: SGD(lr=1e-3, momentum=0.9), 3000),
    (lambda n: SGD(lr=1e-3, momentum=0.9, nesterov=True), 3000),
    (lambda n: Adam(lr=0.02), 3000),
    (lambda n: AdamW(lr=0.02, weight_decay=0.0, amsgrad=True), 6000),
    (lambda n: Adamax(lr=0.02), 6000),
    (lambda n: RMSprop(lr=1e-3, momentum=0.9), 3000),
    (lambda n: Adagrad(lr=1.0), 10000),
    (lambda n: Adadelta(lr=1.0, schedule=CosineAnnealingLR(n, step_by="iteration")), 8000),
], ids=["sgd-momentum", "sgd-nesterov", "adam", "adamw-amsgrad", "adamax", "rmsprop", "adagrad", "adadelta-cosine"])
def test_converges_on_rosenbrock(make, steps):
    """2-D Rosenbrock from (-1.2, 1): reach (1, 1) within 1e-2."""
    opt = make(steps)
    p = np.array([-1.2, 1.0], np.float32)
    state = opt.init_state(0, 2)
    for i in range(steps):
        opt.update(p, rosenbrock_grad(p), state, lr=opt.lr_at(iteration=i))
    np.testing.assert_allclose(p, [1.0, 1.0], atol=1e-2)


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("cls,kw,exc,match", [
    (SGD, {"lr": -0.1}, ValueError, r"SGD: lr must be in \[0.0, inf\), got -0.1"),
    (SGD, {"momentum": -0.5}, ValueError, r"SGD: momentum must be in \[0.0, inf\), got -0.5"),
    (SGD, {"weight_decay": -1}, ValueError, r"SGD: weight_decay must be in \[0.0, inf\), got -1"),
    (SGD, {"nesterov": True}, ValueError, r"nesterov=True requires momentum > 0 and dampening == 0"),
    (SGD, {"nesterov": True, "momentum": 0.9, "dampening": 0.1}, ValueError, r"dampening=0.1"),
    (SGD, {"lr": "0.1"}, TypeError, r"SGD: lr must be a real number, got str"),
    (SGD, {"lr": float("nan")}, ValueError, r"SGD: lr must be in"),
    (Adam, {"betas": (1.0, 0.999)}, ValueError, r"Adam: betas\[0\] must be in \[0.0, 1.0\), got 1.0"),
    (Adam, {"betas": (0.9, -0.1)}, ValueError, r"Adam: betas\[1\] must be in \[0.0, 1.0\), got -0.1"),
    (Adam, {"betas": 0.9}, TypeError, r"Adam: betas must be a pair"),
    (Adam, {"eps": -1e-8}, ValueError, r"Adam: eps must be in \[0.0, inf\)"),
    (AdamW, {"weight_decay": -0.01}, ValueError, r"AdamW: weight_decay must be in"),
    (Adagrad, {"lr_decay": -1}, ValueError, r"Adagrad: lr_decay must be in \[0.0, inf\), got -1"),
    (Adagrad, {"initial_accumulator_value": -0.1}, ValueError, r"Adagrad: initial_accumulator_value must be in"),
    (Adagrad, {"eps": -1}, ValueError, r"Adagrad: eps"),
    (RMSprop, {"alpha": -0.5}, ValueError, r"RMSprop: alpha must be in \[0.0, inf\)"),
    (RMSprop, {"momentum": -0.5}, ValueError, r"RMSprop: momentum"),
    (Adadelta, {"rho": 1.5}, ValueError, r"Adadelta: rho must be in \[0.0, 1.0\], got 1.5"),
    (Adamax, {"betas": (0.9, 1.0)}, ValueError, r"Adamax: betas\[1\] must be in \[0.0, 1.0\)"),
    (Adam, {"clip_norm": 0.0}, ValueError, r"Adam: clip_norm must be in \(0.0, inf\), got 0.0"),
    (Adam, {"clip_value": -1.0}, ValueError, r"Adam: clip_value must be in \(0.0, inf\)"),
    (Adam, {"clip_value": 1.0, "clip_norm": 1.0}, ValueError, r"at most one of clip_value and clip_norm"),
    (Adam, {"schedule": "cosine"}, TypeError, r"Adam: schedule must be a sparkdl.optim.schedules.Schedule"),
])
def test_hyper_parameter_errors(cls, kw, exc, match):
    with pytest.raises(exc, match=match):
        cls(**kw)


def test_update_argument_errors():
    opt = Adam()
    p = np.zeros(4, np.float32)
    state = opt.init_state(0, 4)
    with pytest.raises(ValueError, match=r"grads \(3,\)/float32 must match params \(4,\)/float32"):
        opt.update(p, np.zeros(3, np.float32), state)
    with pytest.raises(ValueError, match=r"must match params"):
        opt.update(p, np.zeros(4, np.float64), state)
    with pytest.raises(TypeError, match=r"params must be float32 or float64, got int64"):
        opt.update(np.zeros(4, np.int64), np.zeros(4, np.int64), state)
    with pytest.raises(ValueError, match=r"state\['exp_avg'\] must be a writeable contiguous array of shape \(4,\)"):
        opt.update(p, np.zeros(4, np.float32), opt.init_state(0, 5))
    with pytest.raises(ValueError, match=r"Adam: lr must be in \[0.0, inf\), got -1.0"):
        opt.update(p, np.zeros(4, np.float32), state, lr=-1.0)
    with pytest.raises(TypeError, match=r"state must be the dict from init_state"):
        opt.update(p, np.zeros(4, np.float32), {})
    opt.configure(Layout([("w", (3,))]))
    with pytest.raises(ValueError, match=r"shard \[0, 4\) exceeds the configured layout of 3 elements"):
        opt.update(p, np.zeros(4, np.float32), state)
    assert state["step"] == 0 and not p.any()   # nothing happened


# ----------------------------------------------------------------------------- config
CONFIGURED = [
    SGD(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4, clip_norm=1.0),
    Adam(lr=0.01, betas=(0.8, 0.99), eps=1e-6, amsgrad=True, clip_value=0.5),
    AdamW(lr=0.01, weight_decay=0.05,
          schedule=SequentialLR([LinearWarmup(5, 0.1, step_by="iteration"),
                                 CosineAnnealingLR(20, eta_min=1e-4, step_by="iteration")], [5])),
    Adagrad(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.2),
    RMSprop(lr=0.01, alpha=0.9, momentum=0.5, centered=True),
    Adadelta(lr=0.5, rho=0.95),
    Adamax(lr=0.01, betas=(0.8, 0.9), weight_decay=0.01),
]


@pytest.mark.parametrize("opt", CONFIGURED, ids=lambda o: type(o).__name__)
def test_config_round_trip_through_json(opt):
    layout = Layout([("0.weight", (3, 4)), ("0.bias", (3,)), ("1.weight", (2, 3))])
    opt.configure(layout, [{"params": r"\.bias$", "weight_decay": 0.0, "lr": 0.02}])
    data = json.loads(json.dumps(optimizer_config(opt)))
    assert data["param_groups"] == [{"params": ["0.bias"], "lr": 0.02, "weight_decay": 0.0}]
    with pytest.raises(ValueError, match="pass layout="):
        optimizer_from_config(data)
    clone = optimizer_from_config(data, layout)
    assert type(clone) is type(opt) and clone.get_config() == opt.get_config()
    rng = np.random.default_rng(0)
    a = rng.standard_normal(layout.size).astype(np.float32)
    b = a.copy()
    sa, sb = opt.init_state(0, a.size), clone.init_state(0, b.size)
    for i in range(25):
        g = rng.standard_normal(a.size).astype(np.float32)
        opt.update(a, g, sa, lr=opt.lr_at(iteration=i))
        clone.update(b, g, sb, lr=clone.lr_at(iteration=i))
    np.testing.assert_array_equal(a, b)


def test_unknown_optimizer_class():
    with pytest.raises(ValueError, match=r"unknown optimizer class 'Lion'"):
        optimizer_from_config({"class": "Lion", "config": {}})
