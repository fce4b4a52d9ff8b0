"""DLClassifier/DLEstimator under real use: the same training whatever numPartitions, resume from checkpointDir,
errors from tasks raised as themselves, and the recovery Params."""
import numpy as np
import pytest
from pyspark.ml.linalg import Vectors, VectorUDT
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from sparkdl import models, nn
from sparkdl.io import list_checkpoints, load_checkpoint
from sparkdl.ml import DLClassifier, DLEstimator
from sparkdl.optim import SGD, Adam
from tests.test_engine_errors import FailsOnLargeInput


def _df(spark, x, y, partitions=2):
    fields = [StructField("id", LongType()), StructField("features", VectorUDT()), StructField("label", DoubleType())]
    rows = [(i, Vectors.dense(v.tolist()), float(t)) for i, (v, t) in enumerate(zip(x, y))]
    return spark.createDataFrame(rows, StructType(fields)).repartition(partitions, "id")


@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(0)
    centers = np.array([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]])
    y = rng.integers(0, 3, 120)
    x = centers[y] + 0.5 * rng.normal(size=(120, 3))
    return x.astype(np.float32), y


def _clf(**kw):
    net = kw.pop("network", None) or models.mlp(in_features=3, hidden=(8,), num_classes=3).initialize(0)
    kw.setdefault("optimizer", SGD(lr=0.1, momentum=0.9))
    return DLClassifier(network=net, batchSize=40, seed=3, **kw)


def test_same_trajectory_whatever_num_partitions(spark, blobs):
    df = _df(spark, *blobs)
    runs = {n: _clf(numPartitions=n, maxEpoch=2).fit(df) for n in (1, 3, 4)}
    ref = runs[1]
    assert len(ref.summary.loss) == 6
    for n in (3, 4):
        np.testing.assert_allclose(runs[n].summary.loss, ref.summary.loss, rtol=1e-5, err_msg=f"numPartitions={n}")
        np.testing.assert_allclose(runs[n].network.flat_parameters, ref.network.flat_parameters, rtol=1e-4,
                                   atol=1e-6)


def test_resume_from_checkpoint_dir_equals_uninterrupted_run(spark, blobs, tmp_path):
    df = _df(spark, *blobs)
    straight = _clf(numPartitions=2, maxEpoch=3, optimizer=Adam(lr=0.01)).fit(df)
    ckpt = str(tmp_path / "ckpt")
    first = _clf(numPartitions=2, maxEpoch=2, optimizer=Adam(lr=0.01), checkpointDir=ckpt).fit(df)
    assert list_checkpoints(ckpt) and load_checkpoint(ckpt).samples_seen == 2 * 120
    other_init = models.mlp(in_features=3, hidden=(8,), num_classes=3).initialize(99)  # must not matter
    resumed = _clf(network=other_init, numPartitions=2, maxEpoch=3, optimizer=Adam(lr=0.01), checkpointDir=ckpt,
                   resume=True).fit(df)
    assert [r["epoch"] for r in resumed.summary.iterations] == [3, 3, 3]
    np.testing.assert_array_equal(resumed.network.flat_parameters, straight.network.flat_parameters)
    assert not np.array_equal(first.network.flat_parameters, straight.network.flat_parameters)
    assert load_checkpoint(ckpt).samples_seen == 3 * 120


def test_resume_without_a_checkpoint_starts_fresh_and_needs_a_dir(spark, blobs, tmp_path):
    df = _df(spark, *blobs)
    with pytest.raises(ValueError, match="resume=True needs checkpointDir"):
        _clf(maxEpoch=1, resume=True).fit(df)
    fresh = _clf(maxEpoch=1, checkpointDir=str(tmp_path / "empty"), resume=True).fit(df)
    plain = _clf(maxEpoch=1).fit(df)
    np.testing.assert_array_equal(fresh.network.flat_parameters, plain.network.flat_parameters)


def test_error_in_a_task_is_raised_as_itself_from_fit(spark, blobs):
    x, y = blobs
    x = x.copy()
    x[17, 0] = 1000.0
    net = nn.Sequential(FailsOnLargeInput(), nn.Linear(3, 3)).initialize(0)
    with pytest.raises(ArithmeticError, match=r"cannot handle a first feature of 1000 \(raised in a training task "
                                              r"on data partition \d, epoch 1, iteration \d"):
        _clf(network=net, maxEpoch=1, numPartitions=2).fit(_df(spark, x, y))


