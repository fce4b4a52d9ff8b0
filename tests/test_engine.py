"""Distributed training on Spark (local[2,3]) against the single-process reference."""
import os
import tempfile

import numpy as np
import pytest
from pyspark import cloudpickle

from sparkdl import nn
from sparkdl.engine import DataBlocks, DistributedTrainer, MaxEpoch, MaxIteration, TrainingDivergedError
from sparkdl.engine.plan import global_batch
from sparkdl.engine.worker import dropout_rng
from sparkdl.jvm import persistent_rdd_count
from sparkdl.metrics import Top1Accuracy
from sparkdl.optim import SGD, Adam
from sparkdl.trainer import train_step


def _data(n=96, d=6, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    w = rng.standard_normal((d, classes))
    y = np.argmax(x @ w + 0.3 * rng.standard_normal((n, classes)), axis=1).astype(np.int64)
    return x, y


def _model(d=6, classes=3, seed=1):
    return nn.Sequential(nn.Linear(d, 16), nn.ReLU(), nn.Linear(16, classes)).initialize(seed)


def _reference(model, loss, opt, x, y, batch_size, epochs, seed):
    """Single-process steps on exactly the engine's global batches."""
    opt.configure(model.parameter_layout())
    state = opt.init_state(0, model.num_parameters())
    losses = []
    n = len(x)
    for epoch in range(epochs):
        for i in range(-(-n // batch_size)):
            ids = np.sort(global_batch(seed, epoch, n, batch_size, i))
            losses.append(train_step(model, loss, opt, state, x[ids], y[ids], None, None))
    return losses


def _fit(spark, x, y, partitions, model, opt, batch_size=20, epochs=2, seed=5, fault_hook=None, **kw):
    rdd = spark.sparkContext.parallelize(list(zip(x, y)), partitions)
    trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), opt, batch_size=batch_size,
                                 end_trigger=MaxEpoch(epochs), seed=seed, progress=False, **kw)
    trainer._fault_hook = fault_hook  # the test hook is a private attribute, not an option
    return trainer.fit(rdd), trainer


def test_two_partitions_equal_single_process(spark):
    x, y = _data(n=50)
    ref = _model()
    ref_losses = _reference(ref, nn.CrossEntropyLoss(), SGD(lr=0.1, momentum=0.9), x, y, 20, 2, seed=5)
    dist = _model()
    summary, _ = _fit(spark, x, y, 2, dist, SGD(lr=0.1, momentum=0.9))
    np.testing.assert_allclose(summary.loss, ref_losses, rtol=1e-5)
    np.testing.assert_allclose(dist.flat_parameters, ref.flat_parameters, rtol=1e-5, atol=1e-6)
    assert len(summary.loss) == 2 * 3  # ceil(50 / 20) iterations per epoch, the last one partial


@pytest.mark.parametrize("partitions", [1, 3, 4])
def test_trajectory_independent_of_partitioning(spark, partitions):
    x, y = _data(n=50)
    ref = _model()
    ref_losses = _reference(ref, nn.CrossEntropyLoss(), Adam(lr=0.01), x, y, 20, 2, seed=5)
    summary, _ = _fit(spark, x, y, partitions, _model(), Adam(lr=0.01), num_blocks=3)
    np.testing.assert_allclose(summary.loss, ref_losses, rtol=1e-5)


def _grouped_reference(model, loss, opt, x, y, sizes, batch_size, epochs, seed):
    """Single-process steps with the engine's semantics for BatchNorm and Dropout: each global batch split into
    the partitions' shares (``groups``), each share with its partition's Dropout generator."""
    opt.configure(model.parameter_layout())
    state = opt.init_state(0, model.num_parameters())
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    losses, g, n = [], 0, len(x)
    for epoch in range(epochs):
        for i in range(-(-n // batch_size)):
            ids = np.sort(global_batch(seed, epoch, n, batch_size, i))
            groups = [int(np.count_nonzero((ids >= lo) & (ids < hi))) for lo, hi in zip(offsets[:-1], offsets[1:])]
            rngs = [dropout_rng(seed, epoch, g, p) for p in range(len(sizes))]
            losses.append(train_step(model, loss, opt, state, x[ids], y[ids], None, rngs, groups=groups))
            g += 1
    return losses


def _bn_dropout_model(d=6, classes=3, seed=1):
    return nn.Sequential(nn.Linear(d, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3),
                         nn.Linear(16, classes)).initialize(seed)


@pytest.mark.parametrize("n,partitions,batch_size", [(50, 3, 20), (30, 8, 6)])
def test_batchnorm_and_dropout_equal_single_process_with_groups(spark, n, partitions, batch_size):
    """(30, 8, 6): partitions of 3-4 rows get shares of 0, 1 or 2 rows of each batch of 6."""
    x, y = _data(n=n)
    data = DataBlocks.from_samples(spark.sparkContext.parallelize(list(zip(x, y)), partitions))
    shares = [np.count_nonzero(np.isin(np.sort(global_batch(5, 0, n, batch_size, i)),
                                       np.arange(lo, lo + s))) for i in range(n // batch_size)
              for lo, s in zip(np.cumsum([0] + data.sizes[:-1]), data.sizes)]
    ref = _bn_dropout_model()
    ref_losses = _grouped_reference(ref, nn.CrossEntropyLoss(), SGD(lr=0.1, momentum=0.9), x, y, data.sizes,
                                    batch_size, 2, seed=5)
    dist = _bn_dropout_model()
    trainer = DistributedTrainer(dist, nn.CrossEntropyLoss(), SGD(lr=0.1, momentum=0.9), batch_size=batch_size,
                                 end_trigger=MaxEpoch(2), seed=5, progress=False)
    summary = trainer.fit(data)
    data.unpersist()
    if partitions == 8:
        assert 1 in shares  # the case PyTorch would reject: one row per BatchNorm channel
    np.testing.assert_allclose(summary.loss, ref_losses, rtol=1e-5)
    np.testing.assert_allclose(dist.flat_parameters, ref.flat_parameters, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dist.flat_buffers, ref.flat_buffers, rtol=1e-4, atol=1e-5)
    assert float(dist[1].num_batches_tracked) == 2 * (-(-n // batch_size))


@pytest.mark.filterwarnings("ignore:DistributedTrainer.fit. the training partitions are very uneven")
def test_three_samples_on_eight_partitions(spark):
    x, y = _data(n=3)
    ref = _model()
    ref_losses = _reference(ref, nn.CrossEntropyLoss(), SGD(lr=0.5), x, y, 2, 3, seed=5)
    model = _model()
    summary, _ = _fit(spark, x, y, 8, model, SGD(lr=0.5), batch_size=2, epochs=3)
    np.testing.assert_allclose(summary.loss, ref_losses, rtol=1e-5)
    np.testing.assert_allclose(model.flat_parameters, ref.flat_parameters, rtol=1e-5, atol=1e-6)


def test_same_seed_bitwise_identical(spark):
    x, y = _data(n=50)
    a, b = _model(), _model()
    _fit(spark, x, y, 3, a, Adam(lr=0.01), epochs=1)
    _fit(spark, x, y, 3, b, Adam(lr=0.01), epochs=1)
    np.testing.assert_array_equal(a.flat_parameters, b.flat_parameters)


def test_training_learns_and_validates(spark):
    x, y = _data(n=300)
    model = _model()
    sc = spark.sparkContext
    val = DataBlocks.from_samples(sc.parallelize(list(zip(x[:100], y[:100])), 2))
    trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), Adam(lr=0.03), batch_size=60,
                                 end_trigger=MaxEpoch(4), progress=False, validation_metrics=[Top1Accuracy()])
    summary = trainer.fit(sc.parallelize(list(zip(x, y)), 3), val)
    assert len(summary.validations) == 4
    acc = summary.validations[-1]["Top1Accuracy"]
    assert acc > 0.85
    pred = np.argmax(model(x[:100]), axis=1)
    assert acc == pytest.approx(np.mean(pred == y[:100]))


def test_bad_features_named_before_training(spark):
    x, y = _data(n=10)
    rows = list(zip(x, y))
    rows[7] = (np.full(6, np.nan, np.float32), 1)
    with pytest.raises(ValueError, match=r"partition 1, row 2: features contain NaN"):
        DataBlocks.from_samples(spark.sparkContext.parallelize(rows, 2))
    rows[7] = (np.zeros(5, np.float32), 1)
    with pytest.raises(ValueError, match=r"partition 1, row 2: features have shape \(5,\)"):
        DataBlocks.from_samples(spark.sparkContext.parallelize(rows, 2))


def test_from_numpy_checks_rows_on_the_driver_before_any_job(spark, monkeypatch):
    x, y = _data(n=10)
    x[8, 3] = np.inf  # 2 partitions of 5 rows: partition 1, row 3
    monkeypatch.setattr(type(spark.sparkContext), "parallelize",
                        lambda *a, **k: pytest.fail("a Spark job started before the check"))
    with pytest.raises(ValueError, match=r"partition 1, row 3: features contain NaN or infinity"):
        DataBlocks.from_numpy(spark.sparkContext, x, y, 2)
    with pytest.raises(ValueError, match="y must be numeric, got dtype <U1"):
        DataBlocks.from_numpy(spark.sparkContext, x[:2], np.array(["a", "b"]), 2)
    y = y.astype(np.float64)
    y[2] = np.nan
    with pytest.raises(ValueError, match="partition 0, row 2: label is NaN or infinity"):
        DataBlocks.from_numpy(spark.sparkContext, np.zeros((10, 6), np.float32), y, 2)


@pytest.mark.parametrize("rows, width, parts", [(11, 6, 3), (2200, 4096, 2)], ids=["one_chunk", "chunked"])
def test_from_numpy_summaries_match_the_cached_partitions(spark, rows, width, parts):
    """The sizes inspected on the driver are those of the cached blocks (2 x 18 MB: 2 chunks per partition)."""
    x = np.arange(rows * width, dtype=np.float32).reshape(rows, width)
    y = np.arange(rows) % 3
    data = DataBlocks.from_numpy(spark.sparkContext, x, y, parts)
    blocks = data.rdd.map(lambda b: (len(b[0]), float(b[0][0, 0]), int(b[1][-1]))).collect()
    assert [n for n, _, _ in blocks] == data.sizes and sum(data.sizes) == rows
    starts = np.concatenate([[0], np.cumsum(data.sizes)[:-1]])
    assert [first for _, first, _ in blocks] == [float(s * width) for s in starts]  # row order kept
    assert [last for _, _, last in blocks] == [int(y[s - 1]) for s in np.cumsum(data.sizes)]
    data.unpersist()


def test_from_numpy_on_a_local_master_reads_files_removed_with_the_rdd(spark, monkeypatch):
    import gc

    from sparkdl.engine import data as data_module
    made, mkdtemp = [], tempfile.mkdtemp  # this call's directory (another test process may make its own meanwhile)
    monkeypatch.setattr(data_module.tempfile, "mkdtemp", lambda **kw: made.append(mkdtemp(**kw)) or made[-1])
    x, y = _data(n=30)
    data = DataBlocks.from_numpy(spark.sparkContext, x, y, 3)
    monkeypatch.undo()
    (directory,) = made
    assert os.path.basename(directory).startswith("sparkdl-data-")
    assert sorted(os.listdir(directory)) == [f"{a}-{p}.npy" for a in "xy" for p in range(3)]
    assert not data.rdd.isCheckpointed()
    blocks = data.rdd.collect()
    np.testing.assert_array_equal(np.concatenate([b[0] for b in blocks]), x.astype(np.float32))
    np.testing.assert_array_equal(np.concatenate([b[1] for b in blocks]), y)
    assert all(b[0].dtype == np.float32 and b[1].dtype == y.dtype for b in blocks)
    data.unpersist()
    del data, blocks
    gc.collect()
    assert not os.path.exists(directory)


def test_from_numpy_on_a_cluster_master_checkpoints_the_parallelized_arrays(spark, monkeypatch):
    """Not a local master: the arrays are parallelized in chunks and checkpointed (the same blocks)."""
    sc = spark.sparkContext
    monkeypatch.setattr(sc, "master", "spark://cluster:7077")  # the Python attribute the choice reads
    if sc.getCheckpointDir() is None:  # a directory that outlives the test: the session's later jobs may use it
        sc.setCheckpointDir(tempfile.mkdtemp(prefix="sparkdl-test-checkpoint-"))
    x, y = _data(n=30)
    data = DataBlocks.from_numpy(sc, x, y, 3)
    assert data.rdd.isCheckpointed() and data.sizes == [10, 10, 10]
    blocks = data.rdd.collect()
    np.testing.assert_array_equal(np.concatenate([b[0] for b in blocks]), x.astype(np.float32))
    np.testing.assert_array_equal(np.concatenate([b[1] for b in blocks]), y)
    data.unpersist()


def test_label_out_of_range_named(spark):
    x, y = _data(n=10)
    y[6] = 3
    with pytest.raises(ValueError, match=r"partition 1, row 1: 3; expected an integer class index in \[0, 2\]"):
        _fit(spark, x, y, 2, _model(), SGD(lr=0.1), num_classes=3)


def test_diverging_training_stops_with_iteration(spark):
    x, y = _data()
    x[:] *= 1e30
    with pytest.raises(TrainingDivergedError, match="iteration 1"):
        _fit(spark, x, y, 2, _model(), SGD(lr=1e10))


def test_task_failures_are_retried_bit_identically(spark):
    x, y = _data(n=80)  # 4 iterations: failures in iterations 1 and 3
    clean = _model()
    _fit(spark, x, y, 2, clean, Adam(lr=0.01), epochs=1)
    faulty = _model()
    _fit(spark, x, y, 2, faulty, Adam(lr=0.01), epochs=1, fault_hook=_fail_first_attempts)
    np.testing.assert_array_equal(clean.flat_parameters, faulty.flat_parameters)


def _fail_first_attempts(stage, partition, epoch, iteration, attempt):
    from sparkdl.engine.tasks import FaultInjected
    if attempt == 0 and partition == 1 and iteration in (1, 3):
        raise FaultInjected(f"injected failure in {stage} stage, partition {partition}, iteration {iteration}")


def test_broadcasts_and_cache_stay_bounded(spark):
    """The Python reduce path (tests/test_jvm_reduce.py checks the same for the JVM reduce)."""
    x, y = _data(n=40)
    sc = spark.sparkContext
    before = persistent_rdd_count(sc)
    data = DataBlocks.from_samples(sc.parallelize(list(zip(x, y)), 2))
    trainer = DistributedTrainer(_model(), nn.CrossEntropyLoss(), SGD(lr=0.1, momentum=0.9), batch_size=8,
                                 end_trigger=MaxIteration(12), progress=False, jvm_reduce=False)
    depths = []
    orig = trainer._replace_state_rdd

    def spy(updated, broadcast=None):
        orig(updated, broadcast)
        if broadcast is not None:  # one call per finished iteration
            depths.append((len(updated.toDebugString().splitlines()), persistent_rdd_count(sc)))
    trainer._replace_state_rdd = spy
    trainer.fit(data)
    assert len(depths) == 12
    assert max(d for d, _ in depths[5:]) == min(d for d, _ in depths[5:])  # lineage does not grow
    assert max(c for _, c in depths) <= before + 3  # data + current state (+ clip/reduced)
    data.unpersist()


def test_global_norm_clipping_matches_single_process(spark):
    x, y = _data()
    ref = _model()
    ref_losses = _reference(ref, nn.CrossEntropyLoss(), SGD(lr=0.5, clip_norm=0.05), x, y, 20, 1, seed=5)
    dist = _model()
    summary, _ = _fit(spark, x, y, 2, dist, SGD(lr=0.5, clip_norm=0.05), epochs=1, num_blocks=3)
    np.testing.assert_allclose(summary.loss, ref_losses, rtol=1e-5)
    np.testing.assert_allclose(dist.flat_parameters, ref.flat_parameters, rtol=1e-5, atol=1e-6)


def test_fp16_gradient_compression_stays_close(spark):
    x, y = _data(n=50)
    full, half = _model(), _model()
    s32, _ = _fit(spark, x, y, 2, full, Adam(lr=0.01), epochs=1)
    s16, _ = _fit(spark, x, y, 2, half, Adam(lr=0.01), epochs=1, compress="fp16")
    np.testing.assert_allclose(s16.loss, s32.loss, rtol=2e-3)
    assert not np.array_equal(full.flat_parameters, half.flat_parameters)  # compression really happened
    np.testing.assert_allclose(half.flat_parameters, full.flat_parameters, atol=2e-3)


def _drop_local_copies_at(at):
    """Fault hook: before the gradient tasks of global iteration ``at``, delete the executor's local data
    copies (and the worker's open maps), as if the task had landed on an executor without them."""
    def hook(stage, partition, epoch, iteration, attempt):
        if stage == "gradient" and iteration == at:
            import shutil

            from sparkdl.engine import local_cache
            shutil.rmtree(local_cache.root(), True)
            local_cache._OPEN.clear()
    return hook


def test_local_data_copies_missing_rerun_identically(spark, caplog):
    x, y = _data(n=50)  # 6 iterations; the copies go missing before the fifth
    ref_summary, ref = _fit(spark, x, y, 2, _model(), Adam(lr=0.01), local_data_copy=False)
    data = DataBlocks.from_numpy(spark.sparkContext, x, y, 2)
    assert len(cloudpickle.dumps(data.rdd.func)) < 10_000  # tasks read the blocks from files: no arrays inside
    model = _model()
    trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), Adam(lr=0.01), batch_size=20,
                                 end_trigger=MaxEpoch(2), seed=5, progress=False)
    trainer._fault_hook = _drop_local_copies_at(4)
    with caplog.at_level("INFO", logger="sparkdl.engine"):
        summary = trainer.fit(data)
    reruns = [r.getMessage() for r in caplog.records if "reran on the full partitions" in r.getMessage()]
    assert any("iteration 5 " in m for m in reruns)  # global iteration 4 (0-based) missed its copies
    assert len(reruns) <= 3
    np.testing.assert_array_equal(summary.loss, ref_summary.loss)
    np.testing.assert_array_equal(model.flat_parameters, ref.model.flat_parameters)
    from sparkdl.engine import local_cache
    copies = spark.sparkContext.parallelize([0], 1).map(lambda _: local_cache.root()).collect()[0]
    import glob
    assert len(glob.glob(f"{copies}/*/part-0000[01]-x.npy")) >= 2
    data.unpersist()


def test_uneven_partitions_warn_naming_the_fix(spark):
    import warnings
    x, y = _data(n=43)
    sc = spark.sparkContext
    uneven = sc.parallelize(list(zip(x[:40], y[:40])), 1).union(sc.parallelize(list(zip(x[40:], y[40:])), 1))
    kw = dict(batch_size=43, end_trigger=MaxIteration(1), progress=False)
    with pytest.warns(RuntimeWarning, match=r"very uneven \(largest 40 rows, smallest 3; more than 8x\).*"
                                            r"rdd.repartition\(n\).*numPartitions"):
        DistributedTrainer(_model(), nn.CrossEntropyLoss(), SGD(lr=0.1), **kw).fit(uneven)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DistributedTrainer(_model(), nn.CrossEntropyLoss(), SGD(lr=0.1), **kw).fit(sc.parallelize(list(zip(x, y)), 2))
    assert not [w for w in caught if "uneven" in str(w.message)]


@pytest.mark.skipif(__import__("numba").config.NUMBA_NUM_THREADS < 2, reason="needs a numba pool of 2 threads")
def test_two_threads_per_task_split_rows_and_match_single_process(spark):
    """threads_per_task=2: each task splits its rows across 2 threads (sparkdl.step.threads); the trajectory
    equals the single-process one to float rounding (bitwise is only promised at one thread per task)."""
    x, y = _data(n=200)
    ref = _model()
    ref_losses = _reference(ref, nn.CrossEntropyLoss(), SGD(lr=0.1, momentum=0.9), x, y, 100, 2, seed=5)
    dist = _model()
    summary, _ = _fit(spark, x, y, 2, dist, SGD(lr=0.1, momentum=0.9), batch_size=100, threads_per_task=2)
    np.testing.assert_allclose(summary.loss, ref_losses, rtol=1e-5)
    np.testing.assert_allclose(dist.flat_parameters, ref.flat_parameters, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(dist.flat_parameters, ref.flat_parameters)  # the split ran: other float rounding


def _two_threads_and_grouped_reference(data, make, x, y, batch_size, rtol, atol):
    """Two epochs of ``make()`` with ``threads_per_task=2`` on ``data`` (2 partitions, unpersisted here) and of the
    grouped single-process reference: equal losses and parameters to float rounding, not bitwise (the split ran).
    Returns ``(distributed model, reference model)``."""
    ref = make()
    ref_losses = _grouped_reference(ref, nn.CrossEntropyLoss(), SGD(lr=0.1, momentum=0.9), x, y, data.sizes,
                                    batch_size, 2, seed=5)
    dist = make()
    trainer = DistributedTrainer(dist, nn.CrossEntropyLoss(), SGD(lr=0.1, momentum=0.9), batch_size=batch_size,
                                 end_trigger=MaxEpoch(2), seed=5, progress=False, threads_per_task=2)
    summary = trainer.fit(data)
    data.unpersist()
    np.testing.assert_allclose(summary.loss, ref_losses, rtol=1e-5)
    np.testing.assert_allclose(dist.flat_parameters, ref.flat_parameters, rtol=rtol, atol=atol)
    assert not np.array_equal(dist.flat_parameters, ref.flat_parameters)  # the split ran: other float rounding
    return dist, ref


@pytest.mark.skipif(__import__("numba").config.NUMBA_NUM_THREADS < 2, reason="needs a numba pool of 2 threads")
def test_two_threads_per_task_split_batchnorm_rows_and_match_single_process(spark):
    """A BatchNorm network splits its task's rows too (enough work per BatchNorm layer): the threads exchange the
    statistics of the task's rows (sparkdl.nn.row_parts), so batch statistics stay each partition's, as in the
    grouped single-process reference, and the trajectory and running statistics match it to float rounding."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 1, 16, 16)).astype(np.float32)
    y = (x[:, 0, :8].mean(axis=(1, 2)) > 0).astype(np.int64)
    data = DataBlocks.from_samples(spark.sparkContext.parallelize(list(zip(x, y)), 2))

    def make():
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                             nn.Conv2d(16, 24, 3, padding=1), nn.BatchNorm2d(24), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, 2)).initialize(2)
    from sparkdl.step import sum_reduction
    from sparkdl.step.threads import _splits
    assert _splits(make(), sum_reduction(nn.CrossEntropyLoss()), x[:32], 2)  # 32 rows per task and iteration
    dist, ref = _two_threads_and_grouped_reference(data, make, x, y, 64, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dist.flat_buffers, ref.flat_buffers, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(__import__("numba").config.NUMBA_NUM_THREADS < 2, reason="needs a numba pool of 2 threads")
def test_two_threads_per_task_split_dropout_rows_and_match_single_process(spark):
    """Dropout is split too: each thread's part draws its rows of the partition's masks
    (sparkdl.nn.dropout_masks), so the trajectory is the single-process one with the engine's per-partition
    generators, to float rounding."""
    x, y = _data(n=200)
    data = DataBlocks.from_samples(spark.sparkContext.parallelize(list(zip(x, y)), 2))

    def make():
        return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3)).initialize(1)
    _two_threads_and_grouped_reference(data, make, x, y, 100, rtol=1e-5, atol=1e-6)
