"""Spark ML pipeline stages: sparkdl networks as PySpark Estimators and Models.

- :class:`DLClassifier` -> :class:`DLClassificationModel`: classification, with PySpark's ``rawPrediction``,
  ``probability`` (Vectors) and ``prediction`` (double) columns.
- :class:`DLEstimator` -> :class:`DLModel`: any per-row target (regression, multi-output).

They follow PySpark's conventions (keyword-only ``__init__``/``setParams``, typed Params with getters and
setters), validate their input before training (errors name the column and an example row), read DataFrames
through Arrow on the executors (:mod:`sparkdl.ml.arrow`, :mod:`sparkdl.ml.data`), predict in batches with the
network broadcast once (:mod:`sparkdl.ml.predict`), save and load alone or inside a ``Pipeline``
(:mod:`sparkdl.ml.persistence`, the network stored as data), and work with ``CrossValidator``,
``TrainValidationSplit`` and PySpark's evaluators.

Requires PySpark >= 4.1 for ``transform`` (``pyspark.sql.functions.arrow_udf``).
"""
from sparkdl.ml.classifier import DLClassificationModel, DLClassifier
from sparkdl.ml.estimator import DLEstimator, DLModel

__all__ = ["DLClassifier", "DLClassificationModel", "DLEstimator", "DLModel"]
