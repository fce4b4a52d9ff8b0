"""Inference at full speed, and still exact: transform equals the network's numpy forward for every feature type,
through the JVM bridge's packed path and the plain Arrow path, with PySpark's Arrow setting on and off; rows keep
their order and count (empty partitions, batches smaller than a partition, no rows); streaming DataFrames;
driver-side ``predict``/``predictBatch``; one network replica per Python worker."""
import os
import re
import time

import numpy as np
import pytest
from pyspark import cloudpickle
from pyspark.ml.linalg import DenseVector, Vectors, VectorUDT
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DoubleType, FloatType, LongType, StructField, StructType

from sparkdl import models, nn
from sparkdl.ml import DLClassificationModel, DLModel

D = 6


@pytest.fixture(scope="module")
def net():
    return models.mlp(in_features=D, hidden=(16,), num_classes=4).initialize(2)


@pytest.fixture(scope="module")
def x():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(41, D)).astype(np.float32)
    x[::3, 1:4] = 0.0  # sparse rows
    return x


def _log_softmax(z):
    z = z.astype(np.float64)
    m = z.max(axis=1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=1, keepdims=True))


def _all_types_df(spark, x, partitions=3):
    schema = StructType([StructField("id", LongType()), StructField("dense", VectorUDT()),
                         StructField("sparse", VectorUDT()), StructField("arr_f", ArrayType(FloatType())),
                         StructField("arr_d", ArrayType(DoubleType()))]
                        + [StructField(f"c{j}", DoubleType()) for j in range(D)])
    rows = [(i, Vectors.dense(v.tolist()), Vectors.sparse(D, {j: float(v[j]) for j in np.flatnonzero(v)}),
             v.tolist(), v.astype(np.float64).tolist(), *map(float, v)) for i, v in enumerate(x)]
    return spark.createDataFrame(rows, schema).repartition(partitions)


@pytest.fixture(params=["packed", "plain-arrow"])
def path(request, monkeypatch):
    """The bridge's packed float32 rows, or (as in a session without the jar) the plain Arrow path."""
    if request.param == "plain-arrow":
        import sparkdl.ml.model
        monkeypatch.setattr(sparkdl.ml.model, "packed_features",
                            lambda sc, spec, cols, schema, error=None: (spec, cols))
    return request.param


@pytest.mark.parametrize("arrow_enabled", ["true", "false"])
def test_transform_equals_numpy_forward_for_every_input_type(spark, net, x, path, arrow_enabled):
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", arrow_enabled)
    try:
        df = _all_types_df(spark, x)
        expected_raw = _log_softmax(net(x))
        reg = nn.Sequential(nn.Linear(D, 3)).initialize(4)
        for col in ("dense", "sparse", "arr_f", "arr_d", None):
            model = DLClassificationModel(net).setFeatureShape([D]).setInferenceBatchSize(8)
            rmodel = DLModel(reg).setFeatureShape([D])
            if col is None:
                model.setFeaturesCols([f"c{j}" for j in range(D)])
                rmodel.setFeaturesCols([f"c{j}" for j in range(D)])
            else:
                model.setFeaturesCol(col)
                rmodel.setFeaturesCol(col)
            rows = sorted(model.transform(df).collect(), key=lambda r: r["id"])
            assert [r["id"] for r in rows] == list(range(len(x)))
            raw = np.array([r["rawPrediction"].toArray() for r in rows])
            np.testing.assert_allclose(raw, expected_raw, atol=1e-6, err_msg=f"{col} {path}")
            np.testing.assert_allclose(np.array([r["probability"].toArray() for r in rows]), np.exp(expected_raw),
                                       atol=1e-6)
            np.testing.assert_array_equal([r["prediction"] for r in rows], net(x).argmax(axis=1))
            pred = sorted(rmodel.transform(df).collect(), key=lambda r: r["id"])
            np.testing.assert_allclose(np.array([r["prediction"].toArray() for r in pred]), reg(x), atol=1e-6,
                                       err_msg=f"{col} {path}")
    finally:
        spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")


def test_transform_uses_the_packed_path_when_the_bridge_is_loaded(spark, net, x):
    out = DLClassificationModel(net).setFeatureShape([D]).setFeaturesCol("dense").transform(_all_types_df(spark, x))
    plan = out._jdf.queryExecution().executedPlan().toString()
    assert re.search(r"predict\(static_invoke\(org\.sparkdl\.bridge\.FloatRows\.packVector\(dense#\d+", plan), plan
    assert plan.count("ArrowEvalPython") == 1, plan
    # one network call per row, whatever the number of output columns selected from it
    udfs = re.search(r"ArrowEvalPython \[.*\], \[(.*?)\]", plan)
    assert udfs and len(udfs.group(1).split(",")) == 1, plan


