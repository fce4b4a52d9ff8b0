"""Shared Params of the sparkdl Spark ML stages, in the style of ``pyspark/ml/param/shared.py``.

Column Params that PySpark already defines (``featuresCol``, ``labelCol``, ``predictionCol``,
``probabilityCol``, ``rawPredictionCol``, ``validationIndicatorCol``) are PySpark's own mixins, so the
names, docs and defaults match PySpark's estimators exactly. The mixins here add what a neural network
needs. Type converters check types *and* ranges, so a bad value fails in the setter with a message that
names the Param (PySpark wraps the converter's ``ValueError`` as ``Invalid param value given for param``).
"""
from __future__ import annotations

from typing import Any, List

from pyspark.ml.param import Param, Params, TypeConverters

__all__ = ["HasNetwork", "HasLoss", "HasOptimizer", "HasLearningRate", "HasBatchSize", "HasMaxEpoch", "HasSeed",
           "HasFeatureShape", "HasFeaturesCols", "HasNumPartitions", "HasCheckpointDir", "HasHandleInvalid",
           "HasInferenceBatchSize", "HasValidationData", "HasMaxLength", "HasMaxRecoveries", "HasResume",
           "HasClassWeights", "HANDLE_INVALID_OPTIONS", "OBJECT_PARAMS"]

HANDLE_INVALID_OPTIONS = ("error", "skip", "keep")

#: Params whose values are objects, not JSON: persisted as data by :mod:`sparkdl.ml.persistence` or not at all.
OBJECT_PARAMS = ("network", "loss", "optimizer", "validationData")


def _typed(name, convert):
    """PySpark's converter ``convert`` with the Param's name in its TypeError (``Params.set`` adds it only to
    ValueErrors)."""
    def typed(value):
        try:
            return convert(value)
        except TypeError as e:
            raise TypeError(f"{name}: {e}") from None
    return typed


def _positive_int(name):
    to_int = _typed(name, TypeConverters.toInt)

    def convert(value):
        v = to_int(value)
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {value!r}")
        return v
    return convert


def _to_network(value):
    from sparkdl.nn.module import Module
    if not isinstance(value, Module):
        raise TypeError(f"network must be a sparkdl.nn.Module (e.g. sparkdl.nn.Sequential(...)), "
                        f"got {type(value).__name__}")
    return value


def _to_loss(value):
    if not all(callable(getattr(value, m, None)) for m in ("forward", "backward", "get_config")):
        raise TypeError(f"loss must be a sparkdl loss (e.g. sparkdl.nn.CrossEntropyLoss()) with forward, backward "
                        f"and get_config, got {type(value).__name__}")
    return value


def _to_optimizer(value):
    from sparkdl.optim.base import Optimizer
    if not isinstance(value, Optimizer):
        raise TypeError(f"optimizer must be a sparkdl.optim optimizer (e.g. sparkdl.optim.Adam(lr=1e-3)), "
                        f"got {type(value).__name__}")
    return value


def _non_negative_int(name):
    to_int = _typed(name, TypeConverters.toInt)

    def convert(value):
        v = to_int(value)
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")
        return v
    return convert


def _to_class_weights(value):
    weights = _typed("classWeights", TypeConverters.toListFloat)(value)
    if not weights or any(not (w >= 0) or w == float("inf") for w in weights):
        raise ValueError(f"classWeights must be a non-empty list of finite floats >= 0 (one per class), got {value!r}")
    return weights


def _to_learning_rate(value):
    v = _typed("learningRate", TypeConverters.toFloat)(value)
    if not v > 0 or v != v or v == float("inf"):
        raise ValueError(f"learningRate must be a finite float > 0, got {value!r}")
    return v


def _to_shape(value):
    shape = _typed("featureShape", TypeConverters.toListInt)(value)
    if not shape or any(d < 1 for d in shape):
        raise ValueError(f"featureShape must be a non-empty list of positive ints, e.g. [1, 28, 28], got {value!r}")
    return shape


def _to_handle_invalid(value):
    v = _typed("handleInvalid", TypeConverters.toString)(value)
    if v not in HANDLE_INVALID_OPTIONS:
        raise ValueError(f"handleInvalid must be one of {list(HANDLE_INVALID_OPTIONS)}, got {value!r}")
    return v


