"""DLClassifier under PySpark's tuning: copy() semantics, CrossValidator / TrainValidationSplit with a
ParamGridBuilder, MulticlassClassificationEvaluator and BinaryClassificationEvaluator."""
import numpy as np
import pytest
from pyspark.ml.evaluation import BinaryClassificationEvaluator, MulticlassClassificationEvaluator
from pyspark.ml.feature import VectorAssembler
from pyspark.ml.tuning import CrossValidator, ParamGridBuilder, TrainValidationSplit

from sparkdl import models
from sparkdl.ml import DLClassificationModel, DLClassifier


@pytest.fixture(scope="module")
def binary(spark):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(160, 2))
    y = (x[:, 0] + 0.5 * x[:, 1] + 0.3 * rng.normal(size=160) > 0).astype(float)
    df = spark.createDataFrame([(float(a), float(b), float(t)) for (a, b), t in zip(x, y)],
                               "a double, b double, label double")
    return VectorAssembler(inputCols=["a", "b"], outputCol="features").transform(df).cache()


def test_copy_is_deep_for_the_network_and_keeps_uid():
    net = models.mlp(in_features=2, hidden=(3,), num_classes=2)
    clf = DLClassifier(network=net, maxEpoch=2)
    c = clf.copy({clf.maxEpoch: 5})
    assert c.uid == clf.uid and c.getMaxEpoch() == 5 and clf.getMaxEpoch() == 2
    assert c.getNetwork() is not net
    np.testing.assert_array_equal(c.getNetwork().flat_parameters, net.flat_parameters)
    c.getNetwork().flat_parameters[...] = 0.0
    assert np.abs(net.flat_parameters).sum() > 0


def test_cross_validator_with_multiclass_evaluator(spark, binary):
    clf = DLClassifier(network=models.mlp(in_features=2, hidden=(8,), num_classes=2).initialize(0), batchSize=40,
                       maxEpoch=2)
    grid = ParamGridBuilder().addGrid(clf.learningRate, [1e-4, 0.3]).build()
    evaluator = MulticlassClassificationEvaluator(metricName="accuracy")
    cv = CrossValidator(estimator=clf, estimatorParamMaps=grid, evaluator=evaluator, numFolds=2, seed=1, parallelism=2)
    cv_model = cv.fit(binary)
    assert len(cv_model.avgMetrics) == 2
    assert cv_model.avgMetrics[1] > cv_model.avgMetrics[0]  # lr 1e-4 barely moves in 2 epochs
    best = cv_model.bestModel
    assert isinstance(best, DLClassificationModel)
    assert evaluator.evaluate(cv_model.transform(binary)) > 0.8


def test_train_validation_split_and_binary_auc(spark, binary):
    one_logit = models.mlp(in_features=2, hidden=(8,), num_classes=1).initialize(0)
    clf = DLClassifier(network=one_logit, batchSize=80, maxEpoch=2, learningRate=0.1)
    grid = ParamGridBuilder().addGrid(clf.batchSize, [40, 80]).build()
    evaluator = BinaryClassificationEvaluator(metricName="areaUnderROC")
    tvs = TrainValidationSplit(estimator=clf, estimatorParamMaps=grid, evaluator=evaluator, trainRatio=0.75, seed=2)
    model = tvs.fit(binary)
    assert len(model.validationMetrics) == 2
    scored = model.transform(binary)
    assert model.bestModel.numClasses == 2
    auc = evaluator.evaluate(scored)
    probs = np.array([r["probability"][1] for r in scored.select("probability").collect()])
    labels = np.array([r["label"] for r in binary.select("label").collect()])
    from sklearn.metrics import roc_auc_score
    assert auc == pytest.approx(roc_auc_score(labels, probs), abs=1e-6)
    assert auc > 0.9
