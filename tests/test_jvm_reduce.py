"""The JVM AllReduce (jvm_bridge TrainingLoop) against the Python reduce it replaces: bitwise equal."""
import time

import numpy as np
import pytest

from sparkdl import nn
from sparkdl.engine import DataBlocks, DistributedTrainer, MaxEpoch, MaxIteration, TrainingDivergedError
from sparkdl.engine import jvm_reduce
from sparkdl.engine.jvm_reduce import pack_states, supports, unpack_states
from sparkdl.jvm import persistent_rdd_count, resident_weight_blocks, start_profiler, stop_profiler
from sparkdl.optim import SGD, Adagrad, Adam, AdamW


def _data(n=96, d=6, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.integers(0, classes, n)
    return x, y


def _model(seed=1, norm=False):
    layers = [nn.Linear(6, 16)] + ([nn.BatchNorm1d(16)] if norm else []) + [nn.ReLU(), nn.Dropout(0.2),
                                                                            nn.Linear(16, 3)]
    return nn.Sequential(*layers).initialize(seed)


def _fit(data, model, opt, jvm, epochs=2, groups=None, fault_hook=None, **kw):
    trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), opt, batch_size=20, end_trigger=MaxEpoch(epochs),
                                 seed=5, progress=False, jvm_reduce=jvm, **kw)
    trainer._fault_hook = fault_hook  # the test hook is a private attribute, not an option
    summary = trainer.fit(data)
    return summary, trainer


def _groups(layout):
    return [{"params": ["0.bias"], "lr": 0.05, "weight_decay": 0.0}, {"params": [layout.names()[-1]], "frozen": True}]


OPTIMIZERS = {
    "sgd": lambda: SGD(lr=0.1),
    "sgd_momentum_dampening_wd": lambda: SGD(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=1e-3),
    "sgd_nesterov_clip_value": lambda: SGD(lr=0.1, momentum=0.9, nesterov=True, clip_value=0.05),
    "adam": lambda: Adam(lr=0.01),
    "adam_wd_amsgrad": lambda: Adam(lr=0.01, weight_decay=1e-2, amsgrad=True),
    "adamw_clip_value": lambda: AdamW(lr=0.01, clip_value=0.1),
}


@pytest.fixture(scope="module")
def data(spark):
    x, y = _data(n=50)  # 3 iterations per epoch, the last one partial
    blocks = DataBlocks.from_samples(spark.sparkContext.parallelize(list(zip(x, y)), 3))
    yield blocks
    blocks.unpersist()


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_bitwise_equal_to_python_reduce(data, name):
    py_model, jvm_model = _model(), _model()
    py, _ = _fit(data, py_model, OPTIMIZERS[name](), False)
    jv, trainer = _fit(data, jvm_model, OPTIMIZERS[name](), True)
    assert len(jv.loss) == 6
    np.testing.assert_array_equal(jv.loss, py.loss)
    np.testing.assert_array_equal(jvm_model.flat_parameters, py_model.flat_parameters)
    assert not np.array_equal(jvm_model.flat_parameters, _model().flat_parameters)  # it trained


@pytest.fixture
def executor_reduce(monkeypatch):
    """One block reduced in a JVM task instead of on the driver."""
    monkeypatch.setattr(jvm_reduce, "DRIVER_REDUCE", False)


@pytest.mark.parametrize("name", ["sgd_nesterov_clip_value", "adam_wd_amsgrad"])
def test_one_block_reduced_in_a_task_is_bitwise_equal_too(data, name, executor_reduce):
    py_model, jvm_model = _model(), _model()
    py, _ = _fit(data, py_model, OPTIMIZERS[name](), False)
    jv, trainer = _fit(data, jvm_model, OPTIMIZERS[name](), True)
    np.testing.assert_array_equal(jv.loss, py.loss)
    np.testing.assert_array_equal(jvm_model.flat_parameters, py_model.flat_parameters)


def test_driver_reduce_runs_one_stage_per_iteration(spark, data, monkeypatch):
    driver_model, task_model = _model(), _model()
    start_profiler(spark.sparkContext)
    _fit(data, driver_model, Adam(lr=0.01), True, epochs=1, iterations_per_job=1)
    time.sleep(1.0)  # the listener bus delivers the last job's events asynchronously
    one = stop_profiler(spark.sparkContext)
    monkeypatch.setattr(jvm_reduce, "DRIVER_REDUCE", False)
    start_profiler(spark.sparkContext)
    _fit(data, task_model, Adam(lr=0.01), True, epochs=1)
    time.sleep(1.0)
    two = stop_profiler(spark.sparkContext)
    iterations = 3  # 50 rows, batch 20
    # The first iteration's 3 partition records exceed 2 per executor (local[2]: one), so they are combined in
    # a JVM stage first; the next ones send one record per group task (2) straight to the driver.
    assert [len(j["stages"]) for j in one if j["stages"]][-iterations:] == [2, 1, 1]
    assert [len(j["stages"]) for j in two if j["stages"]][-iterations:] == [2] * iterations
    np.testing.assert_array_equal(driver_model.flat_parameters, task_model.flat_parameters)


