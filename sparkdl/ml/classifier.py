"""``DLClassifier`` -> ``DLClassificationModel``: a sparkdl network as a PySpark probabilistic classifier.

The network maps a row's features to C class scores (logits, or log-probabilities such as a ``LogSoftmax``
output), trained by default with ``CrossEntropyLoss`` on class indices ``0 .. C-1`` in ``labelCol``. A network
with a single output is a binary classifier of one logit (default loss ``BCEWithLogitsLoss``, labels 0/1).

The model adds PySpark's three columns (each omitted when its Param is set to ``""``):

* ``rawPredictionCol`` (Vector, C values): log-probabilities ``z - logsumexp(z)``; for a one-logit network
  ``[-z, z]`` as PySpark's LogisticRegression. Either way ``rawPrediction[1]`` ranks rows like
  ``probability[1]``, so ``BinaryClassificationEvaluator`` computes the right areaUnderROC.
* ``probabilityCol`` (Vector): ``softmax(z)``, or ``[1 - sigmoid(z), sigmoid(z)]``.
* ``predictionCol`` (double): the most probable class index (NaN for invalid rows kept with 'keep').
"""
from __future__ import annotations

import numpy as np
from pyspark import keyword_only
from pyspark.ml.linalg import VectorUDT
from pyspark.ml.param.shared import HasProbabilityCol, HasRawPredictionCol
from pyspark.sql.types import DoubleType

from sparkdl.ml import validation as V
from sparkdl.ml.base import TaskSetup, probe_network
from sparkdl.ml.fit import DLEstimatorBase
from sparkdl.ml.model import DLModelBase
from sparkdl.ml.data import LabelSpec
from sparkdl.ml.params import HasClassWeights

__all__ = ["DLClassifier", "DLClassificationModel", "classification_outputs"]


def classification_outputs(out: np.ndarray, fields) -> list:
    """``rawPrediction`` (n, C'), ``probability`` (n, C') and ``prediction`` (n,) float64 arrays from (n, C) network
    outputs (C' = max(C, 2)), in the order of ``fields`` (only those named)."""
    n, c = out.shape
    if c == 1:
        z = out[:, 0]
        raw = np.stack([-z, z], axis=1)
        p1 = 0.5 * (1.0 + np.tanh(0.5 * z))  # sigmoid without overflow
        prob = np.stack([1.0 - p1, p1], axis=1)
        pred = np.where(np.isnan(z), np.nan, (z > 0).astype(np.float64))
    else:
        m = out.max(axis=1, keepdims=True) if n else np.zeros((0, 1))
        raw = out - (m + np.log(np.exp(out - m).sum(axis=1, keepdims=True)))
        prob = np.exp(raw)
        pred = np.argmax(np.where(np.isnan(out), -np.inf, out), axis=1).astype(np.float64) if n else np.zeros(0)
        pred[np.isnan(out).any(axis=1)] = np.nan
    made = {"rawPrediction": raw, "probability": prob, "prediction": pred}
    return [made[f] for f in fields]


class _ClassifierParams(HasRawPredictionCol, HasProbabilityCol):
    def __init__(self, *args):
        super().__init__(*args)
        self._setDefault(rawPredictionCol="rawPrediction", probabilityCol="probability")

    def setRawPredictionCol(self, value: str):
        """Sets the value of :py:attr:`rawPredictionCol`."""
        return self._set(rawPredictionCol=value)

    def setProbabilityCol(self, value: str):
        """Sets the value of :py:attr:`probabilityCol`."""
        return self._set(probabilityCol=value)