def test_max_recoveries_param(spark):
    clf = _clf(maxRecoveries=5)
    assert clf.getMaxRecoveries() == 5 and DLEstimator().getMaxRecoveries() == 3
    assert clf._trainer(clf.getNetwork(), nn.CrossEntropyLoss(), [], 3).max_recoveries == 5
    with pytest.raises(ValueError, match="maxRecoveries must be >= 0"):
        DLClassifier(maxRecoveries=-1)


class HoldsResource(nn.Module):
    """Identity layer keeping something that cannot be pickled."""

    def __init__(self, resource):
        super().__init__()
        self.resource = resource

    def forward(self, x, *, training=False, rng=None):
        return x.copy(), None

    def backward(self, cache, grad_y, grad_params):
        return grad_y


def _jobs_run(spark, fn):
    """Run ``fn`` in a fresh job group; return the exception it raised and the number of Spark jobs it started."""
    sc = spark.sparkContext
    group = f"probe-{np.random.default_rng().integers(1 << 30)}"
    sc.setJobGroup(group, "checks before any job")
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - returned to the test
        return e, len(sc.statusTracker().getJobIdsForGroup(group))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return None, len(sc.statusTracker().getJobIdsForGroup(group))


def test_loss_probe_names_shapes_and_fixes_before_any_job(spark, blobs):
    x, y = blobs
    df = _df(spark, x, (y > 0).astype(float))
    two = models.mlp(in_features=3, hidden=(4,), num_classes=2)
    err, jobs = _jobs_run(spark, lambda: DLClassifier(network=two, loss=nn.BCEWithLogitsLoss(), featureShape=[3],
                                                      maxEpoch=1).fit(df))
    assert isinstance(err, ValueError) and jobs == 0, (err, jobs)
    msg = str(err)
    for needle in ("BCEWithLogitsLoss", "outputs a batch of shape (N, 2)", "labelCol 'label'", "shape (N,) of int64",
                   "target shape (2,) must equal input shape (2, 2)", "one output unit", "CrossEntropyLoss"):
        assert needle in msg, (needle, msg)
    est = DLEstimator(network=models.mlp(in_features=3, hidden=(4,), num_classes=1), loss=nn.CrossEntropyLoss(),
                      maxEpoch=1)
    with pytest.raises(ValueError, match=r"outputs a batch of shape \(N, 1\).*shape \(N, 1\) of float32.*"
                                         r"CrossEntropyLoss: target must hold integer class indices.*MSELoss"):
        est.fit(df)


def test_feature_length_mismatch_names_expected_length_and_skip_drops(spark, blobs):
    x, y = blobs
    fields = [StructField("id", LongType()), StructField("features", VectorUDT()), StructField("label", DoubleType())]
    rows = [(i, Vectors.dense(v.tolist() if i % 10 else v[:2].tolist()), float(t))
            for i, (v, t) in enumerate(zip(x, y))]
    df = spark.createDataFrame(rows, StructType(fields))
    net = models.mlp(in_features=3, hidden=(4,), num_classes=3)
    with pytest.raises(ValueError, match=r"holds vectors of 2 to 3 values, but the network takes 3 values per row; "
                                         r"e.g. Row\(id=0, .*\) has 2.*handleInvalid='skip'"):
        DLClassifier(network=net, maxEpoch=1).fit(df)
    model = DLClassifier(network=net, maxEpoch=1, batchSize=200, handleInvalid="skip").fit(df)
    assert model.numSkippedRows == 12 and model.summary.iterations[0]["samples"] == 108
    with pytest.raises(ValueError, match=r"does not accept rows of shape \(3,\).*its first Linear layer takes 5 "
                                         r"values per row"):
        DLClassifier(network=models.mlp(in_features=5, hidden=(4,), num_classes=3), maxEpoch=1).fit(_df(spark, x, y))


def test_unshippable_layer_attribute_named_before_any_job(spark, blobs, tmp_path):
    import threading
    df = _df(spark, *blobs)
    log_file = open(tmp_path / "layer.log", "w")  # noqa: SIM115 - closed below
    for resource, kind in ((threading.Lock(), "_thread.lock"),
                           (spark.sparkContext, "pyspark.core.context.SparkContext"), (log_file, "_io.TextIOWrapper")):
        net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 3), HoldsResource(resource))
        err, jobs = _jobs_run(spark, lambda: DLClassifier(network=net, maxEpoch=1).fit(df))
        assert isinstance(err, TypeError) and jobs == 0, (err, jobs)
        assert f"network.3.resource holds a {kind}, which cannot be sent to the executors" in str(err), str(err)
        if hasattr(resource, "close"):
            resource.close()


