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
                               HasInferenceBatchSize, HasLearningRate, HasLoss, HasMaxEpoch, HasMaxLength,
                               HasMaxRecoveries, HasNetwork, HasNumPartitions, HasOptimizer, HasResume, HasSeed,
                               HasValidationData)
from sparkdl.ml.tokens import token_input, token_kind

__all__ = ["DLParams", "DLEstimatorParams", "EstimatorSetters", "TaskSetup", "probe_network", "probe_loss",
           "accepted_lengths"]


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
               HasInferenceBatchSize, HasMaxLength):
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

    def setMaxLength(self, value: int):
        """Sets the value of :py:attr:`maxLength`."""
        return self._set(maxLength=value)

    def _value(self, param):
        """The Param's value, or None when it is undefined or set to None."""
        return self.getOrDefault(param) if self.isDefined(param) else None

    def _feature_columns(self, schema, stage, network=None):
        """(kind, columns); kind ``'tokens'`` when ``network`` reads token ids (see :mod:`sparkdl.ml.tokens`)."""
        kind, cols = V.feature_kind(schema, stage, self.getFeaturesCol(), self._value(self.featuresCols))
        if token_input(network) is not None:
            kind = token_kind(schema, stage, kind, cols)
        return kind, cols


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
        first = next((m for _, m in network.named_modules() if not m.children() and m.num_parameters()), None)
        hint = (f"; its first {type(first).__name__} layer takes {first.in_features} values per row"
                if isinstance(getattr(first, "in_features", None), int) else "")
        raise ValueError(f"{stage}: the network does not accept rows of shape {tuple(sample_shape)} ({what}): {e}"
                         f"{hint}. Set featureShape to the network's per-row input shape, e.g. [1, 28, 28]") from e
    return tuple(int(d) for d in out.shape[1:])


def accepted_lengths(network, lengths) -> list:
    """Which of the flat per-row ``lengths`` the network accepts (one forward of zeros each)."""
    ok = []
    for n in lengths:
        try:
            network(np.zeros((1, int(n)), network.dtype))
        except (ValueError, TypeError):
            continue
        ok.append(int(n))
    return ok


def _batch_shape(row_shape) -> str:
    return "(" + ", ".join(["N", *map(str, row_shape)]) + ("," if not row_shape else "") + ")"


def probe_loss(network, loss, sample_shape, label: LabelSpec, stage: str, label_col: str, fixes: str) -> None:
    """Run ``loss`` forward and backward on the network's output for two rows of zeros and labels of the shape and
    dtype the training data will have (class 0 / target 0), on the driver, before any Spark job.

    Raises
    ------
    ValueError
        If the loss rejects them: names the output shape, the label shape and dtype, the loss's own message and
        ``fixes``.
    """
    out = network(np.zeros((2, *sample_shape), network.dtype))
    target = np.zeros((2, *label.shape), label.dtype)
    try:
        value, cache = loss.forward(out, target)
        loss.backward(cache, np.ones_like(value) if isinstance(value, np.ndarray) else 1.0)
        loss.normalizer(target)
    except (ValueError, TypeError, NotImplementedError) as e:
        raise ValueError(
            f"{stage}: the loss {loss!r} does not fit the network's output and the labels: the network outputs "
            f"a batch of shape {_batch_shape(out.shape[1:])} and labelCol {label_col!r} reaches the loss as shape "
            f"{_batch_shape(label.shape)} of {label.dtype} "
            f"({'class indices' if label.dtype == 'int64' else 'targets'}); the loss says: {e}. Fix: {fixes}") from e


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
