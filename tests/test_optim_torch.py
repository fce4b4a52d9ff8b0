"""100-step trajectories of every optimizer (and option) against torch.optim on one least-squares model.

Both sides start from the same float32 parameters; at each step the gradient is computed in numpy
(float64, cast to float32) from that side's current parameters, plus a fixed noise sequence, and the
parameters are compared after every step (rtol 1e-5, atol 1e-6).
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sparkdl.nn import Layout  # noqa: E402
from sparkdl.optim import (SGD, Adadelta, Adagrad, Adam, Adamax, AdamW, CosineAnnealingLR, ExponentialLR,  # noqa: E402
                           LinearWarmup, MultiStepLR, PolynomialLR, ReduceLROnPlateau, RMSprop, SequentialLR, StepLR)

STEPS = 100
_rng = np.random.default_rng(1234)
X = _rng.standard_normal((16, 4))
Y = _rng.standard_normal((16, 3))
NOISE = 0.3 * _rng.standard_normal((STEPS, 15))
W0 = (0.5 * _rng.standard_normal((3, 4))).astype(np.float32)
B0 = (0.5 * _rng.standard_normal(3)).astype(np.float32)
LAYOUT = Layout([("weight", (3, 4)), ("bias", (3,))])


def grad_fn(flat, k):
    """Gradient of 0.5 * mean ||x W^T + b - y||^2 plus noise, float64 math, float32 result."""
    w, b = flat[:12].astype(np.float64).reshape(3, 4), flat[12:].astype(np.float64)
    r = X @ w.T + b - Y
    g = np.concatenate([(r.T @ X).ravel(), r.sum(0)]) / len(X)
    return (g + NOISE[k]).astype(np.float32)


def loss_fn(flat):
    w, b = flat[:12].astype(np.float64).reshape(3, 4), flat[12:].astype(np.float64)
    return 0.5 * float(np.mean(np.sum((X @ w.T + b - Y) ** 2, axis=1)))


def run_pair(ours, theirs_cls, kw, *, groups=None, torch_groups=None, torch_schedule=None,
             clip=None, metric=False):
    """Run both sides for STEPS steps; assert closeness after every step."""
    flat = np.concatenate([W0.ravel(), B0])
    if groups is not None:
        ours.configure(LAYOUT, groups)
    state = ours.init_state(0, flat.size)
    w = torch.nn.Parameter(torch.tensor(W0))
    b = torch.nn.Parameter(torch.tensor(B0))
    params = {"weight": w, "bias": b}
    if torch_groups is None:
        tg = [w, b]
    else:
        tg = [{**{k: v for k, v in g.items() if k != "frozen_torch"}, "params": [params[n] for n in g["params"]]}
              for g in torch_groups]
    topt = theirs_cls(tg, foreach=False, **kw)
    tsched = torch_schedule(topt) if torch_schedule else None
    frozen = {n for g in (torch_groups or []) for n in g["params"] if g.get("frozen_torch")}
    for n in frozen:
        params[n].requires_grad_(False)
    last_metric = None
    for k in range(STEPS):
        lr = ours.lr_at(iteration=k, epoch=k, metric=last_metric) if ours.schedule else None
        ours.update(flat, grad_fn(flat, k), state, lr=lr)
        tflat = np.concatenate([w.detach().numpy().ravel(), b.detach().numpy()])
        tg_ = torch.from_numpy(grad_fn(tflat, k))
        topt.zero_grad(set_to_none=True)
        if "weight" not in frozen:
            w.grad = tg_[:12].reshape(3, 4).clone()
        if "bias" not in frozen:
            b.grad = tg_[12:].clone()
        if clip is not None:
            clip([p for p in (w, b) if p.grad is not None])
        topt.step()
        if tsched is not None:
            if metric:
                last_metric = loss_fn(flat)
                tsched.step(loss_fn(np.concatenate([w.detach().numpy().ravel(), b.detach().numpy()])))
            else:
                tsched.step()
        got = np.concatenate([w.detach().numpy().ravel(), b.detach().numpy()])
        np.testing.assert_allclose(flat, got, rtol=1e-5, atol=1e-6, err_msg=f"step {k}")
    return flat


OPTIONS = [
    (SGD, torch.optim.SGD, {"lr": 0.05}),
    (SGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
    (SGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.8, "dampening": 0.3, "weight_decay": 0.05}),
    (SGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    (Adam, torch.optim.Adam, {"lr": 0.01}),
    (Adam, torch.optim.Adam, {"lr": 0.01, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1}),
    (Adam, torch.optim.Adam, {"lr": 0.01, "amsgrad": True}),
    (AdamW, torch.optim.AdamW, {"lr": 0.01}),
    (AdamW, torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.3, "amsgrad": True}),
    (Adagrad, torch.optim.Adagrad, {"lr": 0.05}),
    (Adagrad, torch.optim.Adagrad, {"lr": 0.05, "lr_decay": 0.01, "weight_decay": 0.05,
                                    "initial_accumulator_value": 0.1, "eps": 1e-6}),
    (RMSprop, torch.optim.RMSprop, {"lr": 0.005}),
    (RMSprop, torch.optim.RMSprop, {"lr": 0.005, "centered": True}),
    (RMSprop, torch.optim.RMSprop, {"lr": 0.002, "momentum": 0.9, "weight_decay": 0.05}),
    (RMSprop, torch.optim.RMSprop, {"lr": 0.002, "alpha": 0.9, "momentum": 0.5, "centered": True, "eps": 1e-5}),
    (Adadelta, torch.optim.Adadelta, {}),
    (Adadelta, torch.optim.Adadelta, {"lr": 0.5, "rho": 0.95, "eps": 1e-5, "weight_decay": 0.1}),
    (Adamax, torch.optim.Adamax, {}),
    (Adamax, torch.optim.Adamax, {"lr": 0.01, "betas": (0.8, 0.95), "weight_decay": 0.1}),
]


@pytest.mark.parametrize("ours_cls,theirs_cls,kw", OPTIONS,
                         ids=[f"{o.__name__}-{'-'.join(k) or 'default'}" for o, _, k in OPTIONS])
def test_trajectory_matches_torch(ours_cls, theirs_cls, kw):
    flat = run_pair(ours_cls(**kw), theirs_cls, kw)
    start = np.concatenate([W0.ravel(), B0])
    assert np.abs(flat - start).max() > 1e-2  # the trajectory really moved


@pytest.mark.parametrize("ours_cls,theirs_cls,kw", [
    (SGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.1}),
    (AdamW, torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.2}),
    (Adagrad, torch.optim.Adagrad, {"lr": 0.05, "weight_decay": 0.1}),
])
def test_param_groups_match_torch(ours_cls, theirs_cls, kw):
    """No weight decay and a different lr on the bias, like a second torch param group."""
    groups = [{"params": ["bias"], "weight_decay": 0.0, "lr": 2 * kw["lr"]}]
    torch_groups = [{"params": ["weight"]}, {"params": ["bias"], "weight_decay": 0.0, "lr": 2 * kw["lr"]}]
    run_pair(ours_cls(**kw), theirs_cls, kw, groups=groups, torch_groups=torch_groups)


def test_frozen_group_matches_torch_requires_grad_false():
    kw = {"lr": 0.01, "weight_decay": 0.1}
    flat = run_pair(Adam(**kw), torch.optim.Adam, kw, groups=[{"params": "^bias$", "frozen": True}],
                    torch_groups=[{"params": ["weight"]}, {"params": ["bias"], "frozen_torch": True}])
    np.testing.assert_array_equal(flat[12:], B0)


@pytest.mark.parametrize("clip_kw,clip_fn", [
    ({"clip_norm": 0.5}, lambda ps: torch.nn.utils.clip_grad_norm_(ps, 0.5, foreach=False)),
    ({"clip_value": 0.2}, lambda ps: torch.nn.utils.clip_grad_value_(ps, 0.2, foreach=False)),
], ids=["norm", "value"])
@pytest.mark.parametrize("ours_cls,theirs_cls,kw", [
    (SGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
    (Adam, torch.optim.Adam, {"lr": 0.01}),
])
def test_clipping_matches_torch(ours_cls, theirs_cls, kw, clip_kw, clip_fn):
    run_pair(ours_cls(**kw, **clip_kw), theirs_cls, kw, clip=clip_fn)


SCHEDULES = [
    (lambda: StepLR(7, gamma=0.5, step_by="iteration"),
     lambda o: torch.optim.lr_scheduler.StepLR(o, 7, gamma=0.5)),
    (lambda: MultiStepLR([10, 30, 30, 60], gamma=0.5, step_by="iteration"),
     lambda o: torch.optim.lr_scheduler.MultiStepLR(o, [10, 30, 30, 60], gamma=0.5)),
    (lambda: ExponentialLR(0.97, step_by="iteration"),
     lambda o: torch.optim.lr_scheduler.ExponentialLR(o, 0.97)),
    (lambda: PolynomialLR(80, power=2.0, step_by="iteration"),
     lambda o: torch.optim.lr_scheduler.PolynomialLR(o, total_iters=80, power=2.0)),
    (lambda: CosineAnnealingLR(40, eta_min=1e-3, step_by="iteration"),
     lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 40, eta_min=1e-3)),
    (lambda: LinearWarmup(10, start_factor=0.1, step_by="iteration"),
     lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=10)),
    (lambda: SequentialLR([LinearWarmup(10, 0.1, step_by="iteration"), CosineAnnealingLR(90, step_by="iteration")],
                          [10]),
     lambda o: torch.optim.lr_scheduler.SequentialLR(
         o, [torch.optim.lr_scheduler.LinearLR(o, 0.1, total_iters=10),
             torch.optim.lr_scheduler.CosineAnnealingLR(o, 90)], [10])),
]


@pytest.mark.parametrize("make,make_torch", SCHEDULES, ids=[f"s{i}" for i in range(len(SCHEDULES))])
def test_scheduled_trajectory_matches_torch(make, make_torch):
    kw = {"lr": 0.05, "momentum": 0.9}
    run_pair(SGD(**kw, schedule=make()), torch.optim.SGD, kw, torch_schedule=make_torch)


def test_scheduled_adam_with_groups_matches_torch():
    kw = {"lr": 0.02}
    torch_groups = [{"params": ["weight"]}, {"params": ["bias"], "lr": 0.005}]
    run_pair(Adam(**kw, schedule=StepLR(10, 0.7, step_by="iteration")), torch.optim.Adam, kw,
             groups=[{"params": ["bias"], "lr": 0.005}], torch_groups=torch_groups,
             torch_schedule=lambda o: torch.optim.lr_scheduler.StepLR(o, 10, 0.7))


def test_plateau_trajectory_matches_torch():
    kw = {"lr": 0.2}
    sched = ReduceLROnPlateau(factor=0.5, patience=2, threshold=1e-3, cooldown=1, step_by="iteration")
    opt = SGD(**kw, schedule=sched)
    run_pair(opt, torch.optim.SGD, kw, metric=True,
             torch_schedule=lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(o, factor=0.5, patience=2,
                                                                                 threshold=1e-3, cooldown=1))
    assert sched.current_lr < 0.2  # the noisy loss plateaued and the rate was reduced
