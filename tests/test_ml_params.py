"""The stages follow PySpark's Params conventions: keyword-only __init__/setParams, typed and range-checked
converters, getters, setters that return self, informative explainParams. No Spark job needed."""
import inspect

import pytest

from sparkdl import models, nn
from sparkdl.ml import DLClassificationModel, DLClassifier, DLEstimator, DLModel
from sparkdl.optim import SGD


def test_keyword_only_init_and_set_params():
    with pytest.raises(TypeError, match="forces keyword arguments"):
        DLClassifier(models.mlp())
    net = nn.Sequential(nn.Linear(2, 2))
    clf = DLClassifier(network=net, maxEpoch=3, featuresCol="f")
    assert clf._input_kwargs == {"network": net, "maxEpoch": 3, "featuresCol": "f"}
    assert clf.getMaxEpoch() == 3 and clf.getFeaturesCol() == "f" and clf.getNetwork() is net
    assert clf.setParams(batchSize=8, labelCol="y") is clf
    assert clf.getBatchSize() == 8 and clf.getLabelCol() == "y" and clf.getMaxEpoch() == 3
    for cls in (DLClassifier, DLEstimator):
        sig = inspect.signature(cls.__init__)
        assert all(p.kind == p.KEYWORD_ONLY for n, p in sig.parameters.items() if n != "self")
        assert list(sig.parameters) == list(inspect.signature(cls.setParams).parameters)


def test_defaults_match_signature_and_pyspark_names():
    clf = DLClassifier()
    sig = inspect.signature(DLClassifier.__init__).parameters
    for name, p in sig.items():
        if name != "self" and p.default is not None:
            assert clf.getOrDefault(name) == p.default, name
    for name in ("featuresCol", "labelCol", "predictionCol", "probabilityCol", "rawPredictionCol",
                 "validationIndicatorCol", "seed", "handleInvalid"):
        assert clf.hasParam(name)
    assert DLEstimator().hasParam("predictionCol") and not DLEstimator().hasParam("probabilityCol")


def test_setters_return_self_and_getters_exist():
    clf = DLClassifier()
    values = {"featuresCol": "x", "featuresCols": ["a", "b"], "labelCol": "y", "featureShape": [1, 2, 2],
              "network": models.mlp(in_features=4), "loss": nn.CrossEntropyLoss(), "optimizer": SGD(lr=0.1),
              "learningRate": 0.5, "batchSize": 7, "maxEpoch": 2, "seed": 9, "numPartitions": 3,
              "validationIndicatorCol": "v", "checkpointDir": "/tmp/x", "handleInvalid": "skip",
              "predictionCol": "p", "probabilityCol": "q", "rawPredictionCol": "r", "inferenceBatchSize": 16}
    for name, v in values.items():
        cap = name[0].upper() + name[1:]
        assert getattr(clf, f"set{cap}")(v) is clf, name
        assert getattr(clf, f"get{cap}")() == v or getattr(clf, f"get{cap}")() is v, name
    model = DLClassificationModel()
    for name in ("featuresCol", "predictionCol", "probabilityCol", "rawPredictionCol", "handleInvalid",
                 "featureShape", "inferenceBatchSize"):
        cap = name[0].upper() + name[1:]
        assert getattr(model, f"set{cap}")(values[name]) is model
    assert not model.hasParam("maxEpoch") and not model.hasParam("network")
    assert DLModel().setPredictionCol("out").getPredictionCol() == "out"


@pytest.mark.parametrize("name,value,exc,needle", [
    ("network", "mlp", TypeError, "network must be a sparkdl.nn.Module"),
    ("loss", 3, TypeError, "loss must be a sparkdl loss"),
    ("optimizer", "adam", TypeError, "optimizer must be a sparkdl.optim optimizer"),
    ("batchSize", 0, ValueError, "batchSize must be >= 1"),
    ("maxEpoch", 1.5, TypeError, "Could not convert"),
    ("learningRate", -1.0, ValueError, "learningRate must be a finite float > 0"),
    ("featureShape", [1, 0], ValueError, "featureShape must be a non-empty list of positive ints"),
    ("handleInvalid", "ignore", ValueError, "handleInvalid must be one of ['error', 'skip', 'keep']"),
    ("featuresCols", [], ValueError, "featuresCols must name at least one column"),
    ("validationData", [1, 2], TypeError, "validationData must be a pyspark.sql.DataFrame"),
])
def test_converters_reject_bad_values(name, value, exc, needle):
    clf = DLClassifier()
    with pytest.raises(exc, match=needle.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        clf._set(**{name: value})
    with pytest.raises((TypeError, ValueError), match=name):
        clf.set(clf.getParam(name), value)


def test_explain_params_is_informative():
    text = DLClassifier(network=models.mlp(in_features=4), maxEpoch=3).explainParams()
    assert "maxEpoch: number of passes over the training data (>= 1). (default: 10, current: 3)" in text
    assert "handleInvalid: how to handle invalid rows" in text and "'keep'" in text
    assert "network: the sparkdl.nn.Module to train" in text and "current: Sequential(" in text
