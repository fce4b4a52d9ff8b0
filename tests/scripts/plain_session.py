"""Run by tests/test_plain_session.py in its own process: sparkdl in a session it did not create, printing one
JSON line with what ran and digests of the results.

Modes (the session is ``SparkSession.builder`` with no sparkdl settings and no sparkdl jar):

* ``other-jar JAR``: ``.master("local[2]")`` with ``spark.jars=JAR`` (a jar holding class ``sparkdltest.Other``, whose
  ``hello()`` is called before and after sparkdl attaches its own);
* ``no-attach``: ``.master("local[2]")``, and the driver thread's context class loader replaced by the JVM's
  application class loader, which takes no jars at run time (as on platforms whose driver is not started by
  spark-submit): sparkdl must fall back to its Python paths;
* ``submit``: no master (run under ``spark-submit --master local[2]`` without ``--jars``).
"""
import hashlib
import json
import logging
import sys

import numpy as np
from pyspark.sql import SparkSession

from sparkdl import jvm, nn
from sparkdl.engine import DataBlocks, DistributedTrainer, MaxEpoch
from sparkdl.optim import Adam

ROWS, FEATURES, CLASSES, PARTITIONS = 120, 4, 3, 2


class _Count(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def data():
    """The rows all sessions use: features, integer labels."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((ROWS, FEATURES)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5).astype(np.int64)
    return x, y


def digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def run_all(spark) -> dict:
    """DLClassifier fit and transform, and DistributedTrainer.fit, on the same data and partitioning."""
    from pyspark.ml.linalg import Vectors
    from sparkdl.ml import DLClassifier
    sc = spark.sparkContext
    x, y = data()
    df = sc.parallelize([(Vectors.dense(r.tolist()), float(label)) for r, label in zip(x, y)],
                        PARTITIONS).toDF(["features", "label"])
    net = nn.Sequential(nn.Linear(FEATURES, 8), nn.ReLU(), nn.Linear(8, CLASSES)).initialize(3)
    clf = DLClassifier(network=net, featuresCol="features", labelCol="label", maxEpoch=3, batchSize=32,
                       learningRate=1e-2, seed=1)
    model = clf.fit(df)
    out = model.transform(df).select("probability").collect()
    probabilities = np.array([r[0].toArray() for r in out])
    trained = model.network
    blocks = DataBlocks.from_samples(sc.parallelize(list(zip(x, y)), PARTITIONS))
    plain = nn.Sequential(nn.Linear(FEATURES, 8), nn.ReLU(), nn.Linear(8, CLASSES)).initialize(5)
    DistributedTrainer(plain, nn.CrossEntropyLoss(), Adam(lr=1e-2), batch_size=32, end_trigger=MaxEpoch(2),
                       seed=2, progress=False).fit(blocks)
    blocks.unpersist()
    return {"classifier": digest(trained.flat_parameters), "probabilities": digest(probabilities),
            "trainer": digest(plain.flat_parameters)}


def main(mode: str, *args) -> dict:
    builder = SparkSession.builder.config("spark.ui.enabled", "false")
    if mode != "submit":
        builder = builder.master("local[2]")
    if mode == "other-jar":
        builder = builder.config("spark.jars", args[0])
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    report = {"master": sc.master}
    if mode == "other-jar":
        report["other_before"] = sc._jvm.sparkdltest.Other.hello()
    if mode == "no-attach":
        thread = sc._jvm.java.lang.Thread.currentThread()
        thread.setContextClassLoader(sc._jvm.java.lang.ClassLoader.getSystemClassLoader())
    counter = _Count()
    logging.getLogger("sparkdl").addHandler(counter)
    report.update(run_all(spark))
    report["warnings"] = [m for m in counter.messages if "spark.jars" in m]
    report["bridge"] = jvm._bridges.get(sc) is not None
    if mode == "other-jar":
        report["other_after"] = sc._jvm.sparkdltest.Other.hello()
    jars = sc._jsc.sc().listJars()
    report["jars"] = sorted(str(jars.apply(i)).rsplit("/", 1)[-1] for i in range(jars.size()))
    spark.stop()
    return report


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:])))
