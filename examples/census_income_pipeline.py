"""A sparkdl network inside a regular PySpark ML Pipeline, on UCI Census-Income (KDD).

StringIndexer + OneHotEncoder + StandardScaler (numeric columns) + VectorAssembler feed a
:class:`sparkdl.ml.DLClassifier` (an MLP with one logit per class); the same features feed PySpark's
LogisticRegression. Both are fitted on the
official training split and compared by areaUnderROC on the official test split with
``BinaryClassificationEvaluator``. The fitted sparkdl PipelineModel is saved and loaded back to check that it
predicts identically.

    python examples/census_income_pipeline.py                      # full data (199,523 / 99,762 rows)
    python examples/census_income_pipeline.py --train-rows 20000 --test-rows 10000 --epochs 2

The last line printed is one JSON object with both AUCs and the timings.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

CODE_COLUMNS = ("detailed_industry_recode", "detailed_occupation_recode", "own_business_or_self_employed",
                "veterans_benefits", "year")
NUMERIC_COLUMNS = ("age", "wage_per_hour", "capital_gains", "capital_losses", "dividends_from_stocks",
                   "num_persons_worked_for_employer", "weeks_worked_in_year")


def load_frames(spark, train_rows=None, test_rows=None, seed=0):
    """The official train/test splits as Spark DataFrames: categorical and code columns as strings (missing
    as "?"), numeric columns as doubles, ``label`` 0/1. ``*_rows`` take a random subset."""
    from sparkdl.datasets import fetch_census_income
    from sparkdl.datasets.census import CENSUS_INCOME_COLUMNS, CENSUS_INCOME_LABEL
    pdf = fetch_census_income()
    categorical = [c for c, t in CENSUS_INCOME_COLUMNS.items() if t == "category"] + list(CODE_COLUMNS)
    out = {}
    for split, rows in (("train", train_rows), ("test", test_rows)):
        part = pdf[pdf["split"] == split]
        if rows is not None and rows < len(part):
            part = part.sample(n=rows, random_state=seed)
        frame = {c: part[c].astype(str).where(part[c].notna(), "?").to_numpy() for c in categorical}
        frame.update({c: part[c].astype(np.float64).to_numpy() for c in NUMERIC_COLUMNS})
        frame["label"] = part[CENSUS_INCOME_LABEL].astype(np.float64).to_numpy()
        import pandas as pd
        out[split] = spark.createDataFrame(pd.DataFrame(frame))
    return out["train"], out["test"], categorical


def feature_stages(categorical):
    """Index and one-hot encode the categorical columns, standardize the numeric ones, assemble ``features``."""
    from pyspark.ml.feature import OneHotEncoder, StandardScaler, StringIndexer, VectorAssembler
    idx = [f"{c}_idx" for c in categorical]
    hot = [f"{c}_hot" for c in categorical]
    return [StringIndexer(inputCols=list(categorical), outputCols=idx, handleInvalid="keep"),
            OneHotEncoder(inputCols=idx, outputCols=hot, handleInvalid="keep"),
            VectorAssembler(inputCols=list(NUMERIC_COLUMNS), outputCol="numeric"),
            StandardScaler(inputCol="numeric", outputCol="numeric_scaled", withMean=True),
            VectorAssembler(inputCols=["numeric_scaled"] + hot, outputCol="features")]


def run(spark, train_rows=None, test_rows=None, epochs=3, batch_size=1024, hidden=(64, 32), lr=2e-3, seed=0,
        num_partitions=None, logreg_max_iter=100, check_save=True) -> dict:
    """Fit and compare both pipelines; returns the results as a dict."""
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.evaluation import BinaryClassificationEvaluator

    from sparkdl import models
    from sparkdl.ml import DLClassifier

    train, test, categorical = load_frames(spark, train_rows, test_rows, seed)
    train, test = train.cache(), test.cache()
    n_train, n_test = train.count(), test.count()
    # The network's input width is the width of the assembled features (known once the indexers are fitted).
    features = Pipeline(stages=feature_stages(categorical)).fit(train)
    width = features.transform(train.limit(1)).first()["features"].size
    network = models.mlp(in_features=width, hidden=tuple(hidden), num_classes=2).initialize(seed)
    clf = DLClassifier(network=network, maxEpoch=epochs, batchSize=batch_size, learningRate=lr, seed=seed,
                       numPartitions=num_partitions)
    evaluator = BinaryClassificationEvaluator(metricName="areaUnderROC")
    results = {"train_rows": n_train, "test_rows": n_test, "features": width, "hidden": list(hidden),
               "epochs": epochs, "batch_size": batch_size}

    t = time.perf_counter()
    dl_model = Pipeline(stages=feature_stages(categorical) + [clf]).fit(train)
    results["sparkdl_fit_s"] = round(time.perf_counter() - t, 1)
    scored = dl_model.transform(test).cache()
    results["sparkdl_auc"] = evaluator.evaluate(scored)

    t = time.perf_counter()
    # The baseline reuses the fitted feature stages: logreg_fit_s times LogisticRegression alone.
    lr_model = Pipeline(stages=[features, LogisticRegression(maxIter=logreg_max_iter, regParam=1e-4)]).fit(train)
    results["logreg_fit_s"] = round(time.perf_counter() - t, 1)
    results["logreg_auc"] = evaluator.evaluate(lr_model.transform(test))

    if check_save:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "census_pipeline")
            dl_model.save(path)
            again = PipelineModel.load(path).transform(test)
            cols = ["probability", "prediction"]
            a = scored.select(*cols).collect()
            b = again.select(*cols).collect()
            results["reloaded_identical"] = a == b
    scored.unpersist()
    train.unpersist()
    test.unpersist()
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-rows", type=int, default=None, help="random subset of the training split")
    parser.add_argument("--test-rows", type=int, default=None, help="random subset of the test split")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 32])
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-partitions", type=int, default=None)
    parser.add_argument("--master", default=None, help="Spark master for a new session (default local[*])")
    args = parser.parse_args(argv)

    from sparkdl.engine import get_or_create_session
    spark = get_or_create_session(args.master, app_name="sparkdl-census", conf={"spark.driver.memory": "4g"})
    res = run(spark, args.train_rows, args.test_rows, args.epochs, args.batch_size, args.hidden, args.lr,
              args.seed, args.num_partitions)
    print(f"areaUnderROC on {res['test_rows']} test rows: sparkdl MLP {res['sparkdl_auc']:.4f} "
          f"(fit {res['sparkdl_fit_s']} s), LogisticRegression {res['logreg_auc']:.4f} (fit {res['logreg_fit_s']} s)")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
