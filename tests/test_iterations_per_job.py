"""Several iterations in one Spark job (``iterations_per_job``; jvm_bridge Rendezvous and TaskLink): bitwise the
results of one job per iteration, jobs cut where triggers fire, failures replayed, divergence kept exact."""
import glob
import os
import time

import numpy as np
import pytest

from sparkdl import metrics, nn
from sparkdl.engine import (DataBlocks, DistributedTrainer, EveryEpoch, MaxEpoch, MaxIteration, MinLoss,
                            SeveralIteration, TrainerOptions, TrainingDivergedError)
from sparkdl.engine.triggers import MaxScore, Trigger
from sparkdl.jvm import start_profiler, stop_profiler
from sparkdl.optim import SGD, Adam, AdamW
from sparkdl.optim.schedules import ReduceLROnPlateau


def _data(n=90, d=6, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)).astype(np.float32), rng.integers(0, classes, n)


def _model(norm=False):
    layers = [nn.Linear(6, 16)] + ([nn.BatchNorm1d(16)] if norm else []) + [nn.ReLU(), nn.Dropout(0.2),
                                                                            nn.Linear(16, 3)]
    return nn.Sequential(*layers).initialize(1)


def _fit(data, model, opt, per_job, val=None, fault_hook=None, **kw):
    kw = {"end_trigger": MaxEpoch(3), **kw}
    trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), opt, batch_size=20, seed=5, progress=False,
                                 jvm_reduce=True, iterations_per_job=per_job, **kw)
    trainer._fault_hook = fault_hook
    return trainer.fit(data, val), trainer


@pytest.fixture(scope="module")
def data(spark):
    x, y = _data()  # 5 iterations per epoch, the last one partial
    blocks = DataBlocks.from_numpy(spark.sparkContext, x, y, 3)
    yield blocks
    blocks.unpersist()


def _gradient_jobs(sc, run):
    """The number of Spark jobs ``run()`` ran with more than one task (the gradient jobs; not the tiny ones)."""
    start_profiler(sc)
    out = run()
    time.sleep(1.0)  # the listener bus delivers the last job's events asynchronously
    jobs = stop_profiler(sc)
    return out, sum(1 for j in jobs if j["stages"] and j["stages"][0]["tasks"] > 1)


