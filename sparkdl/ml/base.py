"""The Params shared by the sparkdl Spark ML stages (in PySpark's style: mixins plus setters), and what the
estimators decide per task. :mod:`sparkdl.ml.fit` holds ``fit``, :mod:`sparkdl.ml.model` the models' ``transform``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from pyspark.ml.param.shared import (HasFeaturesCol, HasLabelCol, HasPredictionCol, HasValidationIndicatorCol,
                                     HasWeightCol)

from sparkdl.ml import validation as V
from sparkdl.ml.data import LabelSpec
from sparkdl.ml.params import (HasBatchSize, HasCheckpointDir, HasFeatureShape, HasFeaturesCols, HasHandleInvalid,
                               HasInferenceBatchSize, HasLearningRate, HasLoss, HasMaxEpoch, HasMaxRecoveries,
                               HasNetwork, HasNumPartitions, HasOptimizer, HasResume, HasSeed, HasValidationData)

__all__ = ["DLParams", "DLEstimatorParams", "EstimatorSetters", "TaskSetup", "probe_network"]


@dataclass
class TaskSetup:
    """What the task (classification or regression) decides once the network's output shape is known."""

    label: LabelSpec
    default_loss: object
    metrics: list
    num_classes: int | None
    label_checks: list
    #: ``labels_ok(min, max)`` of the label statistics (scalar: values; vector/array: lengths).
    labels_ok: Callable


class DLParams(HasFeaturesCol, HasFeaturesCols, HasFeatureShape, HasPredictionCol, HasHandleInvalid,
               HasInferenceBatchSize):
    """Params shared by the estimators and their models."""

    def __init__(self, *args):
        super().__init__(*args)
        self._setDefault(featuresCol="features", predictionCol="prediction")

    def setFeaturesCol(self, value: str):
        """Sets the value of :py:attr:`featuresCol`."""
        return self._set(featuresCol=value)

    def setFeaturesCols(self, value):
        """Sets the value of :py:attr:`featuresCols`."""
        return self._set(featuresCols=value)

    def setFeatureShape(self, value):
        """Sets the value of :py:attr:`featureShape`."""
        return self._set(featureShape=value)

    def setPredictionCol(self, value: str):
        """Sets the value of :py:attr:`predictionCol`."""
        return self._set(predictionCol=value)

    def setHandleInvalid(self, value: str):
        """Sets the value of :py:attr:`handleInvalid`."""
        return self._set(handleInvalid=value)

    def setInferenceBatchSize(self, value: int):
        """Sets the value of :py:attr:`inferenceBatchSize`."""
        return self._set(inferenceBatchSize=value)

    def _value(self, param):
        """The Param's value, or None when it is undefined or set to None."""
        return self.getOrDefault(param) if self.isDefined(param) else None

    def _feature_columns(self, schema, stage):
        return V.feature_kind(schema, stage, self.getFeaturesCol(), self._value(self.featuresCols))


class DLEstimatorParams(DLParams, HasLabelCol, HasNetwork, HasLoss, HasOptimizer, HasLearningRate, HasBatchSize,
                        HasMaxEpoch, HasSeed, HasNumPartitions, HasValidationIndicatorCol, HasValidationData,
                        HasCheckpointDir, HasResume, HasMaxRecoveries, HasWeightCol):
    """Params of the estimators."""

    def __init__(self, *args):
        super().__init__(*args)
        self._setDefault(labelCol="label")


def probe_network(network, sample_shape, stage: str, what: str) -> tuple:
    """Per-row output shape of ``network`` for per-row inputs of ``sample_shape`` (one forward of zeros).

    Raises
    ------
    ValueError
        If the network rejects that input shape (``what`` names where the shape came from).
    """
    try:
        out = network(np.zeros((1, *sample_shape), network.dtype))
    except (ValueError, TypeError) as e:
        raise ValueError(f"{stage}: the network does not accept rows of shape {tuple(sample_shape)} ({what}): {e}. "
                         "Set featureShape to the network's per-row input shape, e.g. [1, 28, 28]") from e
    return tuple(int(d) for d in out.shape[1:])


class EstimatorSetters:
    """Setters of the estimator-only Params."""

    def setLabelCol(self, value: str):
        """Sets the value of :py:attr:`labelCol`."""
        return self._set(labelCol=value)

    def setNetwork(self, value):
        """Sets the value of :py:attr:`network`."""
        return self._set(network=value)

    def setLoss(self, value):
        """Sets the value of :py:attr:`loss`."""
        return self._set(loss=value)

    def setOptimizer(self, value):
        """Sets the value of :py:attr:`optimizer`."""
        return self._set(optimizer=value)

    def setLearningRate(self, value: float):
        """Sets the value of :py:attr:`learningRate`."""
        return self._set(learningRate=value)

    def setBatchSize(self, value: int):
        """Sets the value of :py:attr:`batchSize`."""
        return self._set(batchSize=value)

    def setMaxEpoch(self, value: int):
        """Sets the value of :py:attr:`maxEpoch`."""
        return self._set(maxEpoch=value)

    def setSeed(self, value: int):
        """Sets the value of :py:attr:`seed`."""
        return self._set(seed=value)

    def setNumPartitions(self, value: int):
        """Sets the value of :py:attr:`numPartitions`."""
        return self._set(numPartitions=value)

    def setValidationIndicatorCol(self, value: str):
        """Sets the value of :py:attr:`validationIndicatorCol`."""
        return self._set(validationIndicatorCol=value)

    def setValidationData(self, value):
        """Sets the value of :py:attr:`validationData`."""
        return self._set(validationData=value)

    def setCheckpointDir(self, value: str):
        """Sets the value of :py:attr:`checkpointDir`."""
        return self._set(checkpointDir=value)

    def setResume(self, value: bool):
        """Sets the value of :py:attr:`resume`."""
        return self._set(resume=value)

    def setMaxRecoveries(self, value: int):
        """Sets the value of :py:attr:`maxRecoveries`."""
        return self._set(maxRecoveries=value)

    def setWeightCol(self, value: str):
        """Sets the value of :py:attr:`weightCol`."""
        return self._set(weightCol=value)
