"""DLClassifier/DLEstimator reject bad input in fit before training, with errors that name the column, the
problem and an example row; handleInvalid='skip' drops and counts the bad rows."""
import logging

import numpy as np
import pytest
from pyspark.ml.linalg import Vectors

from sparkdl import models
from sparkdl.ml import DLClassifier, DLEstimator


def _net(in_features=3, classes=3):
    return models.mlp(in_features=in_features, hidden=(8,), num_classes=classes).initialize(0)


def _clf(**kw):
    return DLClassifier(network=kw.pop("network", _net()), maxEpoch=1, batchSize=64, **kw)


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(0)
    return [(i, Vectors.dense(rng.normal(size=3)), float(i % 3)) for i in range(40)]


def _df(spark, rows, schema="id long, features vector, label double"):
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql.types import DoubleType, LongType, StructField, StructType
    if schema == "id long, features vector, label double":
        schema = StructType([StructField("id", LongType()), StructField("features", VectorUDT()),
                             StructField("label", DoubleType())])
    return spark.createDataFrame(rows, schema)


def _fails(spark, est, df, exc, *needles):
    with pytest.raises(exc) as info:
        est.fit(df)
    msg = str(info.value)
    for n in needles:
        assert n in msg, msg
    return msg


def test_missing_and_mistyped_columns(spark, rows):
    df = _df(spark, rows)
    _fails(spark, _clf(featuresCol="feats"), df, ValueError, "featuresCol 'feats'", "['id', 'features', 'label']")
    _fails(spark, _clf(labelCol="y"), df, ValueError, "labelCol 'y'")
    text = spark.createDataFrame([("a", 1.0)], "features string, label double")
    _fails(spark, _clf(), text, TypeError, "featuresCol 'features'", "string", "VectorAssembler")
    strlabel = spark.createDataFrame([(Vectors.dense([1.0, 2.0, 3.0]), "cat")], ["features", "label"])
    _fails(spark, _clf(), strlabel, TypeError, "labelCol 'label'", "StringIndexer")
    _fails(spark, DLClassifier(), df, ValueError, "network Param is not set")
    _fails(spark, _clf(validationIndicatorCol="id"), df, TypeError, "validationIndicatorCol 'id' must be boolean")


def test_bad_rows_named_with_example(spark, rows):
    bad = list(rows)
    bad[5] = (5, None, 2.0)
    msg = _fails(spark, _clf(), _df(spark, bad), ValueError, "column 'features' has 1 of 40 rows with null values",
                 "Row(id=5, features=None, label=2.0)", "handleInvalid='skip'")
    bad = list(rows)
    bad[7] = (7, Vectors.dense([1.0, float("nan"), 0.0]), 1.0)
    bad[9] = (9, Vectors.sparse(3, [2], [float("inf")]), 0.0)
    _fails(spark, _clf(), _df(spark, bad), ValueError, "2 of 40 rows with NaN or infinite values", "Row(id=7")
    bad = list(rows)
    bad[3] = (3, Vectors.dense([1.0, 2.0]), 0.0)
    _fails(spark, _clf(), _df(spark, bad), ValueError, "column 'features' holds vectors of 2 to 3 values, but the "
           "network takes 3 values per row; e.g. Row(id=3", "handleInvalid='skip'")
    msg = _fails(spark, _clf(network=_net(in_features=4)), _df(spark, bad), ValueError,
                 "column 'features' holds vectors of different lengths", "Row(id=3", "featureShape")
    assert "2:" in msg and "3:" in msg


def test_bad_labels(spark, rows):
    bad = list(rows)
    bad[4] = (4, rows[4][1], 1.5)
    _fails(spark, _clf(), _df(spark, bad), ValueError, "column 'label'", "non-integer labels", "Row(id=4")
    bad = list(rows)
    bad[6] = (6, rows[6][1], 3.0)
    _fails(spark, _clf(), _df(spark, bad), ValueError, "labels outside [0, 2]", "the network has 3 outputs",
           "Row(id=6")
    bad[6] = (6, rows[6][1], None)
    _fails(spark, _clf(), _df(spark, bad), ValueError, "column 'label' has 1 of 40 rows with null values")
    _fails(spark, _clf(network=_net(classes=1)), _df(spark, rows), ValueError, "labels other than 0 and 1")


def test_network_shape_mismatch_and_feature_shape(spark, rows):
    df = _df(spark, rows)
    _fails(spark, _clf(network=_net(in_features=5)), df, ValueError, "does not accept rows of shape (3,)",
           "featureShape")
    _fails(spark, _clf(network=_net(in_features=4), featureShape=[2, 2]), df, ValueError,
           "a length other than 4 (featureShape [2, 2])", "Row(id=0")


def test_regression_label_checks(spark):
    rows = [(Vectors.dense([1.0, 2.0]), [1.0, 2.0, 3.0])] * 4 + [(Vectors.dense([1.0, 2.0]), [1.0])]
    df = spark.createDataFrame(rows, ["features", "label"])
    est = DLEstimator(network=models.mlp(in_features=2, hidden=(4,), num_classes=3), maxEpoch=1)
    _fails(spark, est, df, ValueError, "column 'label' has 1 of 5 rows with a length other than 3")
    est1 = DLEstimator(network=models.mlp(in_features=2, hidden=(4,), num_classes=3), maxEpoch=1)
    scalar = spark.createDataFrame([(Vectors.dense([1.0, 2.0]), 1.0)], ["features", "label"])
    _fails(spark, est1, scalar, ValueError, "outputs 3 values per row", "Vector or array label")


def test_skip_drops_counts_and_logs(spark, rows, caplog):
    bad = list(rows)
    bad[1] = (1, None, 0.0)
    bad[2] = (2, Vectors.dense([float("nan"), 0.0, 0.0]), 2.0)
    bad[8] = (8, rows[8][1], 7.0)
    bad[11] = (11, Vectors.dense([1.0]), 1.0)
    with caplog.at_level(logging.WARNING, logger="sparkdl.ml"):
        model = _clf(handleInvalid="skip", featureShape=[3]).fit(_df(spark, bad))
    assert model.numSkippedRows == 4
    assert sum(r["samples"] for r in model.summary.iterations) == 36
    text = caplog.text
    assert "skipped 4 of 40 rows" in text and "null values in 'features'" in text