@pytest.mark.parametrize("groups", [False, True], ids=["one_segment", "groups_and_frozen"])
@pytest.mark.parametrize("driver", [True, False], ids=["driver_reduce", "executor_reduce"])
def test_clip_norm_bitwise(spark, groups, driver, monkeypatch):
    """clip_norm with one block: the JVM's float64 norm (8192-element block sums, numpy's pairwise sum, fsum
    over segments) equals the Python path's bit for bit; 81k parameters = 10 norm blocks."""
    monkeypatch.setattr(jvm_reduce, "DRIVER_REDUCE", driver)
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((64, 200)).astype(np.float32), rng.integers(0, 3, 64)
    data = DataBlocks.from_numpy(spark.sparkContext, x, y, 2)

    def run(jvm, clip_norm=0.5):
        model = nn.Sequential(nn.Linear(200, 400), nn.ReLU(), nn.Linear(400, 3)).initialize(2)
        opt = SGD(lr=0.1, clip_norm=clip_norm)
        if groups:
            opt.configure(model.parameter_layout(), [{"params": ["0.bias"], "lr": 0.05},
                                                     {"params": ["2.bias"], "frozen": True}])
        trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), opt, batch_size=16, end_trigger=MaxEpoch(1),
                                     seed=5, progress=False, jvm_reduce=jvm)
        trainer.fit(data)
        return model
    py_model = run(False)
    jvm_model = run(True)
    np.testing.assert_array_equal(jvm_model.flat_parameters, py_model.flat_parameters)
    assert not np.array_equal(run(True, clip_norm=None).flat_parameters, py_model.flat_parameters)  # it clipped
    data.unpersist()


@pytest.mark.parametrize("name", ["sgd_momentum_dampening_wd", "adam_wd_amsgrad", "adamw_clip_value"])
def test_driver_update_split_over_two_threads_is_bitwise_the_python_reduce(spark, name):
    """A one-block model of 81k parameters: the driver updates the two halves of its block on two threads
    (jvm_bridge DriverSplit, from 32,768 elements), in jobs of one and of several iterations."""
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((96, 200)).astype(np.float32), rng.integers(0, 3, 96)
    data = DataBlocks.from_numpy(spark.sparkContext, x, y, 2)

    def run(jvm, **kw):
        model = nn.Sequential(nn.Linear(200, 400), nn.ReLU(), nn.Linear(400, 3)).initialize(2)
        trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), OPTIMIZERS[name](), batch_size=16,
                                     end_trigger=MaxEpoch(2), seed=5, progress=False, jvm_reduce=jvm, **kw)
        return trainer.fit(data), model
    (py, py_model), (jv, jvm_model), (one, one_model) = run(False), run(True), run(True, iterations_per_job=1)
    assert jvm_model.num_parameters() >= 2 * 32768
    for summary, model in ((jv, jvm_model), (one, one_model)):
        np.testing.assert_array_equal(summary.loss, py.loss)
        np.testing.assert_array_equal(model.flat_parameters, py_model.flat_parameters)
    data.unpersist()


@pytest.mark.parametrize("blocks, driver", [(1, True), (1, False), (3, False)],
                         ids=["driver_reduce", "executor_reduce", "three_blocks"])
def test_fp16_records_bitwise_equal_to_python_reduce(data, blocks, driver, monkeypatch):
    """compress='fp16': float16 records, widened exactly and summed in float32 on the JVM as numpy does."""
    monkeypatch.setattr(jvm_reduce, "DRIVER_REDUCE", driver)
    py_model, jvm_model, fp32_model = _model(), _model(), _model()
    opt = lambda: Adam(lr=0.01, weight_decay=1e-2, clip_norm=0.5 if blocks == 1 else None)
    py, _ = _fit(data, py_model, opt(), False, num_blocks=blocks, compress="fp16")
    jv, _ = _fit(data, jvm_model, opt(), True, num_blocks=blocks, compress="fp16")
    _fit(data, fp32_model, opt(), True, num_blocks=blocks)
    np.testing.assert_array_equal(jv.loss, py.loss)
    np.testing.assert_array_equal(jvm_model.flat_parameters, py_model.flat_parameters)
    assert not np.array_equal(jvm_model.flat_parameters, fp32_model.flat_parameters)  # the rounding is real


