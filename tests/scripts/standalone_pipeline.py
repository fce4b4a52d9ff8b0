"""Run by tests/test_standalone_cluster.py against a standalone master: the README's Spark ML pipeline in a plain
``SparkSession.builder.master(MASTER)`` session (no sparkdl jar, no sparkdl settings), fit, transform, save and
load, printing one JSON line: accuracy, whether the loaded pipeline predicts the same, the application id and the
executor JVMs that loaded sparkdl's bridge (attached at run time)."""
import json
import os
import sys

import numpy as np
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.feature import VectorAssembler
from pyspark.sql import SparkSession

from sparkdl import jvm, nn
from sparkdl.ml import DLClassifier

if __name__ == "__main__":
    master, out = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.master(master).config("spark.ui.enabled", "false").getOrCreate()
    sc = spark.sparkContext
    rng = np.random.default_rng(0)
    x = rng.standard_normal((600, 4))
    y = (x[:, 0] + x[:, 1] > 0).astype(float) + (x[:, 2] > 1.0)
    rows = [tuple(map(float, r)) + (float(label),) for r, label in zip(x, y)]
    df = spark.createDataFrame(sc.parallelize(rows, 4), ["a", "b", "c", "d", "label"]).cache()
    net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))
    clf = DLClassifier(network=net, featuresCol="features", labelCol="label", maxEpoch=10, batchSize=64,
                       learningRate=1e-2, seed=0)
    pipeline = Pipeline(stages=[VectorAssembler(inputCols=["a", "b", "c", "d"], outputCol="features"), clf])
    model = pipeline.fit(df)
    predicted = model.transform(df).select("label", "prediction").collect()
    accuracy = float(np.mean([r.label == r.prediction for r in predicted]))
    model.write().overwrite().save(os.path.join(out, "pipeline_model"))
    loaded = PipelineModel.load(os.path.join(out, "pipeline_model"))
    again = loaded.transform(df).select("prediction").collect()
    b = jvm.bridge(sc)
    task_jvms = sorted({t.split(" ")[0] for t in b.taskVersions(sc._jsc, 8)})
    print(json.dumps({"accuracy": accuracy, "same_after_load": [r.prediction for r in predicted] ==
                      [r.prediction for r in again], "app": sc.applicationId, "driver_jvm": b.jvmName(),
                      "task_jvms": task_jvms}))
    spark.stop()