def test_transform_reuses_its_output_columns_until_a_param_changes(spark, net, x):
    df = _all_types_df(spark, x, partitions=2)
    model = DLClassificationModel(net).setFeatureShape([D]).setFeaturesCol("dense")
    model.transform(df)
    first = model._outputs[1]
    model.transform(df)
    assert model._outputs[1] is first  # nothing changed: no new pickled function, no new JVM object
    expected = net(x).argmax(axis=1)
    for change in (lambda m: m.setFeaturesCol("arr_f"), lambda m: m.setRawPredictionCol(""),
                   lambda m: m.setInferenceBatchSize(5)):
        change(model)
        out = model.transform(df)
        assert model._outputs[1] is not first
        first = model._outputs[1]
        rows = sorted(out.collect(), key=lambda r: r["id"])
        np.testing.assert_array_equal([r["prediction"] for r in rows], expected)
        assert ("rawPrediction" in out.columns) == (model.getRawPredictionCol() != "")


def test_outputs_of_one_model_over_two_dataframes_join_and_union(spark, net, x):
    """The model's output columns are built once and reused: each use must still resolve to its own rows."""
    df = _all_types_df(spark, x, partitions=2)
    model = DLClassificationModel(net).setFeatureShape([D]).setFeaturesCol("dense")
    a = model.transform(df.select("id", "dense"))
    cols = model._outputs[1]
    b = model.transform(df.select("id", F.col("dense"), (F.col("id") * 10).alias("ten")).where("id % 2 = 0"))
    assert model._outputs[1] is cols  # the same Columns in both DataFrames
    joined = a.join(b.select("id", "ten", b["prediction"].alias("p2")), "id").orderBy("id").collect()
    expected = net(x).argmax(axis=1)
    assert [r["id"] for r in joined] == list(range(0, len(x), 2))
    np.testing.assert_array_equal([r["prediction"] for r in joined], expected[::2])
    np.testing.assert_array_equal([r["p2"] for r in joined], expected[::2])
    both = a.select("id", "prediction").union(b.select("id", "prediction")).collect()
    assert len(both) == len(x) + (len(x) + 1) // 2
    assert all(r["prediction"] == expected[r["id"]] for r in both)


def test_output_columns_follow_the_feature_column_type(spark, net, x):
    """One model over columns of one name but other element types: the columns are rebuilt for each type."""
    df = _all_types_df(spark, x, partitions=2)
    model = DLClassificationModel(net).setFeatureShape([D]).setFeaturesCol("f")
    expected = net(x).argmax(axis=1)
    seen = []
    for source in ("arr_f", "arr_d", "dense", "arr_f"):
        out = model.transform(df.select("id", F.col(source).alias("f")))
        seen.append(model._outputs[1])
        rows = sorted(out.collect(), key=lambda r: r["id"])
        np.testing.assert_array_equal([r["prediction"] for r in rows], expected, err_msg=source)
    assert len({id(c) for c in seen}) == 4


def test_copies_share_the_broadcast_network(spark, net, x):
    df = _all_types_df(spark, x, partitions=2)
    model = DLClassificationModel(net).setFeatureShape([D]).setFeaturesCol("dense")
    model.transform(df)
    other = model.copy({model.predictionCol: "p"})
    out = other.transform(df)
    assert other._bc is model._bc and model.getPredictionCol() == "prediction"
    rows = sorted(out.collect(), key=lambda r: r["id"])
    np.testing.assert_array_equal([r["p"] for r in rows], net(x).argmax(axis=1))
    assert cloudpickle.loads(cloudpickle.dumps(model))._bc is None  # a broadcast does not travel


def test_transform_keeps_duplicate_and_unusual_column_names(spark, net, x):
    df = _all_types_df(spark, x, partitions=2).select("id", "dense", F.col("arr_f").alias("a.b `c`"))
    joined = df.join(df.select("id", F.col("dense").alias("other")), "id").select("*", F.col("other").alias("id"))
    out = DLClassificationModel(net).setFeatureShape([D]).setFeaturesCol("dense").transform(joined)
    assert out.columns == ["id", "dense", "a.b `c`", "other", "id", "rawPrediction", "probability", "prediction"]
    rows = sorted(out.collect(), key=lambda r: r[0])
    np.testing.assert_array_equal([r["prediction"] for r in rows], net(x).argmax(axis=1))


def test_transform_of_an_integer_array_column(spark, net):
    ints = np.arange(5 * D).reshape(5, D) % 7 - 3
    df = spark.createDataFrame([(i, r.tolist()) for i, r in enumerate(ints)], "id long, f array<int>")
    out = DLClassificationModel(net).setFeatureShape([D]).setFeaturesCol("f").transform(df)
    rows = sorted(out.collect(), key=lambda r: r["id"])
    np.testing.assert_allclose(np.array([r["rawPrediction"].toArray() for r in rows]),
                               _log_softmax(net(ints.astype(np.float32))), atol=1e-6)


