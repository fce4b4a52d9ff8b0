"""``DLEstimator`` -> ``DLModel``: a sparkdl network as a general PySpark estimator (regression, multi-output).

The label column holds the targets: a numeric column for a network with one output per row, or a Vector /
array column with as many values as the network outputs per row (labels are reshaped to the network's output
shape, so ``MSELoss`` compares like with like). ``DLModel.transform`` adds ``predictionCol``: a double for one
output per row, else a dense Vector of the flattened outputs.
"""
from __future__ import annotations

import math

import numpy as np
from pyspark import keyword_only
from pyspark.ml.linalg import VectorUDT
from pyspark.sql.types import DoubleType

from sparkdl.ml import validation as V
from sparkdl.ml.base import TaskSetup, probe_network
from sparkdl.ml.fit import DLEstimatorBase
from sparkdl.ml.model import DLModelBase
from sparkdl.ml.data import LabelSpec

__all__ = ["DLEstimator", "DLModel", "regression_outputs"]


def regression_outputs(out: np.ndarray, fields) -> list:
    """The ``prediction`` array from (n, K) float64 network outputs: shape (n,) for K = 1 (a double column), else
    (n, K) (a Vector column)."""
    return [out[:, 0] if out.shape[1] == 1 else out for _ in fields]


class DLModel(DLModelBase):
    """A trained network (returned by :meth:`DLEstimator.fit`, or ``DLModel(network).setFeatureShape([...])``).

    ``transform`` adds ``predictionCol``: double when the network outputs one value per row, else a Vector.
    """

    @property
    def numOutputs(self) -> int:
        """Values the network outputs per row."""
        return math.prod(probe_network(self._network, self.getFeatureShape(), type(self).__name__, "featureShape"))

    def _output_fields(self):
        if not self.getPredictionCol():
            return []
        return [(self.getPredictionCol(), "prediction", DoubleType() if self.numOutputs == 1 else VectorUDT())]

    def _postprocess_fn(self):
        return regression_outputs


class DLEstimator(DLEstimatorBase):
    """Trains a sparkdl network on the rows of a DataFrame for any per-row target (a PySpark ``Estimator``).

    Parameters (keyword-only; every one also has a getter and a setter)
    ----------
    network : sparkdl.nn.Module
        Per-row input ``featureShape`` -> K outputs. Required.
    featuresCol, featuresCols, featureShape, maxLength
        As :class:`~sparkdl.ml.DLClassifier`.
    labelCol : str, default "label"
        Numeric (K = 1), or Vector / array with K values per row.
    loss, optimizer, learningRate, batchSize, maxEpoch, seed
        Training: default ``MSELoss``, ``Adam(lr=learningRate)``, 1e-3, 64, 10, 0.
    numPartitions, validationIndicatorCol, validationData, checkpointDir, resume, maxRecoveries, weightCol,
    handleInvalid, inferenceBatchSize
        As :class:`~sparkdl.ml.DLClassifier` (validation metric: MSE).
    predictionCol : str, default "prediction"

    Raises
    ------
    ValueError, TypeError
        From ``fit``, before training, for missing or mistyped columns and (``handleInvalid='error'``) invalid
        rows, naming the column, the count and an example row.
    """

    _model_class = DLModel
    _classification = False

    @keyword_only
    def __init__(self, *, network=None, featuresCol="features", featuresCols=None, labelCol="label",
                 featureShape=None, loss=None, optimizer=None, learningRate=1e-3, batchSize=64, maxEpoch=10, seed=0,
                 numPartitions=None, validationIndicatorCol=None, validationData=None, checkpointDir=None,
                 resume=False, maxRecoveries=3, weightCol=None,
                 handleInvalid="error", maxLength=None, predictionCol="prediction",
                 inferenceBatchSize=1024):
        super().__init__()
        kwargs = self._input_kwargs
        self.setParams(**kwargs)

    @keyword_only
    def setParams(self, *, network=None, featuresCol="features", featuresCols=None, labelCol="label",
                  featureShape=None, loss=None, optimizer=None, learningRate=1e-3, batchSize=64, maxEpoch=10, seed=0,
                  numPartitions=None, validationIndicatorCol=None, validationData=None, checkpointDir=None,
                  resume=False, maxRecoveries=3, weightCol=None,
                  handleInvalid="error", maxLength=None, predictionCol="prediction",
                  inferenceBatchSize=1024):
        """Sets params for this DLEstimator (keyword arguments only; None leaves a Param unset)."""
        kwargs = self._input_kwargs
        return self._set(**{k: v for k, v in kwargs.items() if v is not None})

    def _task_loss_fixes(self, out_shape):
        return (f"labels are targets shaped like the output (N, {', '.join(map(str, out_shape))}): use a loss that "
                "compares them element-wise (MSELoss, L1Loss, SmoothL1Loss, BCEWithLogitsLoss), or DLClassifier for "
                "class-index labels")

    def _task_check_label(self, kind, stage, name, dtype):
        if kind not in ("scalar", "vector", "array"):
            raise TypeError(f"{stage}: labelCol {name!r} must be numeric, a Vector or an array of numbers, got "
                            f"{dtype.simpleString()}")

    def _task_setup(self, out_shape, label_kind, stage):
        from sparkdl import metrics
        from sparkdl.nn.loss import MSELoss
        k = math.prod(out_shape)
        name = self.getLabelCol()
        if label_kind == "scalar" and k != 1:
            raise ValueError(f"{stage}: the network outputs {k} values per row (shape {out_shape}) but labelCol "
                             f"{name!r} is a single number; use a Vector or array label with {k} values")
        checks = [] if label_kind == "scalar" else [V.label_size_check(label_kind, name, k)]
        return TaskSetup(LabelSpec(label_kind, k, tuple(out_shape), "float32"), MSELoss(), [metrics.MSE()], None,
                         checks, lambda lo, hi: label_kind == "scalar" or (lo == k and hi == k))