def _to_columns(value):
    cols = _typed("featuresCols", TypeConverters.toListString)(value)
    if not cols:
        raise ValueError("featuresCols must name at least one column")
    return cols


def _to_dataframe(value):
    from pyspark.sql import DataFrame
    if not isinstance(value, DataFrame):
        raise TypeError(f"validationData must be a pyspark.sql.DataFrame, got {type(value).__name__}")
    return value


class HasNetwork(Params):
    """Mixin for param network: the sparkdl.nn.Module to train; its current weights are the initial weights (fit trains
    a copy and never modifies it).
    """

    network: "Param[Any]" = Param(
        Params._dummy(),
        "network",
        "the sparkdl.nn.Module to train; its current weights are the initial weights (fit trains a copy and "
        "never modifies it).",
        typeConverter=_to_network,
    )

    def __init__(self) -> None:
        super().__init__()

    def getNetwork(self) -> Any:
        """Gets the value of network or its default value."""
        return self.getOrDefault(self.network)


class HasLoss(Params):
    """Mixin for param loss: the sparkdl loss to minimise (default: CrossEntropyLoss for DLClassifier, MSELoss for
    DLEstimator).
    """

    loss: "Param[Any]" = Param(
        Params._dummy(),
        "loss",
        "the sparkdl loss to minimise (default: CrossEntropyLoss for DLClassifier, MSELoss for DLEstimator).",
        typeConverter=_to_loss,
    )

    def __init__(self) -> None:
        super().__init__()

    def getLoss(self) -> Any:
        """Gets the value of loss or its default value."""
        return self.getOrDefault(self.loss)


class HasOptimizer(Params):
    """Mixin for param optimizer: the sparkdl.optim optimizer (default: Adam with lr = learningRate); fit uses a copy;
    an explicitly set learningRate overrides its lr.
    """

    optimizer: "Param[Any]" = Param(
        Params._dummy(),
        "optimizer",
        "the sparkdl.optim optimizer (default: Adam with lr = learningRate); fit uses a copy; an explicitly set"
        " learningRate overrides its lr.",
        typeConverter=_to_optimizer,
    )

    def __init__(self) -> None:
        super().__init__()

    def getOptimizer(self) -> Any:
        """Gets the value of optimizer or its default value."""
        return self.getOrDefault(self.optimizer)


