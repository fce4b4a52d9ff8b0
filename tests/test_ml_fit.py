"""DLClassifier/DLEstimator.fit: the Arrow data path hands the engine exactly the DataFrame's rows, training
learns, and the Params (optimizer, learningRate, validation, checkpoints) reach the trainer."""
import os

import numpy as np
import pytest
from pyspark.ml.linalg import Vectors, VectorUDT
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DoubleType, LongType, StructField, StructType

from sparkdl import models, nn
from sparkdl.ml import DLClassifier, DLEstimator
from sparkdl.ml.arrow import FeatureSpec
from sparkdl.ml.data import LabelSpec, to_blocks
from sparkdl.ml.validation import feature_exprs, label_expr
from sparkdl.optim import SGD


def _vec_df(spark, x, y):
    fields = [StructField("id", LongType()), StructField("features", VectorUDT()), StructField("label", DoubleType())]
    rows = [(i, Vectors.dense(v.tolist()), float(t)) for i, (v, t) in enumerate(zip(x, y))]
    return spark.createDataFrame(rows, StructType(fields))


@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(0)
    centers = np.array([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]])
    y = rng.integers(0, 3, 240)
    x = centers[y] + 0.5 * rng.normal(size=(240, 3))
    return x.astype(np.float32), y


def test_arrow_blocks_hold_exactly_the_rows(spark, blobs):
    x, y = blobs
    df = _vec_df(spark, x, np.arange(len(x))).repartition(3)
    spec = FeatureSpec("vector", ("features",), (3,), (1, 3))
    blocks = to_blocks(df, spec, feature_exprs("vector", ["features"], df.schema), LabelSpec("scalar", 1, (), "int64"),
                       label_expr("scalar", "label", df.schema))
    try:
        parts = blocks.rdd.collect()
        assert blocks.num_partitions == 3 and blocks.num_samples == 240 and blocks.feature_shape == (1, 3)
        fx = np.concatenate([p[0] for p in parts])
        fy = np.concatenate([p[1] for p in parts])
        assert fx.dtype == np.float32 and fy.dtype == np.int64
        assert sorted(fy.tolist()) == list(range(240))
        np.testing.assert_array_equal(fx[:, 0, :], x[fy])  # each label (= row id) still sits with its own row
    finally:
        blocks.unpersist()


def test_classifier_learns_and_leaves_the_network_alone(spark, blobs):
    x, y = blobs
    net = models.mlp(in_features=3, hidden=(16,), num_classes=3).initialize(0)
    before = net.flat_parameters.copy()
    clf = DLClassifier(network=net, maxEpoch=3, batchSize=80, learningRate=0.05, numPartitions=2,
                       probabilityCol="p")
    model = clf.fit(_vec_df(spark, x, y))
    np.testing.assert_array_equal(net.flat_parameters, before)
    assert model.network is not net and not np.array_equal(model.network.flat_parameters, before)
    assert model.getFeatureShape() == [3] and model.getProbabilityCol() == "p" and model.numClasses == 3
    assert model.uid != clf.uid and model.hasSummary
    assert len(model.summary.iterations) == 3 * 3  # 240 / 80 iterations per epoch
    assert model.summary.loss[-1] < 0.5 * model.summary.loss[0]
    acc = model.transform(_vec_df(spark, x, y)).select(F.avg((F.col("prediction") == F.col("label")).cast("double")))
    assert acc.first()[0] > 0.9


def test_optimizer_and_learning_rate(spark, blobs):
    x, y = blobs
    df = _vec_df(spark, x[:80], y[:80])
    net = models.mlp(in_features=3, hidden=(4,), num_classes=3)
    sgd = SGD(lr=0.05, momentum=0.9)
    m1 = DLClassifier(network=net, optimizer=sgd, maxEpoch=1, batchSize=80).fit(df)
    assert [r["lr"] for r in m1.summary.iterations] == [0.05]
    assert sgd.layout is None  # fit configured a copy
    m2 = DLClassifier(network=net, optimizer=sgd, learningRate=0.2, maxEpoch=1, batchSize=80).fit(df)
    assert [r["lr"] for r in m2.summary.iterations] == [0.2]


def test_validation_indicator_and_checkpoints(spark, blobs, tmp_path):
    x, y = blobs
    df = _vec_df(spark, x, y).withColumn("isVal", F.col("id") % 4 == 0)
    clf = DLClassifier(network=models.mlp(in_features=3, hidden=(8,), num_classes=3), maxEpoch=2, batchSize=180,
                       validationIndicatorCol="isVal", checkpointDir=str(tmp_path / "ckpt"))
    model = clf.fit(df)
    assert sum(r["samples"] for r in model.summary.iterations) == 2 * 180
    vals = model.summary.validations
    assert [v["epoch"] for v in vals] == [1, 2] and {"Top1Accuracy", "Loss"} <= set(vals[0])
    assert os.listdir(tmp_path / "ckpt")


def test_validation_data_frame(spark, blobs):
    x, y = blobs
    clf = DLClassifier(network=models.mlp(in_features=3, hidden=(8,), num_classes=3), maxEpoch=1, batchSize=120,
                       validationData=_vec_df(spark, x[:30], y[:30]))
    vals = clf.fit(_vec_df(spark, x, y)).summary.validations
    assert len(vals) == 1 and 0.0 <= vals[0]["Top1Accuracy"] <= 1.0


def test_estimator_regression_scalar_and_vector_labels(spark):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 2)).astype(np.float32)
    w = np.array([[1.5, -2.0], [0.5, 1.0]], np.float32)
    t = x @ w + np.array([0.3, -0.1], np.float32)
    rows = [(i, v.tolist(), float(a[0]), Vectors.dense(a.tolist())) for i, (v, a) in enumerate(zip(x, t))]
    schema = StructType([StructField("id", LongType()), StructField("x", ArrayType(DoubleType())),
                         StructField("y1", DoubleType()), StructField("y2", VectorUDT())])
    df = spark.createDataFrame(rows, schema)
    est = DLEstimator(network=nn.Sequential(nn.Linear(2, 1)).initialize(0), featuresCol="x", labelCol="y1",
                      optimizer=SGD(lr=0.5), maxEpoch=4, batchSize=200)
    model = est.fit(df)
    pred = np.array([r["prediction"] for r in model.transform(df).orderBy("id").collect()])
    assert np.mean((pred - t[:, 0]) ** 2) < 1e-3
    est2 = DLEstimator(network=nn.Sequential(nn.Linear(2, 2)).initialize(0), featuresCol="x", labelCol="y2",
                       optimizer=SGD(lr=0.9), maxEpoch=4, batchSize=200)
    pred2 = np.array([r["prediction"].toArray() for r in est2.fit(df).transform(df).orderBy("id").collect()])
    assert pred2.shape == (200, 2) and np.mean((pred2 - t) ** 2) < 5e-3