CASES = {
    "sgd_momentum": (lambda: SGD(lr=0.1, momentum=0.9), {}, False),
    "adam_amsgrad_batchnorm": (lambda: Adam(lr=0.01, amsgrad=True, weight_decay=1e-3), {}, True),
    "adamw_clip_value_fp16": (lambda: AdamW(lr=0.01, clip_value=0.1), {"compress": "fp16"}, False),
    "adam_clip_norm": (lambda: Adam(lr=0.01, clip_norm=0.5), {}, True),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("per_job", [None, 4])
def test_bitwise_equal_to_one_job_per_iteration(spark, data, name, per_job):
    make, kw, norm = CASES[name]
    one, many = _model(norm), _model(norm)
    s1, _ = _fit(data, one, make(), 1, **kw)
    (s2, _), jobs = _gradient_jobs(spark.sparkContext, lambda: _fit(data, many, make(), per_job, **kw))
    assert len(s2.iterations) == len(s1.iterations) == 15
    np.testing.assert_array_equal(s2.loss, s1.loss)
    np.testing.assert_array_equal(many.flat_parameters, one.flat_parameters)
    np.testing.assert_array_equal(many.flat_buffers, one.flat_buffers)
    # the first iteration runs alone (on the full partitions, timing the next job's length), then 14 in jobs of
    # at most 4 or, by default, of ~1 s each (JOB_SECONDS / the last iteration's time: one to three jobs here)
    if per_job == 4:
        assert jobs == 1 + 4
    else:
        assert 2 <= jobs <= 4


def test_jobs_end_where_validation_checkpoint_and_snapshot_triggers_fire(spark, data, tmp_path):
    x, y = _data(n=30, seed=1)
    val = DataBlocks.from_numpy(spark.sparkContext, x, y, 1)
    kw = dict(validation_trigger=EveryEpoch(), validation_metrics=[metrics.Top1Accuracy()],
              checkpoint_trigger=SeveralIteration(4), snapshot_interval=6,
              end_trigger=MaxIteration(14) | MaxScore(2.0))
    one, many = _model(), _model()
    s1, _ = _fit(data, one, Adam(lr=0.01), 1, val, checkpoint_dir=str(tmp_path / "one"), **kw)
    (s2, trainer), jobs = _gradient_jobs(spark.sparkContext, lambda: _fit(
        data, many, Adam(lr=0.01), 100, val, checkpoint_dir=str(tmp_path / "many"), **kw))
    assert [v["iteration"] for v in s2.validations] == [v["iteration"] for v in s1.validations] == [5, 10]
    np.testing.assert_array_equal([v["Top1Accuracy"] for v in s2.validations],
                                  [v["Top1Accuracy"] for v in s1.validations])
    assert sorted(os.listdir(tmp_path / "many")) == sorted(os.listdir(tmp_path / "one"))
    np.testing.assert_array_equal(many.flat_parameters, one.flat_parameters)
    # jobs end after iterations 1 (alone), 4 (checkpoint), 5 (validation), 6 (snapshot), 8, 10, 12, 14
    assert jobs == 8
    val.unpersist()


class _EveryThird(Trigger):  # a trigger of the user's own: may read anything, so evaluated after each iteration
    def __call__(self, state):
        return state.iteration >= 3


@pytest.mark.parametrize("what", ["min_loss", "own_trigger", "plateau_schedule"])
def test_unpredictable_triggers_and_stateful_schedules_run_a_job_per_iteration(spark, data, what):
    end = {"min_loss": MaxIteration(6) | MinLoss(-1.0), "own_trigger": _EveryThird() | MaxIteration(6)}.get(
        what, MaxIteration(6))
    opt = Adam(lr=0.01, schedule=ReduceLROnPlateau(mode="max") if what == "plateau_schedule" else None)
    model = _model()
    (summary, _), jobs = _gradient_jobs(spark.sparkContext, lambda: _fit(data, model, opt, None, end_trigger=end))
    assert len(summary.iterations) == (3 if what == "own_trigger" else 6)
    assert jobs == len(summary.iterations)


def test_more_group_tasks_than_slots_run_a_job_per_iteration(spark, data, monkeypatch):
    """Tasks of a multi-iteration job wait for each other: with more group tasks than task slots (5 on local[2])
    they could never all run, so the trainer must not start such a job (it deadlocked before the slot check)."""
    from sparkdl.engine import loop
    one = _model()
    _fit(data, one, Adam(lr=0.01), 1, end_trigger=MaxIteration(6))
    monkeypatch.setattr(loop, "_task_slots", lambda sc: 5)
    many = _model()
    (summary, _), jobs = _gradient_jobs(spark.sparkContext, lambda: _fit(data, many, Adam(lr=0.01), 100,
                                                                        end_trigger=MaxIteration(6)))
    assert jobs == 6
    np.testing.assert_array_equal(many.flat_parameters, one.flat_parameters)


def test_a_failed_job_is_replayed_one_iteration_per_job_bitwise(spark, data, caplog):
    clean, faulty = _model(), _model()
    _fit(data, clean, Adam(lr=0.01), 1)

    def hook(stage, partition, epoch, iteration, attempt):
        if attempt == 0 and partition == 2 and iteration == 6:
            from sparkdl.engine.tasks import FaultInjected
            raise FaultInjected(f"injected failure, partition {partition}, iteration {iteration}")
    with caplog.at_level("WARNING", logger="sparkdl.engine"):
        summary, _ = _fit(data, faulty, Adam(lr=0.01), 100, fault_hook=hook)
    replays = [r.getMessage() for r in caplog.records if "replaying" in r.getMessage()]
    assert len(replays) == 1  # the multi-iteration job (iterations 2-15) failed once, then one job per iteration
    assert len(summary.iterations) == 15
    np.testing.assert_array_equal(clean.flat_parameters, faulty.flat_parameters)


def test_a_job_that_cannot_start_turns_them_off_without_a_replay(spark, data, caplog):
    """A multi-iteration job that fails before any task reaches the driver (here every task of its first iteration
    fails, in every attempt of the barrier stage; on a cluster, e.g. one that refuses barrier stages) costs no
    recovery: that iteration and the rest run one job each, where Spark retries the failed tasks alone."""
    clean, faulty = _model(), _model()
    _fit(data, clean, Adam(lr=0.01), 1)

    def hook(stage, partition, epoch, iteration, attempt):
        if attempt == 0 and iteration == 1:  # the first iteration of the first such job, every partition
            from sparkdl.engine.tasks import FaultInjected
            raise FaultInjected(f"injected failure, partition {partition}, iteration {iteration}")
    with caplog.at_level("INFO", logger="sparkdl.engine"):
        summary, _ = _fit(data, faulty, Adam(lr=0.01), 100, fault_hook=hook)
    messages = [r.getMessage() for r in caplog.records]
    assert not any("replaying" in m for m in messages)
    assert sum("could not start" in m for m in messages) == 1
    assert len(summary.iterations) == 15
    np.testing.assert_array_equal(clean.flat_parameters, faulty.flat_parameters)


def test_divergence_inside_a_job_keeps_the_last_good_weights(spark):
    x, y = _data()
    x[61] = 3e38  # a row that the shuffled batches reach only after a few iterations
    data = DataBlocks.from_numpy(spark.sparkContext, x, y, 3)
    errors, weights = [], []
    for per_job in (1, 100):
        model = _model()
        with pytest.raises(TrainingDivergedError) as e:
            _fit(data, model, SGD(lr=0.1), per_job)
        errors.append(str(e.value).split(":")[0])
        weights.append(model.flat_parameters.copy())
    assert errors[0] == errors[1]
    assert "iteration 1 " not in errors[0] and "iteration 2 " not in errors[0]  # past the lone first iteration
    np.testing.assert_array_equal(weights[1], weights[0])
    assert np.isfinite(weights[1]).all()
    data.unpersist()


def test_task_links_live_in_the_spark_local_dir_until_the_job_ends(spark, data, tmp_path):
    sc = spark.sparkContext
    local_dir = sc._jvm.org.apache.spark.util.Utils.getLocalDir(sc._jsc.sc().conf())  # this JVM's, not a shared one
    seen = tmp_path / "seen"

    def hook(stage, partition, epoch, iteration, attempt):  # runs in the workers, mid-job
        if iteration == 5:
            with open(seen, "a") as f:
                for path in glob.glob(os.path.join(local_dir, "sparkdl-link-*", "s")):
                    f.write(f"{path} {oct(os.stat(os.path.dirname(path)).st_mode & 0o777)}\n")
    _fit(data, _model(), Adam(lr=0.01), 100, fault_hook=hook)
    during = set(seen.read_text().splitlines())
    assert len(during) == 2  # one socket per group task (local[2]), in a directory only its user can enter
    assert all(line.endswith(" 0o700") for line in during)
    assert glob.glob(os.path.join(local_dir, "sparkdl-link-*")) == []


def test_predictable_triggers():
    assert all(t.predictable for t in (MaxEpoch(1), MaxIteration(1), EveryEpoch(), SeveralIteration(2), MaxScore(1),
                                       MaxEpoch(2) | EveryEpoch(), MaxIteration(3) & SeveralIteration(2)))
    assert not any(t.predictable for t in (MinLoss(0.1), MaxEpoch(2) | MinLoss(0.1), _EveryThird(),
                                           SeveralIteration(2) & _EveryThird()))


@pytest.mark.parametrize("bad", [0, -1, True, 2.0])
def test_iterations_per_job_is_validated(bad):
    with pytest.raises(ValueError, match=r"iterations_per_job must be None or an int >= 1, got"):
        TrainerOptions(batch_size=4, iterations_per_job=bad)


def test_link_sends_every_part_in_order_through_partial_sends():
    """task_link._send_all over a small socket buffer (partial sendmsg calls) and more parts than one call takes."""
    import socket
    import threading

    from sparkdl.engine.task_link import _MAX_PARTS, _send_all
    rng = np.random.default_rng(0)
    parts = [rng.integers(0, 256, int(n), dtype=np.uint8).tobytes() for n in rng.integers(0, 3000, 3 * _MAX_PARTS)]
    parts[5] = memoryview(np.arange(1000, dtype=np.float32))  # a buffer of 4-byte items is sent as its bytes
    expected = b"".join(bytes(p) for p in parts)
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    received = bytearray()

    def read():
        while len(received) < len(expected):
            received.extend(b.recv(1 << 16))
    reader = threading.Thread(target=read)
    reader.start()
    _send_all(a, parts)
    reader.join(timeout=30)
    a.close()
    b.close()
    assert bytes(received) == expected