class HasLearningRate(Params):
    """Mixin for param learningRate: learning rate (> 0) of the default Adam optimizer, or the override of the
    optimizer's lr when set explicitly.
    """

    learningRate: "Param[float]" = Param(
        Params._dummy(),
        "learningRate",
        "learning rate (> 0) of the default Adam optimizer, or the override of the optimizer's lr when set "
        "explicitly.",
        typeConverter=_to_learning_rate,
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(learningRate=1e-3)

    def getLearningRate(self) -> float:
        """Gets the value of learningRate or its default value."""
        return self.getOrDefault(self.learningRate)


class HasBatchSize(Params):
    """Mixin for param batchSize: global mini-batch size (>= 1) of training, split across partitions."""

    batchSize: "Param[int]" = Param(
        Params._dummy(),
        "batchSize",
        "global mini-batch size (>= 1) of training, split across partitions.",
        typeConverter=_positive_int("batchSize"),
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(batchSize=64)

    def getBatchSize(self) -> int:
        """Gets the value of batchSize or its default value."""
        return self.getOrDefault(self.batchSize)


class HasMaxEpoch(Params):
    """Mixin for param maxEpoch: number of passes over the training data (>= 1)."""

    maxEpoch: "Param[int]" = Param(
        Params._dummy(),
        "maxEpoch",
        "number of passes over the training data (>= 1).",
        typeConverter=_positive_int("maxEpoch"),
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(maxEpoch=10)

    def getMaxEpoch(self) -> int:
        """Gets the value of maxEpoch or its default value."""
        return self.getOrDefault(self.maxEpoch)


class HasSeed(Params):
    """Mixin for param seed: random seed of shuffling and Dropout (deterministic default 0; the initial weights are the
    network's own, see Module.initialize).
    """

    seed: "Param[int]" = Param(
        Params._dummy(),
        "seed",
        "random seed of shuffling and Dropout (deterministic default 0; the initial weights are the network's "
        "own, see Module.initialize).",
        typeConverter=_typed("seed", TypeConverters.toInt),
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(seed=0)

    def getSeed(self) -> int:
        """Gets the value of seed or its default value."""
        return self.getOrDefault(self.seed)


class HasFeatureShape(Params):
    """Mixin for param featureShape: per-row input shape of the network, e.g. [1, 28, 28]; flat features are reshaped
    to it (default: the column's natural shape).
    """

    featureShape: "Param[List[int]]" = Param(
        Params._dummy(),
        "featureShape",
        "per-row input shape of the network, e.g. [1, 28, 28]; flat features are reshaped to it (default: the "
        "column's natural shape).",
        typeConverter=_to_shape,
    )

    def __init__(self) -> None:
        super().__init__()

    def getFeatureShape(self) -> List[int]:
        """Gets the value of featureShape or its default value."""
        return self.getOrDefault(self.featureShape)


class HasFeaturesCols(Params):
    """Mixin for param featuresCols: numeric scalar columns used together as the features, in this order; when set,
    featuresCol is ignored.
    """

    featuresCols: "Param[List[str]]" = Param(
        Params._dummy(),
        "featuresCols",
        "numeric scalar columns used together as the features, in this order; when set, featuresCol is ignored.",
        typeConverter=_to_columns,
    )

    def __init__(self) -> None:
        super().__init__()

    def getFeaturesCols(self) -> List[str]:
        """Gets the value of featuresCols or its default value."""
        return self.getOrDefault(self.featuresCols)


class HasMaxLength(Params):
    """Mixin for param maxLength: token-id sequences (a network starting with SequenceLengths): rows are padded or
    truncated to this many tokens (default: the longest training row; transform pads each batch to its longest row).
    """

    maxLength: "Param[int]" = Param(
        Params._dummy(),
        "maxLength",
        "token-id sequences (a network starting with SequenceLengths): rows are padded or truncated to this many "
        "tokens (default: the longest training row; transform pads each batch to its longest row).",
        typeConverter=_positive_int("maxLength"),
    )

    def __init__(self) -> None:
        super().__init__()

    def getMaxLength(self) -> int:
        """Gets the value of maxLength or its default value."""
        return self.getOrDefault(self.maxLength)


class HasNumPartitions(Params):
    """Mixin for param numPartitions: number of partitions (= tasks per iteration) the training data is repartitioned
    to (default: spark.default.parallelism).
    """

    numPartitions: "Param[int]" = Param(
        Params._dummy(),
        "numPartitions",
        "number of partitions (= tasks per iteration) the training data is repartitioned to (default: "
        "spark.default.parallelism).",
        typeConverter=_positive_int("numPartitions"),
    )

    def __init__(self) -> None:
        super().__init__()

    def getNumPartitions(self) -> int:
        """Gets the value of numPartitions or its default value."""
        return self.getOrDefault(self.numPartitions)


class HasCheckpointDir(Params):
    """Mixin for param checkpointDir: directory for training checkpoints, written after every epoch (default: none)."""

    checkpointDir: "Param[str]" = Param(
        Params._dummy(),
        "checkpointDir",
        "directory for training checkpoints, written after every epoch (default: none).",
        typeConverter=_typed("checkpointDir", TypeConverters.toString),
    )

    def __init__(self) -> None:
        super().__init__()

    def getCheckpointDir(self) -> str:
        """Gets the value of checkpointDir or its default value."""
        return self.getOrDefault(self.checkpointDir)


class HasHandleInvalid(Params):
    """Mixin for param handleInvalid: how to handle invalid rows (null, NaN or infinite features, wrong length, null,
    NaN or out-of-range labels). Options are 'error' (raise, naming the column and an example row), 'skip' (filter
    the rows out; fit counts and logs them) and 'keep' (fit: skip them; transform: output NaN for them).
    """

    handleInvalid: "Param[str]" = Param(
        Params._dummy(),
        "handleInvalid",
        "how to handle invalid rows (null, NaN or infinite features, wrong length, null, NaN or out-of-range "
        "labels). Options are 'error' (raise, naming the column and an example row), 'skip' (filter the rows "
        "out; fit counts and logs them) and 'keep' (fit: skip them; transform: output NaN for them).",
        typeConverter=_to_handle_invalid,
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(handleInvalid="error")

    def getHandleInvalid(self) -> str:
        """Gets the value of handleInvalid or its default value."""
        return self.getOrDefault(self.handleInvalid)


class HasInferenceBatchSize(Params):
    """Mixin for param inferenceBatchSize: rows per forward pass in transform (>= 1)."""

    inferenceBatchSize: "Param[int]" = Param(
        Params._dummy(),
        "inferenceBatchSize",
        "rows per forward pass in transform (>= 1); at most spark.sql.execution.arrow.maxRecordsPerBatch "
        "(1024 in sessions sparkdl creates), the rows of one Arrow batch.",
        typeConverter=_positive_int("inferenceBatchSize"),
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(inferenceBatchSize=1024)

    def getInferenceBatchSize(self) -> int:
        """Gets the value of inferenceBatchSize or its default value."""
        return self.getOrDefault(self.inferenceBatchSize)


class HasValidationData(Params):
    """Mixin for param validationData: a DataFrame evaluated after every epoch (not saved with the stage); an
    alternative to validationIndicatorCol.
    """

    validationData: "Param[Any]" = Param(
        Params._dummy(),
        "validationData",
        "a DataFrame evaluated after every epoch (not saved with the stage); an alternative to "
        "validationIndicatorCol.",
        typeConverter=_to_dataframe,
    )

    def __init__(self) -> None:
        super().__init__()

    def getValidationData(self) -> Any:
        """Gets the value of validationData or its default value."""
        return self.getOrDefault(self.validationData)


class HasMaxRecoveries(Params):
    """Mixin for param maxRecoveries: how many transient failures (a lost executor, a fetch failure, a killed task)
    training recovers from by replaying iterations (>= 0); an error raised by the computation (a layer, the loss, a
    bad row) is never replayed.
    """

    maxRecoveries: "Param[int]" = Param(
        Params._dummy(),
        "maxRecoveries",
        "how many transient failures (a lost executor, a fetch failure, a killed task) training recovers from by "
        "replaying iterations (>= 0); an error raised by the computation (a layer, the loss, a bad row) is never "
        "replayed.",
        typeConverter=_non_negative_int("maxRecoveries"),
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(maxRecoveries=3)

    def getMaxRecoveries(self) -> int:
        """Gets the value of maxRecoveries or its default value."""
        return self.getOrDefault(self.maxRecoveries)


class HasResume(Params):
    """Mixin for param resume: continue from the latest checkpoint in checkpointDir (weights, optimizer state,
    schedule, counters), if there is one; the continuation equals an uninterrupted run.
    """

    resume: "Param[bool]" = Param(
        Params._dummy(),
        "resume",
        "continue from the latest checkpoint in checkpointDir (weights, optimizer state, schedule, counters), if "
        "there is one; the continuation equals an uninterrupted run.",
        typeConverter=_typed("resume", TypeConverters.toBoolean),
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(resume=False)

    def getResume(self) -> bool:
        """Gets the value of resume or its default value."""
        return self.getOrDefault(self.resume)


class HasClassWeights(Params):
    """Mixin for param classWeights: weight of each class (>= 0, one per class index): a row's loss is weighted by
    its label's weight (times weightCol when set) and the mean loss divides by the summed weights.
    """

    classWeights: "Param[List[float]]" = Param(
        Params._dummy(),
        "classWeights",
        "weight of each class (>= 0, one per class index): a row's loss is weighted by its label's weight (times "
        "weightCol when set) and the mean loss divides by the summed weights.",
        typeConverter=_to_class_weights,
    )

    def __init__(self) -> None:
        super().__init__()

    def getClassWeights(self) -> List[float]:
        """Gets the value of classWeights or its default value."""
        return self.getOrDefault(self.classWeights)