def _weighted_df(spark, n=30, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3))
    y = rng.integers(0, 3, n)
    w = rng.uniform(0.1, 3.0, n)
    rows = [(i, Vectors.dense(a.tolist()), float(b), float(c)) for i, (a, b, c) in enumerate(zip(x, y, w))]
    fields = [StructField("id", LongType()), StructField("features", VectorUDT()), StructField("label", DoubleType()),
              StructField("w", DoubleType())]
    return spark.createDataFrame(rows, StructType(fields)), x, y, w


def _torch_step(net, x, loss_fn, lr):
    """One SGD step of a single Linear layer with torch; returns (loss before, flat weight+bias after)."""
    torch = pytest.importorskip("torch")
    lin = torch.nn.Linear(3, net[0].out_features).double()
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(net[0].weight.astype(np.float64)))
        lin.bias.copy_(torch.from_numpy(net[0].bias.astype(np.float64)))
    value = loss_fn(lin(torch.from_numpy(x)))
    value.backward()
    with torch.no_grad():
        new = torch.cat([(lin.weight - lr * lin.weight.grad).reshape(-1), lin.bias - lr * lin.bias.grad])
    return float(value.detach()), new.numpy()


def test_weight_col_and_class_weights_give_the_weighted_mean_loss(spark):
    torch = pytest.importorskip("torch")
    df, x, y, w = _weighted_df(spark)
    cw = [1.0, 2.0, 0.5]
    net = nn.Sequential(nn.Linear(3, 3)).initialize(0)
    model = DLClassifier(network=net, optimizer=SGD(lr=0.5), batchSize=30, maxEpoch=1, numPartitions=2,
                         weightCol="w", classWeights=cw).fit(df)
    per_row = torch.nn.CrossEntropyLoss(weight=torch.tensor(cw, dtype=torch.float64), reduction="none")
    yt, wt = torch.from_numpy(y), torch.from_numpy(w)
    weighted_mean = lambda z: (per_row(z, yt) * wt).sum() / (wt * torch.tensor(cw)[yt]).sum()  # noqa: E731
    ref_loss, ref_w = _torch_step(net, x, weighted_mean, 0.5)
    assert model.summary.loss[0] == pytest.approx(ref_loss, rel=1e-5)
    np.testing.assert_allclose(model.network.flat_parameters, ref_w, rtol=1e-5, atol=1e-6)


def test_weight_col_regression_and_bad_weights(spark):
    torch = pytest.importorskip("torch")
    df, x, y, w = _weighted_df(spark, seed=1)
    net = nn.Sequential(nn.Linear(3, 1)).initialize(0)
    model = DLEstimator(network=net, optimizer=SGD(lr=0.2), batchSize=30, maxEpoch=1, weightCol="w").fit(df)
    yt, wt = torch.from_numpy(y.astype(np.float64)), torch.from_numpy(w)
    ref_loss, ref_w = _torch_step(net, x, lambda z: (wt * (z[:, 0] - yt) ** 2).sum() / wt.sum(), 0.2)
    assert model.summary.loss[0] == pytest.approx(ref_loss, rel=1e-5)
    np.testing.assert_allclose(model.network.flat_parameters, ref_w, rtol=1e-5, atol=1e-6)
    bad = df.withColumn("w", (df["id"] - 3).cast("double"))
    with pytest.raises(ValueError, match=r"column 'w' has 3 of 30 rows with negative weights.*Row\(id=0"):
        DLEstimator(network=net, maxEpoch=1, weightCol="w").fit(bad)
    with pytest.raises(ValueError, match="classWeights has 2 entries but the network classifies 3 classes"):
        DLClassifier(network=models.mlp(in_features=3, hidden=(4,), num_classes=3), classWeights=[1.0, 2.0],
                     maxEpoch=1, featureShape=[3]).fit(df)
    with pytest.raises(TypeError, match="weightCol 'features' must be a numeric column"):
        DLEstimator(network=net, maxEpoch=1, weightCol="features").fit(df)