def test_half_widening_matches_numpy_for_every_bit_pattern(spark):
    from sparkdl.jvm import widen_halves
    halves = np.arange(65536, dtype="<u2")
    widened = np.frombuffer(widen_halves(spark.sparkContext, halves.tobytes()), "<f4")
    expected = halves.view("<f2").astype("<f4")
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(widened.view("<u4")[finite], expected.view("<u4")[finite])  # bitwise, incl. -0
    assert np.isnan(widened[np.isnan(expected)]).all()
    assert (widened[np.isinf(expected)] == expected[np.isinf(expected)]).all()


def test_clip_norm_with_several_blocks_is_refused_for_jvm_reduce(data):
    trainer = DistributedTrainer(_model(), nn.CrossEntropyLoss(), SGD(lr=0.1, clip_norm=1.0), batch_size=20,
                                 num_blocks=2, progress=False, jvm_reduce=None)
    trainer.fit(data)  # automatic: the Python reduce
    with pytest.raises(ValueError, match="clip_norm needs the global gradient norm"):
        DistributedTrainer(_model(), nn.CrossEntropyLoss(), SGD(lr=0.1, clip_norm=1.0), batch_size=20,
                           num_blocks=2, progress=False, jvm_reduce=True)


def test_param_groups_frozen_batchnorm_and_blocks_bitwise(data):
    def opt(model):
        o = AdamW(lr=0.01)
        o.configure(model.parameter_layout(), _groups(model.parameter_layout()))
        return o
    py_model, jvm_model = _model(norm=True), _model(norm=True)
    frozen_before = jvm_model.flat_parameters[-3:].copy()
    py, _ = _fit(data, py_model, opt(py_model), False, num_blocks=3)
    jv, _ = _fit(data, jvm_model, opt(jvm_model), True, num_blocks=3)
    np.testing.assert_array_equal(jv.loss, py.loss)
    np.testing.assert_array_equal(jvm_model.flat_parameters, py_model.flat_parameters)
    np.testing.assert_array_equal(jvm_model.flat_buffers, py_model.flat_buffers)  # BatchNorm running stats
    np.testing.assert_array_equal(jvm_model.flat_parameters[-3:], frozen_before)


@pytest.mark.parametrize("compress", [None, "fp16"])
def test_many_partitions_grouped_per_core_bitwise(spark, compress):
    """12 partitions on local[2]: after the first iteration two group tasks compute all partitions (and, with
    fp16, widen their compressed leaves to add them in the task's tree)."""
    x, y = _data(n=120)
    data = DataBlocks.from_numpy(spark.sparkContext, x, y, 12)
    py_model, jvm_model = _model(), _model()
    py, _ = _fit(data, py_model, Adam(lr=0.01), False, epochs=1, compress=compress)
    jv, trainer = _fit(data, jvm_model, Adam(lr=0.01), True, epochs=1, compress=compress)
    np.testing.assert_array_equal(jv.loss, py.loss)
    np.testing.assert_array_equal(jvm_model.flat_parameters, py_model.flat_parameters)
    data.unpersist()


@pytest.mark.parametrize("driver", [True, False], ids=["driver_reduce", "executor_reduce"])
def test_checkpoint_resume_and_states_round_trip(data, tmp_path, driver, monkeypatch):
    monkeypatch.setattr(jvm_reduce, "DRIVER_REDUCE", driver)
    whole = _model()
    _fit(data, whole, Adam(lr=0.01), True, epochs=2)
    part = _model()
    _fit(data, part, Adam(lr=0.01), True, epochs=1, checkpoint_dir=str(tmp_path))
    resumed = part.copy()
    trainer = DistributedTrainer(resumed, nn.CrossEntropyLoss(), Adam(lr=0.01), batch_size=20,
                                 end_trigger=MaxEpoch(2), seed=5, progress=False, jvm_reduce=True,
                                 checkpoint_dir=str(tmp_path))
    trainer.fit(data, resume=True)
    np.testing.assert_array_equal(resumed.flat_parameters, whole.flat_parameters)


