"""Driver fan-in bounded by executors, not partitions, with sums independent of how partitions are grouped.

Every path sums per-partition gradients in the fixed tree order of sparkdl.step.tree_sum: the single-process
reference (train_step with groups=), the Python reduce (one record per partition), the JVM reduce on the driver or
in reduce tasks, and group tasks that pre-sum whole tree nodes. So they all agree bitwise, whatever the number of
gradient tasks (one task computing every partition stands for local[1]; five for more cores than partitions need).
"""
import time

import numpy as np
import pytest

from sparkdl import chunking, nn
from sparkdl.engine import DataBlocks, DistributedTrainer, MaxEpoch, MaxIteration, jvm_reduce, loop
from sparkdl.engine.plan import global_batch
from sparkdl.engine.worker import dropout_rng
from sparkdl.jvm import start_profiler, stop_profiler
from sparkdl.optim import SGD
from sparkdl.step import train_step

N, PARTITIONS, BATCH, SEED = 130, 13, 40, 5


def _model():
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3),
                         nn.Linear(16, 3)).initialize(1)


def _xy():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((N, 6)) * 10.0 ** rng.integers(-2, 3, (N, 1))).astype(np.float32)
    return x, rng.integers(0, 3, N)


@pytest.fixture(scope="module")
def data(spark):
    x, y = _xy()
    blocks = DataBlocks.from_numpy(spark.sparkContext, x, y, PARTITIONS)
    yield blocks
    blocks.unpersist()


def _fit(data, jvm=True):
    model = _model()
    trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=0.05, momentum=0.9), batch_size=BATCH,
                                 end_trigger=MaxEpoch(1), seed=SEED, progress=False, jvm_reduce=jvm)
    summary = trainer.fit(data)
    return model, np.asarray(summary.loss)


def _reference(sizes):
    """Single-process steps on the same global batches, each split into the partitions' shares (groups=)."""
    x, y = _xy()
    model, loss, opt = _model(), nn.CrossEntropyLoss(), SGD(lr=0.05, momentum=0.9)
    opt.configure(model.parameter_layout())
    state = opt.init_state(0, model.num_parameters())
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    losses = []
    for i in range(-(-N // BATCH)):
        ids = np.sort(global_batch(SEED, 0, N, BATCH, i))
        groups = [int(np.count_nonzero((ids >= lo) & (ids < hi))) for lo, hi in zip(offsets[:-1], offsets[1:])]
        rngs = [dropout_rng(SEED, 0, i, p) for p in range(len(sizes))]
        losses.append(train_step(model, loss, opt, state, x[ids], y[ids], None, rngs, groups=groups))
    return model, np.asarray(losses)


def test_every_grouping_and_reduce_is_bitwise_the_reference(data, monkeypatch):
    ref, ref_loss = _reference(data.sizes)
    runs = {}
    for slots in (1, 2, 5):
        monkeypatch.setattr(loop, "_task_slots", lambda sc, n=slots: n)
        runs[f"jvm driver, {slots} group tasks"] = _fit(data)
    monkeypatch.setattr(jvm_reduce, "DRIVER_REDUCE", False)
    runs["jvm reduce task, 5 group tasks"] = _fit(data)
    runs["python reduce, one task per partition"] = _fit(data, jvm=False)
    for name, (model, loss) in runs.items():
        np.testing.assert_array_equal(loss, ref_loss, err_msg=name)
        np.testing.assert_array_equal(model.flat_parameters, ref.flat_parameters, err_msg=name)
        np.testing.assert_array_equal(model.flat_buffers, ref.flat_buffers, err_msg=name)


def _mlp():  # 870,090 parameters: one AllReduce block, reduced on the driver
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 64), nn.ReLU(),
                         nn.Linear(64, 10)).initialize(0)


