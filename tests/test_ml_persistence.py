"""Saving and loading the stages alone and inside Pipeline/PipelineModel: identical predictions after loading,
the network stored as sparkdl.io data (JSON + .npz), no pickles."""
import os

import numpy as np
import pytest
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.feature import VectorAssembler

from sparkdl import models
from sparkdl.io import load_model
from sparkdl.ml import DLClassificationModel, DLClassifier, DLEstimator, DLModel
from sparkdl.ml.persistence import read_network
from sparkdl.nn import CrossEntropyLoss
from sparkdl.optim import SGD


@pytest.fixture(scope="module")
def table(spark):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 3))
    y = (x[:, 0] - x[:, 2] > 0).astype(float) + (x[:, 1] > 1.0)
    return spark.createDataFrame([(i, *map(float, r), float(t)) for i, (r, t) in enumerate(zip(x, y))],
                                 "id long, a double, b double, c double, label double")


def _files(root):
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]


def test_estimator_round_trip_keeps_params_network_loss_optimizer(spark, tmp_path):
    net = models.mlp(in_features=3, hidden=(5,), num_classes=3).initialize(2)
    clf = DLClassifier(network=net, loss=CrossEntropyLoss(label_smoothing=0.1), optimizer=SGD(lr=0.3, momentum=0.5),
                       maxEpoch=7, featuresCols=["a", "b", "c"], handleInvalid="skip", featureShape=[3])
    path = str(tmp_path / "clf")
    clf.save(path)
    back = DLClassifier.load(path)
    assert back.uid == clf.uid
    for p in ("maxEpoch", "featuresCols", "handleInvalid", "featureShape", "batchSize", "featuresCol"):
        assert back.getOrDefault(p) == clf.getOrDefault(p), p
    assert back.isSet("maxEpoch") and not back.isSet("batchSize")
    np.testing.assert_array_equal(back.getNetwork().flat_parameters, net.flat_parameters)
    assert back.getLoss().get_config() == clf.getLoss().get_config()
    assert type(back.getOptimizer()) is SGD and back.getOptimizer().get_config() == clf.getOptimizer().get_config()
    with pytest.raises(Exception):
        clf.save(path)  # exists
    clf.write().overwrite().save(path)
    with pytest.raises(ValueError, match="holds a sparkdl.ml.classifier.DLClassifier, not a sparkdl.ml.estimator"):
        DLEstimator.load(path)


def test_pipeline_model_saves_and_loads_identically(spark, table, tmp_path):
    assembler = VectorAssembler(inputCols=["a", "b", "c"], outputCol="features")
    clf = DLClassifier(network=models.mlp(in_features=3, hidden=(8,), num_classes=3).initialize(0), maxEpoch=2,
                       batchSize=60, learningRate=0.05)
    pipeline = Pipeline(stages=[assembler, clf])
    ppath = str(tmp_path / "pipeline")
    pipeline.save(ppath)
    loaded_pipeline = Pipeline.load(ppath)
    assert isinstance(loaded_pipeline.getStages()[1], DLClassifier)

    model = loaded_pipeline.fit(table)
    mpath = str(tmp_path / "model")
    model.save(mpath)
    loaded = PipelineModel.load(mpath)
    stage = loaded.stages[1]
    assert isinstance(stage, DLClassificationModel) and stage.getFeatureShape() == [3]
    np.testing.assert_array_equal(stage.network.flat_parameters, model.stages[1].network.flat_parameters)
    cols = ["id", "rawPrediction", "probability", "prediction"]
    a = model.transform(table).select(cols).orderBy("id").collect()
    b = loaded.transform(table).select(cols).orderBy("id").collect()
    assert a == b

    files = _files(mpath)
    assert not any(f.endswith((".pkl", ".pickle")) for f in files)
    net_dir = [d for d, _, _ in os.walk(mpath) if d.endswith("network")][0]
    net = read_network(spark, net_dir)
    np.testing.assert_array_equal(net.flat_parameters, stage.network.flat_parameters)
    # the stored rows are exactly a sparkdl.io model directory
    rows = {r["file"]: bytes(r["content"]) for r in spark.read.parquet(net_dir).collect()}
    assert set(rows) == {"metadata.json", "weights.npz"}
    os.makedirs(tmp_path / "plain")
    for name, content in rows.items():
        (tmp_path / "plain" / name).write_bytes(content)
    np.testing.assert_array_equal(load_model(str(tmp_path / "plain")).flat_parameters, net.flat_parameters)


def test_direct_model_save_load(spark, table, tmp_path):
    from sparkdl import nn
    model = DLModel(nn.Sequential(nn.Linear(3, 2)).initialize(0)).setFeaturesCols(["a", "b", "c"]) \
        .setFeatureShape([3]).setPredictionCol("out")
    path = str(tmp_path / "dlmodel")
    model.save(path)
    back = DLModel.load(path)
    assert back.getPredictionCol() == "out" and back.getFeaturesCols() == ["a", "b", "c"]
    assert not back.hasSummary
    a = model.transform(table).select("out").collect()
    assert a == back.transform(table).select("out").collect()