def test_task_failures_retried_bit_identically(data):
    clean, faulty = _model(), _model()
    _fit(data, clean, Adam(lr=0.01), True, epochs=1)

    def hook(stage, partition, epoch, iteration, attempt):
        if attempt == 0 and partition == 1 and iteration in (0, 2):
            from sparkdl.engine.tasks import FaultInjected
            raise FaultInjected(f"injected failure, partition {partition}, iteration {iteration}")
    _fit(data, faulty, Adam(lr=0.01), True, epochs=1, fault_hook=hook)
    np.testing.assert_array_equal(clean.flat_parameters, faulty.flat_parameters)


def test_divergence_keeps_last_good_weights(spark):
    x, y = _data()
    x *= 1e30
    data = DataBlocks.from_numpy(spark.sparkContext, x, y, 2)
    model = _model()
    before = model.flat_parameters.copy()
    with pytest.raises(TrainingDivergedError, match="iteration 1"):
        _fit(data, model, SGD(lr=1e10), True)
    np.testing.assert_array_equal(model.flat_parameters, before)
    data.unpersist()


@pytest.mark.parametrize("driver", [True, False], ids=["driver_reduce", "executor_reduce"])
def test_cache_broadcasts_and_lineage_stay_bounded(spark, driver, monkeypatch):
    monkeypatch.setattr(jvm_reduce, "DRIVER_REDUCE", driver)
    x, y = _data(n=40)
    sc = spark.sparkContext
    before = persistent_rdd_count(sc)
    data = DataBlocks.from_numpy(sc, x, y, 2)
    trainer = DistributedTrainer(_model(), nn.CrossEntropyLoss(), SGD(lr=0.1, momentum=0.9), batch_size=8,
                                 end_trigger=MaxIteration(12), progress=False, jvm_reduce=True)
    seen = []
    record = trainer._record

    def spy(*args):
        record(*args)
        seen.append((trainer._jvm.loop.lineage_depth(), persistent_rdd_count(sc), resident_weight_blocks(sc)))
    trainer._record = spy
    trainer.fit(data)
    assert len(seen) == 12
    assert max(s[0] for s in seen[3:]) == min(s[0] for s in seen[3:])  # lineage does not grow
    assert max(s[1] for s in seen) <= before + 2  # the data + the current shard states
    assert persistent_rdd_count(sc) == before + 1  # states released at the end of fit
    # executor reduce: between iterations one version of the weights (its 1 shard and the buffers; the previous
    # version and the executors' assembled copies of it are released); the driver reduce keeps none there
    assert [s[2] for s in seen] == [0 if driver else 2] * 12
    assert resident_weight_blocks(sc) == 0  # released at the end of fit
    data.unpersist()


