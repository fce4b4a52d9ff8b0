"""Single-process trainer: the step math, determinism, batching, exact resume, evaluate/predict, digits accuracy."""
import numpy as np
import pytest

from sparkdl import nn, set_num_threads
from sparkdl.io import load_checkpoint, save_checkpoint
from sparkdl.metrics import Loss, Top1Accuracy
from sparkdl.nn.module import Module
from sparkdl.optim import SGD, Adam, ExponentialLR, ReduceLROnPlateau
from sparkdl.trainer import History, evaluate, fit, predict, train_step

loss_mod = pytest.importorskip("sparkdl.nn.loss")
CrossEntropyLoss, MSELoss = loss_mod.CrossEntropyLoss, loss_mod.MSELoss


class TrainerTestNoise(Module):
    """Adds N(0, 0.1) noise in training: makes the forward rng observable (stands in for Dropout)."""

    def forward(self, x, *, training=False, rng=None):
        if training:
            x = x + 0.1 * rng.standard_normal(x.shape).astype(x.dtype)
        return x, None

    def backward(self, cache, grad_y, grad_params):
        return grad_y


def mlp(seed=0, noise=False, dtype=np.float32):
    extra = [TrainerTestNoise()] + ([nn.Dropout(0.2)] if hasattr(nn, "Dropout") else []) if noise else []
    layers = [nn.Linear(5, 12), nn.ReLU()] + extra + [nn.Linear(12, 3)]
    return nn.Sequential(*layers).initialize(seed).astype(dtype)


def data(n=22, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 5)).astype(dtype), rng.integers(0, 3, n)


def test_train_step_matches_hand_computation():
    model, (x, y) = mlp(dtype=np.float64), data(7, dtype=np.float64)
    ref = model.copy()
    opt = SGD(lr=0.1).configure(model.parameter_layout())
    state = opt.init_state(0, model.num_parameters(), dtype=np.float64)
    value = train_step(model, CrossEntropyLoss(), opt, state, x, y, 0.1, None)
    # by hand: mean cross-entropy, its gradient through the reference model, one plain SGD step
    out, cache = ref.forward(x, training=True)
    logp = out - out.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    assert value == pytest.approx(-logp[np.arange(7), y].mean(), rel=1e-12)
    gy = np.exp(logp)
    gy[np.arange(7), y] -= 1
    g = ref.zeros_like_parameters()
    ref.backward(cache, gy / 7, g)
    np.testing.assert_allclose(model.flat_parameters, ref.flat_parameters - 0.1 * g, rtol=1e-12, atol=1e-14)
    assert state["step"] == 1


def test_train_step_mean_and_sum_losses_give_the_same_step():
    x, y = data(9)
    results = []
    for reduction in ("mean", "sum"):
        model = mlp()
        opt = Adam(lr=0.01).configure(model.parameter_layout())
        state = opt.init_state(0, model.num_parameters())
        v = train_step(model, CrossEntropyLoss(reduction=reduction), opt, state, x, y, None, None)
        results.append((v, model.flat_parameters.copy()))
    assert results[0][0] == results[1][0]
    np.testing.assert_array_equal(results[0][1], results[1][1])


def _manual(model, opt, sched, x, y, batch_size, epochs, seed):
    """fit's documented semantics, written out with train_step."""
    opt.configure(model.parameter_layout())
    state = opt.init_state(0, model.num_parameters())
    it, losses, lrs = 0, [], []
    for e in range(epochs):
        order = np.random.default_rng([seed, e]).permutation(len(x))
        for s in range(0, len(x), batch_size):
            idx = order[s:s + batch_size]
            lr = sched.lr(opt.lr, iteration=it, epoch=e)
            losses.append(train_step(model, CrossEntropyLoss(), opt, state, x[idx], y[idx], lr,
                                     np.random.default_rng([seed, e, it])))
            lrs.append(lr)
            it += 1
    return losses, lrs


def test_fit_is_train_step_loop_with_documented_rngs_and_partial_batches():
    x, y = data(22)
    a, b = mlp(noise=True), mlp(noise=True)
    h = fit(a, CrossEntropyLoss(), Adam(lr=0.01), x, y, batch_size=8, epochs=3, seed=5,
            schedule=ExponentialLR(0.9, step_by="iteration"))
    losses, lrs = _manual(b, Adam(lr=0.01), ExponentialLR(0.9, step_by="iteration"), x, y, 8, 3, 5)
    assert len(h.loss) == 9  # 22 samples / batch 8 -> 3 batches per epoch (8, 8, 6)
    assert h.loss == losses and h.lr == lrs
    np.testing.assert_array_equal(a.flat_parameters, b.flat_parameters)


def test_fit_is_deterministic_in_the_seed():
    x, y = data(30)
    runs = []
    for seed in (1, 1, 2):
        m = mlp(noise=True)
        fit(m, CrossEntropyLoss(), SGD(lr=0.1, momentum=0.9), x, y, batch_size=7, epochs=2, seed=seed)
        runs.append(m.flat_parameters.copy())
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])