def test_driver_receives_at_most_two_model_copies_per_executor(spark):
    """32 partitions of a 0.87M-parameter MLP: 32 x 3.5 MB of gradients per iteration reached the driver (issue
    #30: over a 64 MB spark.driver.maxResultSize); now the first iteration's per-partition records are combined
    on the executors and later iterations send one pre-summed record per group task."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((256, 784)).astype(np.float32), rng.integers(0, 10, 256)
    data = DataBlocks.from_numpy(spark.sparkContext, x, y, 32)
    model = _mlp()
    model_bytes = 4 * model.num_parameters()
    start_profiler(spark.sparkContext)
    try:
        DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=0.01), batch_size=64, end_trigger=MaxIteration(3),
                           seed=1, progress=False).fit(data)
    finally:
        time.sleep(1.0)  # the listener bus delivers the last job's events asynchronously
        jobs = [j for j in stop_profiler(spark.sparkContext) if j["stages"]]
        data.unpersist()
    executors = 1  # local mode: the driver's JVM is the one executor
    iterations = jobs[-3:]
    assert [len(j["stages"]) for j in iterations] == [2, 1, 1]  # combine stage in the full first iteration only
    for job in iterations:
        last = job["stages"][-1]  # the stage whose task results go to the driver
        driver_bytes = last["result_bytes"]
        # + Spark's own metadata per task result (task metrics, accumulator updates: ~18 KB measured)
        assert driver_bytes <= 2 * executors * model_bytes + last["tasks"] * 32768, job
        assert driver_bytes >= model_bytes  # it did measure the gradient records
    assert np.isfinite(model.flat_parameters).all()


@pytest.mark.parametrize("driver", [True, False], ids=["driver_reduce", "executor_reduce"])
def test_weights_and_blocks_in_small_chunks_are_bitwise_equal(data, monkeypatch, driver):
    """A 256-byte chunk limit: the weights travel as ~2 chunks each way and gradients in blocks of <= 64 values
    (14 blocks instead of 1), without changing a bit."""
    monkeypatch.setattr(jvm_reduce, "DRIVER_REDUCE", driver)
    whole, whole_loss = _fit(data)
    monkeypatch.setattr(chunking, "MAX_CHUNK_BYTES", 256)
    model = _model()
    trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=0.05, momentum=0.9), batch_size=BATCH,
                                 end_trigger=MaxEpoch(1), seed=SEED, progress=False, jvm_reduce=True)
    summary = trainer.fit(data)
    assert len(trainer._bounds) - 1 == -(-4 * model.num_parameters() // 256)
    np.testing.assert_array_equal(np.asarray(summary.loss), whole_loss)
    np.testing.assert_array_equal(model.flat_parameters, whole.flat_parameters)
    np.testing.assert_array_equal(model.flat_buffers, whole.flat_buffers)


def test_load_weights_from_chunks_cut_anywhere():
    """A gradient task copies the weights chunk by chunk into the model's parameters (never one concatenation):
    chunks at block boundaries, cut inside the parameters or inside the buffers, give the same values."""
    values = np.arange(10, dtype=np.float32)
    for cuts in ([10], [6, 10], [3, 6, 7, 10], [7, 9, 10], [6, 6, 10]):
        chunks = [values[lo:hi].tobytes() for lo, hi in zip([0] + cuts[:-1], cuts)]
        parameters = np.zeros(6, np.float32)
        buffers = jvm_reduce._load_weights(chunks, parameters)
        np.testing.assert_array_equal(parameters, values[:6])
        np.testing.assert_array_equal(buffers, values[6:])
    with pytest.raises(RuntimeError, match="hold 4 values, the model has 6 parameters"):
        jvm_reduce._load_weights([values[:4].tobytes()], np.zeros(6, np.float32))


def test_adam_states_through_small_chunks_resume_bitwise(data, tmp_path, monkeypatch):
    """Adam's moments leave the JVM for a checkpoint and come back on resume in chunks of 256 bytes (values split
    across them). The resumed run equals the uninterrupted one bitwise."""
    from sparkdl.optim import Adam

    def fit(epochs, model=None, resume=False, **kw):
        model = model or _model()
        DistributedTrainer(model, nn.CrossEntropyLoss(), Adam(lr=0.01), batch_size=BATCH, end_trigger=MaxEpoch(epochs),
                           seed=SEED, progress=False, jvm_reduce=True, **kw).fit(data, resume=resume)
        return model
    whole = fit(2)
    monkeypatch.setattr(chunking, "MAX_CHUNK_BYTES", 256)
    part = fit(1, checkpoint_dir=str(tmp_path))
    resumed = fit(2, model=part.copy(), resume=True, checkpoint_dir=str(tmp_path))
    np.testing.assert_array_equal(resumed.flat_parameters, whole.flat_parameters)