def test_executor_reduce_keeps_the_weights_off_the_driver(spark):
    """Issue #30: with the executor reduce the driver receives only the reduce tasks' small results, not the new
    weights (it neither collects nor broadcasts them), and the result is the driver reduce's, bit for bit."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((64, 256)).astype(np.float32), rng.integers(0, 10, 64)
    data = DataBlocks.from_numpy(spark.sparkContext, x, y, 2)

    def fit(num_blocks):
        model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).initialize(0)  # 68,362 params
        DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=0.05, momentum=0.9), batch_size=16,
                           end_trigger=MaxIteration(4), seed=1, progress=False, jvm_reduce=True,
                           num_blocks=num_blocks).fit(data)
        return model

    reference = fit(1)  # one block: reduced on the driver
    start_profiler(spark.sparkContext)
    try:
        model = fit(2)
    finally:
        time.sleep(1.0)
        jobs = [j for j in stop_profiler(spark.sparkContext) if len(j["stages"]) == 2]
        data.unpersist()
    np.testing.assert_array_equal(model.flat_parameters, reference.flat_parameters)
    model_bytes = 4 * model.num_parameters()
    assert len(jobs) == 4
    for job in jobs:
        reduce = job["stages"][-1]
        assert reduce["tasks"] == 2
        # Spark's own metadata per task result (metrics, accumulators) is ~18 KB; no weights
        assert reduce["result_bytes"] <= reduce["tasks"] * 32768 < model_bytes, job


def test_unsupported_configurations_are_named():
    assert supports(Adagrad(lr=0.1), None) is not None
    assert supports(SGD(lr=0.1, clip_norm=1.0), None, 1) is None
    assert "clip_norm" in supports(SGD(lr=0.1, clip_norm=1.0), None, 2)
    assert supports(Adam(), "fp16") is None
    assert "compress='int8'" in supports(Adam(), "int8")
    assert supports(AdamW(), None) is None
    with pytest.raises(ValueError, match="jvm_reduce=True is not possible: optimizer Adagrad"):
        DistributedTrainer(_model(), nn.CrossEntropyLoss(), Adagrad(lr=0.1), batch_size=4, jvm_reduce=True)


def test_state_packing_round_trip():
    opt = Adam(amsgrad=True)
    bounds = np.array([0, 3, 7])
    rng = np.random.default_rng(0)
    states = [{"step": 4, **{n: rng.standard_normal(hi - lo).astype(np.float32) for n in opt.state_names}}
              for lo, hi in zip(bounds[:-1], bounds[1:])]
    back = unpack_states(opt, pack_states(opt, states, bounds))
    for a, b in zip(states, back):
        assert b["step"] == 4 and set(a) == set(b)
        for n in opt.state_names:
            np.testing.assert_array_equal(a[n], b[n])


def test_weights_and_states_come_through_owner_only_files_the_jvm_creates(data, tmp_path, monkeypatch):
    """The bridge writes weights/states to a temporary file it creates (no path from Python); each is read
    once, is readable by its owner only, and is deleted."""
    import os
    import stat
    import tempfile
    seen, real_unlink = [], os.unlink

    def unlink(path):
        if os.path.basename(path).startswith(("sparkdl-weights-", "sparkdl-states-")):
            seen.append((os.path.dirname(path), stat.S_IMODE(os.stat(path).st_mode), os.path.basename(path)))
        real_unlink(path)
    monkeypatch.setattr(os, "unlink", unlink)
    _fit(data, _model(), Adam(lr=0.01), True, epochs=1, checkpoint_dir=str(tmp_path))
    kinds = {name.split("-")[1] for _, _, name in seen}
    assert kinds == {"weights", "states"}
    assert all(mode == 0o600 for _, mode, _ in seen)
    assert {d for d, _, _ in seen} == {os.path.realpath(tempfile.gettempdir())} or \
        {d for d, _, _ in seen} == {tempfile.gettempdir()}
    assert not [n for n in os.listdir(tempfile.gettempdir()) if n in {name for _, _, name in seen}]


def test_weights_and_states_go_in_through_owner_only_files_the_jvm_creates(data, monkeypatch):
    """Python writes weights and states into a file the bridge creates (owner-only; never a path Python chose,
    and never base64 text through py4j); the bridge reads and deletes it."""
    import os
    import stat
    from sparkdl.jvm import training_loop
    uploads, real_upload = [], training_loop.TrainingLoop._upload

    def upload(self, data_):
        path = self._loop.uploadFile()
        assert os.path.basename(path).startswith("sparkdl-upload-") and os.path.getsize(path) == 0
        uploads.append((path, stat.S_IMODE(os.stat(path).st_mode), len(memoryview(data_).cast("B"))))
        self._loop.uploadFile = lambda: path
        try:
            real_upload(self, data_)
        finally:
            del self._loop.uploadFile
    monkeypatch.setattr(training_loop.TrainingLoop, "_upload", upload)
    model = _model()
    _fit(data, model, Adam(lr=0.01), True, epochs=1)
    assert len(uploads) == 2  # the states, then the weights
    assert [n for _, _, n in uploads] == [uploads[0][2], 4 * model.num_parameters()]
    assert all(mode == 0o600 and not os.path.exists(path) for path, mode, _ in uploads)


def test_the_bridge_takes_no_file_path_from_python(spark):
    """No public method of TrainingLoop writes to a path Python chooses (writeTo(what, path) did)."""
    jvm = spark.sparkContext._jvm
    cls = jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass("org.sparkdl.bridge.TrainingLoop")
    methods = {m.getName(): [t.getSimpleName() for t in m.getParameterTypes()] for m in cls.getMethods()}
    assert "writeTemp" in methods and methods["writeTemp"] == ["String"]
    assert "writeTo" not in methods


@pytest.mark.parametrize("jvm", [True, False], ids=["jvm", "python"])
def test_weights_that_overflow_stop_training_with_the_last_good_weights(spark, jvm):
    x, y = _data()
    data = DataBlocks.from_numpy(spark.sparkContext, x * 100, y, 2)
    model = _model()
    before = model.flat_parameters.copy()
    with pytest.raises(TrainingDivergedError, match=r"iteration 1 .*the updated weights became NaN or infinite"):
        _fit(data, model, SGD(lr=3e38), jvm)  # a finite loss (~10), an update past float32's range
    np.testing.assert_array_equal(model.flat_parameters, before)
    data.unpersist()
