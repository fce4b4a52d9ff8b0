"""Shared Params of the sparkdl Spark ML stages, in the style of ``pyspark/ml/param/shared.py``.

Column Params that PySpark already defines (``featuresCol``, ``labelCol``, ``predictionCol``,
``probabilityCol``, ``rawPredictionCol``, ``validationIndicatorCol``) are PySpark's own mixins, so the
names, docs and defaults match PySpark's estimators exactly. The mixins here add what a neural network
needs. Type converters check types *and* ranges, so a bad value fails in the setter with a message that
names the Param (PySpark wraps the converter's ``ValueError`` as ``Invalid param value given for param``).

The mixins are generated from one table (:func:`_mixin`, one call per Param), the way PySpark generates
``shared.py`` with ``_shared_params_code_gen.py``: each ``HasX`` holds the Param ``x`` on the class, sets its
default (if any) in ``__init__`` and has the getter ``getX``; the stages define the setters.
"""
from __future__ import annotations

from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.sql import DataFrame

from sparkdl.nn.module import Module
from sparkdl.optim.base import Optimizer

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


def _int_at_least(name, low):
    """An int converter for Param ``name`` that refuses values below ``low``."""
    to_int = _typed(name, TypeConverters.toInt)

    def convert(value):
        v = to_int(value)
        if v < low:
            raise ValueError(f"{name} must be >= {low}, got {value!r}")
        return v
    return convert


def _instance_of(name, cls, what):
    """A converter for Param ``name`` that accepts instances of ``cls`` only (``what`` names them in the error)."""
    def convert(value):
        if not isinstance(value, cls):
            raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
        return value
    return convert


_to_network = _instance_of("network", Module, "a sparkdl.nn.Module (e.g. sparkdl.nn.Sequential(...))")
_to_optimizer = _instance_of("optimizer", Optimizer, "a sparkdl.optim optimizer (e.g. sparkdl.optim.Adam(lr=1e-3))")
_to_dataframe = _instance_of("validationData", DataFrame, "a pyspark.sql.DataFrame")


def _to_loss(value):
    if not all(callable(getattr(value, m, None)) for m in ("forward", "backward", "get_config")):
        raise TypeError(f"loss must be a sparkdl loss (e.g. sparkdl.nn.CrossEntropyLoss()) with forward, backward "
                        f"and get_config, got {type(value).__name__}")
    return value


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


# --------------------------------------------------------------------------------------------- the mixins
_NO_DEFAULT = object()


def _mixin(name: str, type_hint: str, converter, doc: str, default=_NO_DEFAULT) -> type:
    """The mixin ``Has<Name>`` of Param ``name``, as PySpark's ``_shared_params_code_gen.py`` writes one.

    Parameters
    ----------
    name : str
        The Param's name (camelCase); the class is ``Has`` + ``Name``, the getter ``get`` + ``Name``.
    type_hint : str
        The type the getter returns (annotation only).
    converter : callable
        The Param's ``typeConverter``.
    doc : str
        The Param's documentation (the class docstring is ``Mixin for param <name>: <doc>``).
    default : optional
        The default value set by ``__init__``; none if omitted.
    """
    cap = name[0].upper() + name[1:]
    cls_name, getter_name = f"Has{cap}", f"get{cap}"

    def __init__(self) -> None:
        super(cls, self).__init__()
        if default is not _NO_DEFAULT:
            self._setDefault(**{name: default})

    def getter(self):
        return self.getOrDefault(getattr(self, name))

    getter.__doc__ = f"Gets the value of {name} or its default value."
    getter.__annotations__ = {"return": type_hint}
    for fn, fn_name in ((__init__, "__init__"), (getter, getter_name)):
        fn.__name__, fn.__qualname__ = fn_name, f"{cls_name}.{fn_name}"
    cls = type(cls_name, (Params,), {
        "__module__": __name__, "__qualname__": cls_name, "__doc__": f"Mixin for param {name}: {doc}",
        "__annotations__": {name: f"Param[{type_hint}]"},
        name: Param(Params._dummy(), name, doc, typeConverter=converter),
        "__init__": __init__, getter_name: getter})
    return cls