class DLClassificationModel(DLModelBase, _ClassifierParams):
    """A trained classification network (returned by :meth:`DLClassifier.fit`, or built directly from a
    network: ``DLClassificationModel(network).setFeatureShape([1, 28, 28])``).

    ``transform`` adds ``rawPredictionCol``, ``probabilityCol`` (Vectors) and ``predictionCol`` (double).
    """

    @property
    def numClasses(self) -> int:
        """Number of classes: the network's outputs per row (2 for a one-logit binary network)."""
        c = probe_network(self._network, self.getFeatureShape(), type(self).__name__, "featureShape")
        return max(int(np.prod(c)), 2)

    def _output_fields(self):
        vec = VectorUDT()
        spec = [(self.getRawPredictionCol(), "rawPrediction", vec), (self.getProbabilityCol(), "probability", vec),
                (self.getPredictionCol(), "prediction", DoubleType())]
        return [s for s in spec if s[0]]

    def _postprocess_fn(self):
        return classification_outputs

    def predictRaw(self, value):
        """The ``rawPrediction`` (log-probabilities, a DenseVector) of one row, on the driver; see :meth:`predict`."""
        return self._predict_one(value, "rawPrediction", "predictRaw")

    def predictProbability(self, value):
        """The class ``probability`` (a DenseVector) of one row, on the driver; see :meth:`predict`."""
        return self._predict_one(value, "probability", "predictProbability")


