"""DLClassificationModel/DLModel.transform: batched Arrow inference that keeps every input column and pairs each
row with its own prediction, for every supported feature column type and handleInvalid mode."""
import numpy as np
import pytest
from pyspark.ml.linalg import DenseVector, Vectors, VectorUDT
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType

from sparkdl import models, nn
from sparkdl.ml import DLClassificationModel, DLModel


@pytest.fixture(scope="module")
def net():
    return models.mlp(in_features=4, hidden=(8,), num_classes=3).initialize(1)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4)).astype(np.float32)
    x[::7, 1:3] = 0.0  # some sparsity
    return x


def _df(spark, rows, ddl):
    """createDataFrame with a DDL schema in which ``vector`` means VectorUDT."""
    from pyspark.sql.types import StructField, StructType, _parse_datatype_string
    fields = []
    for part in ddl.split(", "):
        name, typ = part.split(" ", 1)
        fields.append(StructField(name, VectorUDT() if typ == "vector" else _parse_datatype_string(typ)))
    return spark.createDataFrame(rows, StructType(fields))


def _softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _by_id(rows, col):
    return np.array([np.asarray(r[col].toArray() if hasattr(r[col], "toArray") else r[col])
                     for r in sorted(rows, key=lambda r: r["id"])])


def test_preserves_columns_and_pairs_rows(spark, net, data):
    df = _df(spark, [(i, f"row{i}", Vectors.dense(v.tolist()), {"k": i}) for i, v in enumerate(data)],
             "id long, name string, features vector, meta map<string,int>")
    shuffled = df.repartition(5).filter(F.col("id") % 10 != 3)  # uncached, repartitioned, filtered
    model = DLClassificationModel(net).setFeatureShape([4])
    out = model.transform(shuffled)
    assert out.columns == ["id", "name", "features", "meta", "rawPrediction", "probability", "prediction"]
    assert isinstance(out.schema["probability"].dataType, VectorUDT)
    assert isinstance(out.schema["rawPrediction"].dataType, VectorUDT)
    assert isinstance(out.schema["prediction"].dataType, DoubleType)
    assert out.explain is not None and out._jdf.queryExecution().executedPlan().toString().count("ArrowEvalPython") == 1
    rows = out.collect()
    ids = sorted(r["id"] for r in rows)
    assert ids == [i for i in range(300) if i % 10 != 3]
    assert all(r["name"] == f"row{r['id']}" and r["meta"] == {"k": r["id"]} for r in rows)
    x = np.stack([data[i] for i in ids])
    logits = net(x).astype(np.float64)
    np.testing.assert_allclose(_by_id(rows, "features"), x, rtol=1e-6)
    np.testing.assert_allclose(_by_id(rows, "probability"), _softmax(logits), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(_by_id(rows, "rawPrediction"), np.log(_softmax(logits)), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(_by_id(rows, "prediction"), logits.argmax(axis=1))


def test_every_feature_type_gives_the_same_predictions(spark, net, data):
    x = data[:50]
    sparse = [Vectors.sparse(4, {j: float(v[j]) for j in range(4) if v[j] != 0}) for v in x]
    df = _df(
        spark, [(i, Vectors.dense(v.tolist()), sp, v.tolist(), v.tolist(), *map(float, v)) for i, (v, sp) in
         enumerate(zip(x, sparse))],
        "id long, dense vector, sparse vector, arr_f array<float>, arr_d array<double>, a double, b double, "
        "c float, d double")
    expected = net(x).argmax(axis=1)
    probs = _softmax(net(x).astype(np.float64))
    base = DLClassificationModel(net).setFeatureShape([4])
    for col in ("dense", "sparse", "arr_f", "arr_d"):
        rows = base.copy().setFeaturesCol(col).transform(df).collect()
        np.testing.assert_array_equal(_by_id(rows, "prediction"), expected, err_msg=col)
        np.testing.assert_allclose(_by_id(rows, "probability"), probs, rtol=1e-5, atol=1e-7, err_msg=col)
    rows = base.copy().setFeaturesCols(["a", "b", "c", "d"]).transform(df).collect()
    np.testing.assert_array_equal(_by_id(rows, "prediction"), expected)


def test_image_struct_from_the_image_data_source(spark, tmp_path):
    from PIL import Image
    rng = np.random.default_rng(3)
    rgb = [rng.integers(0, 256, (4, 5, 3), dtype=np.uint8) for _ in range(6)]
    for i, im in enumerate(rgb):
        Image.fromarray(im).save(tmp_path / f"img{i}.png")
    df = spark.read.format("image").load(str(tmp_path)).withColumn(
        "id", F.regexp_extract("image.origin", r"img(\d+)", 1).cast("long"))
    conv = nn.Sequential(nn.Conv2d(3, 2, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 5, 3)).initialize(0)
    model = DLClassificationModel(conv).setFeatureShape([3, 4, 5]).setFeaturesCol("image")
    rows = model.transform(df).collect()
    # Spark stores images as BGR; sparkdl reads them as (nChannels, height, width) in that order.
    x = np.stack([rgb[i][:, :, ::-1].transpose(2, 0, 1) for i in range(6)]).astype(np.float32)
    logits = conv(x).astype(np.float64)
    np.testing.assert_allclose(_by_id(rows, "rawPrediction"), np.log(_softmax(logits)), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(_by_id(rows, "prediction"), logits.argmax(axis=1))


def test_handle_invalid_in_transform(spark, net):
    rows = [(0, Vectors.dense([1.0, 2.0, 3.0, 4.0])), (1, None), (2, Vectors.dense([1.0, float("nan"), 0.0, 0.0])),
            (3, Vectors.dense([1.0, 2.0])), (4, Vectors.dense([0.0, 0.0, 1.0, 0.0]))]
    df = _df(spark, rows, "id long, features vector")
    model = DLClassificationModel(net).setFeatureShape([4])
    with pytest.raises(Exception, match="invalid features in column"):
        model.transform(df).collect()
    kept = model.copy().setHandleInvalid("skip").transform(df).collect()
    assert sorted(r["id"] for r in kept) == [0, 4]
    keep = sorted(model.copy().setHandleInvalid("keep").transform(df).collect(), key=lambda r: r["id"])
    assert [np.isnan(r["prediction"]) for r in keep] == [False, True, True, True, False]
    assert np.isnan(keep[1]["probability"].toArray()).all()
    assert keep[0]["prediction"] == float(net(np.array([[1, 2, 3, 4]], np.float32)).argmax())


def test_output_params(spark, net, data):
    df = spark.createDataFrame([(Vectors.dense(data[0].tolist()), 1.0)], ["features", "prediction"])
    model = DLClassificationModel(net).setFeatureShape([4])
    with pytest.raises(ValueError, match="output column 'prediction' already exists"):
        model.transform(df)
    out = model.copy().setPredictionCol("p").setProbabilityCol("").setRawPredictionCol("").transform(df)
    assert out.columns == ["features", "prediction", "p"]
    assert model.numClasses == 3
    with pytest.raises(ValueError, match="featuresCol 'x' is not a column"):
        model.copy().setFeaturesCol("x").transform(df)


def test_dl_model_regression_outputs(spark, data):
    one = nn.Sequential(nn.Linear(4, 1)).initialize(0)
    two = nn.Sequential(nn.Linear(4, 2)).initialize(0)
    df = _df(spark, [(i, Vectors.dense(v.tolist())) for i, v in enumerate(data[:20])], "id long, features vector")
    rows = DLModel(one).setFeatureShape([4]).transform(df).collect()
    assert isinstance(rows[0]["prediction"], float)
    np.testing.assert_allclose(_by_id(rows, "prediction"), one(data[:20])[:, 0], rtol=1e-5)
    rows = DLModel(two).setFeatureShape([4]).transform(df).collect()
    assert isinstance(rows[0]["prediction"], DenseVector)
    np.testing.assert_allclose(_by_id(rows, "prediction"), two(data[:20]), rtol=1e-5)
