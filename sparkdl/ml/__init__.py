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
# The estimators are imported on first use: the Python workers of fit and transform import sparkdl.ml.data and
# sparkdl.ml.arrow, and importing the estimators with this package pulled pyspark.ml (and pandas) into every worker
# (import of sparkdl.ml.data 1.4-1.5 s -> 1.0-1.1 s).
_EXPORTS = {"DLClassifier": "classifier", "DLClassificationModel": "classifier", "DLEstimator": "estimator",
            "DLModel": "estimator"}


def __getattr__(name):
    if name in _EXPORTS:
        import importlib
        return getattr(importlib.import_module(f"sparkdl.ml.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'sparkdl.ml' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))

__all__ = ["DLClassifier", "DLClassificationModel", "DLEstimator", "DLModel"]
