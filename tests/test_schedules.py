"""Learning-rate schedules: 100-step sequences equal torch.optim.lr_scheduler; units, state, config, errors."""
import json
import warnings

import numpy as np
import pytest

from sparkdl.optim import (CosineAnnealingLR, ExponentialLR, LinearWarmup, MultiStepLR, PolynomialLR,
                           ReduceLROnPlateau, SequentialLR, StepLR, schedule_config, schedule_from_config)

torch = pytest.importorskip("torch")
lrs = torch.optim.lr_scheduler
BASE = 0.1
STEPS = 100


def torch_sequence(make_sched, metrics=None):
    """lr of the torch scheduler before each of STEPS steps (stepped once per step)."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=BASE)
    sched = make_sched(opt)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(STEPS):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step(metrics[k]) if metrics is not None else sched.step()
    return np.array(out)


CASES = [
    (lambda u: StepLR(10, gamma=0.5, step_by=u), lambda o: lrs.StepLR(o, 10, gamma=0.5)),
    (lambda u: StepLR(1, step_by=u), lambda o: lrs.StepLR(o, 1)),
    (lambda u: MultiStepLR([5, 20, 20, 70], gamma=0.3, step_by=u), lambda o: lrs.MultiStepLR(o, [5, 20, 20, 70], 0.3)),
    (lambda u: ExponentialLR(0.95, step_by=u), lambda o: lrs.ExponentialLR(o, 0.95)),
    (lambda u: PolynomialLR(60, power=2.0, step_by=u), lambda o: lrs.PolynomialLR(o, total_iters=60, power=2.0)),
    (lambda u: PolynomialLR(step_by=u), lambda o: lrs.PolynomialLR(o)),
    (lambda u: CosineAnnealingLR(100, step_by=u), lambda o: lrs.CosineAnnealingLR(o, 100)),
    (lambda u: CosineAnnealingLR(30, eta_min=0.01, step_by=u), lambda o: lrs.CosineAnnealingLR(o, 30, eta_min=0.01)),
    (lambda u: LinearWarmup(20, start_factor=0.05, step_by=u), lambda o: lrs.LinearLR(o, 0.05, total_iters=20)),
    (lambda u: LinearWarmup(step_by=u), lambda o: lrs.LinearLR(o)),
    (lambda u: LinearWarmup(10, 1.0, 0.2, step_by=u), lambda o: lrs.LinearLR(o, 1.0, 0.2, total_iters=10)),
    (lambda u: SequentialLR([LinearWarmup(10, 0.1, step_by=u), CosineAnnealingLR(90, eta_min=1e-3, step_by=u)], [10]),
     lambda o: lrs.SequentialLR(o, [lrs.LinearLR(o, 0.1, total_iters=10), lrs.CosineAnnealingLR(o, 90, 1e-3)], [10])),
    (lambda u: SequentialLR([LinearWarmup(5, 0.2, step_by=u), StepLR(10, 0.5, step_by=u),
                             ExponentialLR(0.9, step_by=u)], [5, 40]),
     lambda o: lrs.SequentialLR(o, [lrs.LinearLR(o, 0.2, total_iters=5), lrs.StepLR(o, 10, 0.5),
                                    lrs.ExponentialLR(o, 0.9)], [5, 40])),
]


@pytest.mark.parametrize("make,make_torch", CASES, ids=[f"c{i}" for i in range(len(CASES))])
def test_sequence_matches_torch(make, make_torch):
    expected = torch_sequence(make_torch)
    by_epoch, by_iter = make("epoch"), make("iteration")
    got_epoch = [by_epoch.lr(BASE, epoch=k, iteration=1000 + k) for k in range(STEPS)]
    got_iter = [by_iter.lr(BASE, iteration=k, epoch=7) for k in range(STEPS)]
    np.testing.assert_allclose(got_epoch, expected, rtol=1e-5, atol=1e-12)
    np.testing.assert_array_equal(got_epoch, got_iter)
    assert len(set(np.round(expected, 12))) > 1           # the schedule really changes the rate
    # closed forms: evaluation order does not matter (a resumed run needs no state)
    assert by_epoch.lr(BASE, epoch=37) == got_epoch[37] and by_epoch.state_dict() == {}


def plateau_metrics(seed=0):
    rng = np.random.default_rng(seed)
    decreasing = 1.0 / np.arange(1, 31)
    flat = 1.0 / 30 + 1e-5 * rng.standard_normal(40)
    return np.concatenate([decreasing, flat, flat[:30] * 0.5 + rng.uniform(0, 1e-3, 30)])


@pytest.mark.parametrize("kw", [
    {},
    {"factor": 0.5, "patience": 2, "cooldown": 3},
    {"mode": "max", "factor": 0.3, "patience": 1, "threshold": 0.01, "threshold_mode": "abs"},
    {"factor": 0.5, "patience": 0, "min_lr": 0.02},
    {"patience": 3, "threshold": 0.1, "threshold_mode": "rel", "eps": 1e-3},
], ids=["default", "cooldown", "max-abs", "min_lr", "rel-eps"])
def test_plateau_matches_torch(kw):
    metrics = plateau_metrics()
    if kw.get("mode") == "max":
        metrics = -metrics
    expected = torch_sequence(lambda o: lrs.ReduceLROnPlateau(o, **kw), metrics)
    sched = ReduceLROnPlateau(**kw)
    got = []
    for k in range(STEPS):
        last = metrics[k - 1] if k > 0 else None
        got.append(sched.lr(BASE, epoch=k, metric=last))
        assert sched.lr(BASE, epoch=k, metric=last) == got[-1]   # a repeated step consumes nothing
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert min(got) < BASE


def test_plateau_state_round_trip_through_json():
    metrics = plateau_metrics(1)
    a = ReduceLROnPlateau(factor=0.5, patience=2, cooldown=1, step_by="iteration")
    seq_a = [a.lr(BASE, iteration=k, metric=metrics[k - 1] if k else None) for k in range(STEPS)]
    b = ReduceLROnPlateau(factor=0.5, patience=2, cooldown=1, step_by="iteration")
    seq_b = [b.lr(BASE, iteration=k, metric=metrics[k - 1] if k else None) for k in range(50)]
    state = json.loads(json.dumps(b.state_dict()))
    assert set(state) == {"best", "num_bad_epochs", "cooldown_counter", "current_lr", "last_t"}
    c = schedule_from_config(json.loads(json.dumps(schedule_config(b))))
    c.load_state_dict(state)
    seq_b += [c.lr(BASE, iteration=k, metric=metrics[k - 1]) for k in range(50, STEPS)]
    assert seq_a == seq_b
    with pytest.raises(ValueError, match=r"expected keys"):
        c.load_state_dict({"best": 1.0})
    with pytest.raises(TypeError, match=r"no closed form"):
        c.lr_at(BASE, 3)


@pytest.mark.parametrize("make", [c[0] for c in CASES] + [lambda u: ReduceLROnPlateau(patience=4, step_by=u)],
                         ids=[f"c{i}" for i in range(len(CASES))] + ["plateau"])
def test_config_round_trip(make):
    s = make("iteration")
    data = json.loads(json.dumps(schedule_config(s)))
    clone = schedule_from_config(data)
    assert type(clone) is type(s) and clone.get_config() == s.get_config()
    assert [clone.lr(BASE, iteration=k) for k in range(0, STEPS, 7)] == [s.lr(BASE, iteration=k)
                                                                         for k in range(0, STEPS, 7)]


@pytest.mark.parametrize("make,exc,match", [
    (lambda: StepLR(0), ValueError, r"StepLR: step_size must be >= 1, got 0"),
    (lambda: StepLR(3, gamma=-0.1), ValueError, r"StepLR: gamma must be in \(0.0, inf\), got -0.1"),
    (lambda: StepLR(2.5), TypeError, r"StepLR: step_size must be an int, got float"),
    (lambda: StepLR(3, step_by="batch"), ValueError, r"StepLR: step_by must be one of \['epoch', 'iteration'\]"),
    (lambda: MultiStepLR([3, -1]), ValueError, r"MultiStepLR: milestones\[\] must be >= 0, got -1"),
    (lambda: MultiStepLR(5), TypeError, r"milestones must be a list of ints"),
    (lambda: CosineAnnealingLR(0), ValueError, r"CosineAnnealingLR: T_max must be >= 1"),
    (lambda: CosineAnnealingLR(10, eta_min=-1.0), ValueError, r"eta_min must be in \[0.0, inf\)"),
    (lambda: PolynomialLR(0), ValueError, r"PolynomialLR: total_iters must be >= 1"),
    (lambda: LinearWarmup(5, start_factor=0.0), ValueError, r"LinearWarmup: start_factor must be in \(0.0, 1.0\]"),
    (lambda: LinearWarmup(5, end_factor=1.5), ValueError, r"LinearWarmup: end_factor must be in \[0.0, 1.0\]"),
    (lambda: ReduceLROnPlateau(factor=1.0), ValueError, r"ReduceLROnPlateau: factor must be in \[0.0, 1.0\)"),
    (lambda: ReduceLROnPlateau(mode="avg"), ValueError, r"mode must be one of \['max', 'min'\], got 'avg'"),
    (lambda: ReduceLROnPlateau(threshold_mode="x"), ValueError, r"threshold_mode must be one of"),
    (lambda: ReduceLROnPlateau(patience=-1), ValueError, r"patience must be >= 0"),
    (lambda: SequentialLR([StepLR(2), StepLR(2, step_by="iteration")], [3]), ValueError, r"share one step_by"),
    (lambda: SequentialLR([StepLR(2), StepLR(3)], [3, 4]), ValueError, r"expected 1 milestones"),
    (lambda: SequentialLR([StepLR(2), StepLR(3), StepLR(4)], [5, 3]), ValueError, r"non-decreasing"),
    (lambda: SequentialLR([StepLR(2), ReduceLROnPlateau()], [3]), TypeError, r"schedules\[1\] must be a stateless"),
    (lambda: SequentialLR([], []), ValueError, r"non-empty list"),
    (lambda: StepLR(2).lr(0.1, epoch=-1), ValueError, r"StepLR: epoch must be >= 0, got -1"),
    (lambda: StepLR(2).load_state_dict({"x": 1}), ValueError, r"stateless schedule takes \{\}"),
    (lambda: schedule_from_config({"class": "OneCycleLR"}), ValueError, r"unknown schedule class 'OneCycleLR'"),
])
def test_schedule_errors(make, exc, match):
    with pytest.raises(exc, match=match):
        make()