class DLClassifier(DLEstimatorBase, _ClassifierParams, HasClassWeights):
    """Trains a sparkdl network to classify the rows of a DataFrame (a PySpark ``Estimator``).

    Parameters (keyword-only; every one also has a getter and a setter)
    ----------
    network : sparkdl.nn.Module
        Per-row input ``featureShape`` -> C class scores. Required.
    featuresCol : str, default "features"
        Vector, array<float|double>, numeric, or Spark image struct column; for a network that starts with
        ``sparkdl.nn.SequenceLengths``, an array<int|long> column of token ids of any length
        (see :mod:`sparkdl.ml.tokens`).
    featuresCols : list of str, optional
        Numeric columns used as the features instead of ``featuresCol``.
    labelCol : str, default "label"
        Class indices 0..C-1 (numeric; use ``StringIndexer`` for strings).
    featureShape : list of int, optional
        Per-row network input shape, e.g. [1, 28, 28]; flat rows are reshaped to it.
    loss, optimizer, learningRate, batchSize, maxEpoch, seed
        Training: default ``CrossEntropyLoss`` (one logit: ``BCEWithLogitsLoss``), ``Adam(lr=learningRate)``,
        1e-3, 64, 10, 0.
    numPartitions : int, optional
        Training tasks per iteration (default ``spark.default.parallelism``).
    validationIndicatorCol : str, optional; validationData : DataFrame, optional
        Held-out rows evaluated after every epoch (Top1Accuracy and Loss, in ``model.summary``).
    checkpointDir : str, optional
        Checkpoints after every epoch; with ``resume=True`` fit continues from the latest one there.
    resume : bool, default False
    maxRecoveries : int, default 3
        Transient failures (lost executor, fetch failure) recovered from by replay; errors raised by the
        computation (a layer, the loss, a bad row) are raised at once, naming the partition and iteration.
    weightCol : str, optional
        Per-row sample weights (numeric, >= 0; PySpark's convention): the loss is the weighted mean
        ``sum_i w_i loss_i / sum_i w_i``.
    classWeights : list of float, optional
        One weight per class index, multiplied into each row's weight by its label (as ``weight`` of PyTorch's
        ``CrossEntropyLoss``, for any loss).
    handleInvalid : {'error', 'skip', 'keep'}, default 'error'
    maxLength : int, optional
        Token-id sequences: pad or truncate rows to this many tokens (default: the longest training row).
    predictionCol, probabilityCol, rawPredictionCol : str
    inferenceBatchSize : int, default 1024

    Raises
    ------
    ValueError, TypeError
        From ``fit``, before training: a missing column, an unsupported column type, or (with
        ``handleInvalid='error'``) null/NaN features, rows of the wrong length, negative token ids or ids >= the
        network's vocabulary size, and null, non-integer or out-of-range labels -- naming the column, the
        number of such rows and an example row.

    Examples
    --------
    >>> from sparkdl import models
    >>> clf = DLClassifier(network=models.mlp(in_features=4, hidden=(16,), num_classes=3), maxEpoch=5)
    >>> model = clf.fit(train_df)                                                     # doctest: +SKIP
    >>> model.transform(test_df).select("prediction", "probability").show()           # doctest: +SKIP
    """

    _model_class = DLClassificationModel
    _classification = True

    @keyword_only
    def __init__(self, *, network=None, featuresCol="features", featuresCols=None, labelCol="label",
                 featureShape=None, loss=None, optimizer=None, learningRate=1e-3, batchSize=64, maxEpoch=10, seed=0,
                 numPartitions=None, validationIndicatorCol=None, validationData=None, checkpointDir=None,
                 resume=False, maxRecoveries=3, weightCol=None, classWeights=None,
                 handleInvalid="error", maxLength=None, predictionCol="prediction",
                 probabilityCol="probability", rawPredictionCol="rawPrediction", inferenceBatchSize=1024):
        super().__init__()
        kwargs = self._input_kwargs
        self.setParams(**kwargs)

    @keyword_only
    def setParams(self, *, network=None, featuresCol="features", featuresCols=None, labelCol="label",
                  featureShape=None, loss=None, optimizer=None, learningRate=1e-3, batchSize=64, maxEpoch=10, seed=0,
                  numPartitions=None, validationIndicatorCol=None, validationData=None, checkpointDir=None,
                  resume=False, maxRecoveries=3, weightCol=None, classWeights=None,
                  handleInvalid="error", maxLength=None, predictionCol="prediction",
                  probabilityCol="probability", rawPredictionCol="rawPrediction", inferenceBatchSize=1024):
        """Sets params for this DLClassifier (keyword arguments only; None leaves a Param unset)."""
        kwargs = self._input_kwargs
        return self._set(**{k: v for k, v in kwargs.items() if v is not None})

    def setClassWeights(self, value):
        """Sets the value of :py:attr:`classWeights`."""
        return self._set(classWeights=value)

    def _task_loss_fixes(self, out_shape):
        c = int(np.prod(out_shape))
        if c == 1:
            return ("with one output unit the labels are 0/1 targets of shape (N, 1): use BCEWithLogitsLoss (or "
                    "BCELoss after a Sigmoid), or give the network one output unit per class for a categorical loss")
        return (f"for {c} class scores use a categorical loss (CrossEntropyLoss, or NLLLoss after LogSoftmax), or give "
                "the network one output unit (a binary classifier of one logit, labels 0/1, BCEWithLogitsLoss)")

    def _task_check_label(self, kind, stage, name, dtype):
        if kind != "scalar":
            raise TypeError(f"{stage}: labelCol {name!r} must be a numeric column of class indices 0, 1, ..., got "
                            f"{dtype.simpleString()}; index string labels with StringIndexer")

    def _task_setup(self, out_shape, label_kind, stage):
        from sparkdl import metrics
        from sparkdl.nn.loss import BCEWithLogitsLoss, CrossEntropyLoss
        if len(out_shape) != 1:
            raise ValueError(f"{stage}: a classification network must output (N, C) class scores, but it outputs "
                             f"rows of shape {out_shape}")
        c = out_shape[0]
        name = self.getLabelCol()
        if c == 1:
            label, default, num_classes = LabelSpec("scalar", 1, (1,), "float32"), BCEWithLogitsLoss(), None
        else:
            label, default, num_classes = LabelSpec("scalar", 1, (), "int64"), CrossEntropyLoss(), c
        loss = self._value(self.loss) or default
        metric_list = [metrics.Loss(loss)] if c == 1 else [metrics.Top1Accuracy(), metrics.Loss(loss)]
        top = max(c - 1, 1)
        return TaskSetup(label, default, metric_list, num_classes, [V.label_range_check(name, c)],
                         lambda lo, hi: lo is not None and lo >= 0 and hi <= top)