def test_checkpoint_resume_is_bit_exact_with_train_step(tmp_path):
    """3 steps + checkpoint + resume + 1 step == 4 uninterrupted steps, with Adam and a schedule."""
    x, y = data(24)
    sched = ExponentialLR(0.7, step_by="iteration")

    def step(model, opt, state, i):
        idx = np.arange(6 * i, 6 * i + 6)
        lr = sched.lr(opt.lr, iteration=i)
        return train_step(model, CrossEntropyLoss(), opt, state, x[idx], y[idx], lr,
                          np.random.default_rng([0, 0, i]))

    def fresh():
        model = mlp(noise=True)
        opt = Adam(lr=0.02, weight_decay=0.01).configure(model.parameter_layout())
        return model, opt, opt.init_state(0, model.num_parameters())

    model, opt, state = fresh()
    straight = [step(model, opt, state, i) for i in range(4)]
    model2, opt2, state2 = fresh()
    first = [step(model2, opt2, state2, i) for i in range(3)]
    save_checkpoint(tmp_path, model2, iteration=3, optimizer=opt2, schedule=sched,
                    optimizer_state={(0, model2.num_parameters()): state2})
    del model2, state2
    ck = load_checkpoint(tmp_path)
    model3, opt3 = ck.model, Adam(lr=0.02, weight_decay=0.01).configure(ck.model.parameter_layout())
    last = step(model3, opt3, ck.optimizer_state[(0, model3.num_parameters())], ck.iteration)
    assert first + [last] == straight
    np.testing.assert_array_equal(model3.flat_parameters, model.flat_parameters)


@pytest.mark.parametrize("stop_at", [3, 4, 9])  # mid-epoch 0, end of epoch 0, mid-epoch 2
def test_fit_resume_is_bit_exact(tmp_path, stop_at):
    x, y = data(24)
    xv, yv = data(10, seed=1)

    def run(ckdir, resume, max_iterations):
        model = mlp(noise=True)
        sched = ReduceLROnPlateau(patience=0, factor=0.5)
        if resume:
            model.initialize(99)  # weights must come from the checkpoint
        h = fit(model, CrossEntropyLoss(), Adam(lr=0.05), x, y, batch_size=6, epochs=3, seed=3, schedule=sched,
                validation_data=(xv, yv), metrics=[Loss(CrossEntropyLoss()), Top1Accuracy()],
                checkpoint_dir=ckdir, resume=resume, max_iterations=max_iterations, keep_last=2)
        return model, h, sched

    m_ref, h_ref, s_ref = run(None, False, None)
    run(tmp_path, False, stop_at)
    m, h, s = run(tmp_path, True, None)
    np.testing.assert_array_equal(m.flat_parameters, m_ref.flat_parameters)
    assert h.loss == h_ref.loss and h.lr == h_ref.lr and h.validation == h_ref.validation
    assert s.state_dict() == s_ref.state_dict()
    assert len(h.loss) == 12 and len(h.validation["Loss"]) == 3
    assert len(set(h.lr)) > 1  # the plateau schedule did act


def test_history_and_callbacks():
    x, y = data(20)
    seen = []

    class Stopper:
        def on_iteration_end(self, info):
            seen.append(info["iteration"])
            return info["iteration"] == 5

    h = fit(mlp(), CrossEntropyLoss(), SGD(lr=0.1), x, y, batch_size=4, epochs=3, seed=0, callbacks=[Stopper()])
    assert seen == [1, 2, 3, 4, 5] and len(h.loss) == 5 and h.lr == [0.1] * 5
    assert History.from_dict(h.to_dict()) == h


def test_predict_and_evaluate():
    model, (x, y) = mlp(), data(23)
    np.testing.assert_array_equal(predict(model, x, batch_size=5), model(x))
    res = evaluate(model, x, y, [Top1Accuracy(), Loss(CrossEntropyLoss())], batch_size=4)
    assert res["Top1Accuracy"] == pytest.approx(np.mean(np.argmax(model(x), 1) == y))
    assert res["Loss"] == pytest.approx(CrossEntropyLoss().forward(model(x), y)[0], rel=1e-6)