def test_order_and_count_with_empty_partitions_small_batches_and_no_rows(spark, net, path):
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "3")
    try:
        # 10 rows over 8 partitions: some partitions are empty, all are smaller than inferenceBatchSize.
        df = spark.range(0, 10, numPartitions=8).select(
            "id", F.array(*[(F.col("id") * (j + 1) * 0.1 - 0.3).cast("float") for j in range(D)]).alias("f"))
        model = DLClassificationModel(net).setFeatureShape([D]).setFeaturesCol("f").setInferenceBatchSize(4)
        rows = model.transform(df).collect()
        assert [r["id"] for r in rows] == [r["id"] for r in df.collect()]  # same order, same count
        feats = np.array([r["f"] for r in rows], np.float32)
        np.testing.assert_allclose(np.array([r["rawPrediction"].toArray() for r in rows]), _log_softmax(net(feats)),
                                   atol=1e-6)
        empty = model.transform(df.filter("id < 0"))
        assert empty.collect() == [] and empty.columns == ["id", "f", "rawPrediction", "probability", "prediction"]
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def test_streaming_transform_from_a_rate_source(spark, net, tmp_path):
    stream = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 7).option("numPartitions", 2).load()
              .select("value", F.array(*[(F.col("value") % (j + 3) - 1.0).cast("double") for j in range(D)])
                      .alias("features")))
    model = DLClassificationModel(net).setFeatureShape([D]).setProbabilityCol("")
    query = (model.transform(stream).writeStream.format("memory").queryName("sparkdl_stream_out")
             .option("checkpointLocation", str(tmp_path / "ckpt")).outputMode("append")
             .trigger(processingTime="1 second").start())
    try:
        deadline = time.monotonic() + 300
        while spark.table("sparkdl_stream_out").count() < 21 and time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            time.sleep(1)
    finally:
        query.stop()
    rows = spark.table("sparkdl_stream_out").collect()
    assert len(rows) >= 21 and len({r["value"] for r in rows}) == len(rows)
    feats = np.array([r["features"] for r in rows], np.float32)
    np.testing.assert_allclose(np.array([r["rawPrediction"].toArray() for r in rows]), _log_softmax(net(feats)),
                               atol=1e-6)
    np.testing.assert_array_equal([r["prediction"] for r in rows], net(feats).argmax(axis=1))


def test_predict_one_row_and_numpy_batches_on_the_driver(net, x):
    model = DLClassificationModel(net).setFeatureShape([D])
    raw = _log_softmax(net(x))
    assert model.predict(Vectors.dense(x[0].tolist())) == float(raw[0].argmax())
    assert model.predict(x[1].tolist()) == float(raw[1].argmax())
    sparse = Vectors.sparse(D, {j: float(x[0][j]) for j in np.flatnonzero(x[0])})
    assert isinstance(model.predictProbability(sparse), DenseVector)
    np.testing.assert_allclose(model.predictProbability(sparse).toArray(), np.exp(raw[0]), atol=1e-6)
    np.testing.assert_allclose(model.predictRaw(x[2]).toArray(), raw[2], atol=1e-6)
    batch = model.setProbabilityCol("").predictBatch(x)
    assert sorted(batch) == ["prediction", "rawPrediction"]
    np.testing.assert_allclose(batch["rawPrediction"], raw, atol=1e-6)
    np.testing.assert_array_equal(batch["prediction"], raw.argmax(axis=1))
    reg = DLModel(nn.Sequential(nn.Linear(D, 1)).initialize(0)).setFeatureShape([D]).setPredictionCol("y")
    np.testing.assert_allclose(reg.predictBatch(x)["y"], reg.network(x)[:, 0], atol=1e-6)
    assert isinstance(reg.predict(x[0]), float)
    with pytest.raises(ValueError, match=r"features must have shape \(N, 6\) or \(N, 6\).*got shape \(41, 5\)"):
        model.predictBatch(x[:, :5])
    with pytest.raises(ValueError, match="row 1 holds NaN"):
        model.predictBatch(np.where(np.arange(41)[:, None] == 1, np.nan, x))


def test_one_network_replica_per_python_worker(spark, net):
    from sparkdl.engine.broadcast import CloudBroadcast
    bc = CloudBroadcast(spark.sparkContext, net)
    try:
        seen = spark.sparkContext.parallelize(range(8), 8).mapPartitions(
            lambda _: [(os.getpid(), id(bc.value))]).collect()
        seen += spark.sparkContext.parallelize(range(4), 4).mapPartitions(
            lambda _: [(os.getpid(), id(bc.value))]).collect()
    finally:
        bc.destroy()
    by_worker = {}
    for pid, obj in seen:
        by_worker.setdefault(pid, set()).add(obj)
    assert all(len(objs) == 1 for objs in by_worker.values()), by_worker
    assert len(by_worker) < len(seen)  # workers were reused across tasks and jobs


def test_transform_broadcasts_the_network_once_per_model(spark, net, x):
    model = DLClassificationModel(net).setFeatureShape([D]).setFeaturesCol("arr_f")
    df = _all_types_df(spark, x[:5], partitions=1)
    model.transform(df).collect()
    first = model._bc
    model.transform(df).collect()
    assert model._bc is first