HasNetwork = _mixin("network", "Any", _to_network,
                    "the sparkdl.nn.Module to train; its current weights are the initial weights (fit trains a copy "
                    "and never modifies it).")
HasLoss = _mixin("loss", "Any", _to_loss,
                 "the sparkdl loss to minimise (default: CrossEntropyLoss for DLClassifier, MSELoss for DLEstimator).")
HasOptimizer = _mixin("optimizer", "Any", _to_optimizer,
                      "the sparkdl.optim optimizer (default: Adam with lr = learningRate); fit uses a copy; an "
                      "explicitly set learningRate overrides its lr.")
HasLearningRate = _mixin("learningRate", "float", _to_learning_rate,
                         "learning rate (> 0) of the default Adam optimizer, or the override of the optimizer's lr "
                         "when set explicitly.", default=1e-3)
HasBatchSize = _mixin("batchSize", "int", _int_at_least("batchSize", 1),
                      "global mini-batch size (>= 1) of training, split across partitions.", default=64)
HasMaxEpoch = _mixin("maxEpoch", "int", _int_at_least("maxEpoch", 1),
                     "number of passes over the training data (>= 1).", default=10)
HasSeed = _mixin("seed", "int", _typed("seed", TypeConverters.toInt),
                 "random seed of shuffling and Dropout (deterministic default 0; the initial weights are the "
                 "network's own, see Module.initialize).", default=0)
HasFeatureShape = _mixin("featureShape", "List[int]", _to_shape,
                         "per-row input shape of the network, e.g. [1, 28, 28]; flat features are reshaped to it "
                         "(default: the column's natural shape).")
HasFeaturesCols = _mixin("featuresCols", "List[str]", _to_columns,
                         "numeric scalar columns used together as the features, in this order; when set, featuresCol "
                         "is ignored.")
HasMaxLength = _mixin("maxLength", "int", _int_at_least("maxLength", 1),
                      "token-id sequences (a network starting with SequenceLengths): rows are padded or truncated to "
                      "this many tokens (default: the longest training row; transform pads each batch to its longest "
                      "row).")
HasNumPartitions = _mixin("numPartitions", "int", _int_at_least("numPartitions", 1),
                          "number of partitions (= tasks per iteration) the training data is repartitioned to "
                          "(default: spark.default.parallelism).")
HasCheckpointDir = _mixin("checkpointDir", "str", _typed("checkpointDir", TypeConverters.toString),
                          "directory for training checkpoints, written after every epoch (default: none).")
HasHandleInvalid = _mixin("handleInvalid", "str", _to_handle_invalid,
                          "how to handle invalid rows (null, NaN or infinite features, wrong length, null, NaN or "
                          "out-of-range labels). Options are 'error' (raise, naming the column and an example row), "
                          "'skip' (filter the rows out; fit counts and logs them) and 'keep' (fit: skip them; "
                          "transform: output NaN for them).", default="error")
HasInferenceBatchSize = _mixin("inferenceBatchSize", "int", _int_at_least("inferenceBatchSize", 1),
                               "rows per forward pass in transform (>= 1); at most "
                               "spark.sql.execution.arrow.maxRecordsPerBatch (1024 in sessions sparkdl creates), the "
                               "rows of one Arrow batch.", default=1024)
HasValidationData = _mixin("validationData", "Any", _to_dataframe,
                           "a DataFrame evaluated after every epoch (not saved with the stage); an alternative to "
                           "validationIndicatorCol.")
HasMaxRecoveries = _mixin("maxRecoveries", "int", _int_at_least("maxRecoveries", 0),
                          "how many transient failures (a lost executor, a fetch failure, a killed task) training "
                          "recovers from by replaying iterations (>= 0); an error raised by the computation (a layer, "
                          "the loss, a bad row) is never replayed.", default=3)
HasResume = _mixin("resume", "bool", _typed("resume", TypeConverters.toBoolean),
                   "continue from the latest checkpoint in checkpointDir (weights, optimizer state, schedule, "
                   "counters), if there is one; the continuation equals an uninterrupted run.", default=False)
HasClassWeights = _mixin("classWeights", "List[float]", _to_class_weights,
                         "weight of each class (>= 0, one per class index): a row's loss is weighted by its label's "
                         "weight (times weightCol when set) and the mean loss divides by the summed weights.")