def test_errors(tmp_path):
    model, (x, y) = mlp(), data(10)
    with pytest.raises(ValueError, match="same number of samples"):
        fit(model, CrossEntropyLoss(), SGD(lr=0.1), x, y[:5], batch_size=4, epochs=1, seed=0)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        fit(model, CrossEntropyLoss(), SGD(lr=0.1), x, y, batch_size=0, epochs=1, seed=0)
    with pytest.raises(ValueError, match="need checkpoint_dir"):
        fit(model, CrossEntropyLoss(), SGD(lr=0.1), x, y, batch_size=4, epochs=1, seed=0, resume=True)
    other = SGD(lr=0.1).configure(nn.Linear(2, 2).parameter_layout())
    with pytest.raises(ValueError, match="configured for another layout"):
        fit(model, CrossEntropyLoss(), other, x, y, batch_size=4, epochs=1, seed=0)
    with pytest.raises(ValueError, match="no validation_data"):
        fit(model, CrossEntropyLoss(), SGD(lr=0.1), x, y, batch_size=4, epochs=1, seed=0, monitor="Top1Accuracy")
    fit(model, CrossEntropyLoss(), SGD(lr=0.1), x, y, batch_size=4, epochs=1, seed=0, checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="cannot resume .* same data size, batch_size"):
        fit(model, CrossEntropyLoss(), SGD(lr=0.1), x, y, batch_size=3, epochs=2, seed=0, checkpoint_dir=tmp_path,
            resume=True)
    with pytest.raises(TypeError, match="ValidationMethod"):
        evaluate(model, x, y, ["accuracy"])


@pytest.fixture
def one_thread():
    # Under CPU contention, numba's OpenMP pool (spin-waiting) and OpenBLAS's threads slow each other down
    # by orders of magnitude on small alternating kernels; this test measures accuracy, not threading.
    previous = set_num_threads(1)
    yield
    set_num_threads(previous)


def test_digits_mlp_reaches_97_percent(one_thread):
    datasets = pytest.importorskip("sklearn.datasets")
    model_selection = pytest.importorskip("sklearn.model_selection")
    X, y = datasets.load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    xtr, xte, ytr, yte = model_selection.train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).initialize(0)
    h = fit(model, CrossEntropyLoss(), Adam(lr=2e-3), xtr, ytr, batch_size=32, epochs=20, seed=0,
            validation_data=(xte, yte), metrics=[Top1Accuracy()])
    acc = evaluate(model, xte, yte, [Top1Accuracy()])["Top1Accuracy"]
    assert acc >= 0.97
    assert h.validation["Top1Accuracy"][-1] == acc
    assert np.mean(h.loss[-10:]) < 0.2 < np.mean(h.loss[:10])


def test_train_step_groups_match_torch_batchnorm_per_group():
    """groups=[3, 1, 0, 2]: BatchNorm statistics per group (the 1-row group with running statistics, as in
    evaluation), gradients of the summed loss over the whole batch, running statistics averaged by group size."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 4))
    y = rng.integers(0, 3, 6)
    model = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Linear(5, 3)).initialize(2).astype(np.float64)
    model[1].running_mean[...] = rng.standard_normal(5)
    p0, b0 = model.flat_parameters.copy(), model.flat_buffers.copy()
    lin1, lin2 = torch.nn.Linear(4, 5).double(), torch.nn.Linear(5, 3).double()
    gamma = torch.tensor(model[1].weight, requires_grad=True)
    beta = torch.tensor(model[1].bias, requires_grad=True)
    with torch.no_grad():
        for lin, ours in ((lin1, model[0]), (lin2, model[2])):
            lin.weight.copy_(torch.from_numpy(ours.weight))
            lin.bias.copy_(torch.from_numpy(ours.bias))
    total, means, variances, lo = 0, [], [], 0
    for size in (3, 1, 0, 2):
        if size == 0:
            continue
        rm, rv = torch.tensor(b0[:5]), torch.tensor(b0[5:10])
        h = torch.nn.functional.batch_norm(lin1(torch.from_numpy(x[lo:lo + size])), rm, rv, gamma, beta,
                                           training=size > 1, momentum=0.1, eps=1e-5)
        total = total + torch.nn.functional.cross_entropy(lin2(h), torch.from_numpy(y[lo:lo + size]), reduction="sum")
        means.append(size * rm.numpy())
        variances.append(size * rv.numpy())
        lo += size
    (total / 6).backward()
    opt = SGD(lr=1.0)
    opt.configure(model.parameter_layout())
    value = train_step(model, nn.CrossEntropyLoss(), opt, opt.init_state(0, model.num_parameters()), x, y, None,
                       [None] * 4, groups=[3, 1, 0, 2])
    assert value == pytest.approx(float(total.detach()) / 6, rel=1e-12)
    grads = np.concatenate([t.grad.numpy().reshape(-1) for t in (lin1.weight, lin1.bias, gamma, beta, lin2.weight,
                                                                 lin2.bias)])
    np.testing.assert_allclose(p0 - model.flat_parameters, grads, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(model[1].running_mean, np.sum(means, axis=0) / 6, rtol=1e-12)
    np.testing.assert_allclose(model[1].running_var, np.sum(variances, axis=0) / 6, rtol=1e-12)
    assert float(model[1].num_batches_tracked) == 1
    with pytest.raises(ValueError, match="groups must be non-negative row counts summing to the batch size 6"):
        train_step(model, nn.CrossEntropyLoss(), opt, opt.init_state(0, model.num_parameters()), x, y, None, None,
                   groups=[3, 2])
