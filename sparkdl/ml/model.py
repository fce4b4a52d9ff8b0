"""The models' ``transform``: batched Arrow inference with the network broadcast once per model, every input
column kept, each row paired with its own prediction (see :mod:`sparkdl.ml.predict` for the executor side)."""
from __future__ import annotations

import logging
import math

from pyspark.ml import Model
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from sparkdl.engine.environment import check_executor_environment
from sparkdl.ml import validation as V
from sparkdl.ml.arrow import FeatureSpec
from sparkdl.ml.base import DLParams
from sparkdl.ml.persistence import DLReadable, DLWritable
from sparkdl.ml.predict import predict_column
from sparkdl.ml.tokens import token_input

__all__ = ["DLModelBase"]

log = logging.getLogger("sparkdl.ml")


class DLModelBase(Model, DLParams, DLWritable, DLReadable):
    """A trained network as a Spark ML Transformer: batched Arrow inference with the network broadcast once.

    Parameters
    ----------
    network : sparkdl.nn.Module
        The trained network (model data, not a Param; never modified).
    imageShape : list of int, optional
        ``[nChannels, height, width]`` of image inputs (default: ``featureShape`` when it has 3 dims).
    """

    def __init__(self, network=None, *, imageShape=None):
        super().__init__()
        self._network = network
        self._image_shape = tuple(imageShape) if imageShape else None
        self._summary = None
        self._num_skipped_rows = None
        self._bc = None

    @property
    def network(self):
        """The trained :class:`sparkdl.nn.Module`."""
        return self._network

    @property
    def hasSummary(self) -> bool:
        """Whether a training summary exists (only on a model returned by fit, not on a loaded one)."""
        return self._summary is not None

    @property
    def summary(self):
        """The :class:`sparkdl.engine.TrainSummary` of fit: per-iteration loss and per-epoch validation metrics.

        Raises
        ------
        RuntimeError
            If the model was not produced by fit in this process.
        """
        if self._summary is None:
            raise RuntimeError(f"No training summary available for this {type(self).__name__} (loaded or built "
                               "directly, not returned by fit)")
        return self._summary

    @property
    def numSkippedRows(self):
        """Rows fit dropped as invalid (handleInvalid 'skip'/'keep'); None if the model was not returned by fit."""
        return self._num_skipped_rows

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_bc"] = None
        return state

    # ------------------------------------------------------------------ persistence hooks
    def _saved_network(self):
        return self._network

    def _model_data(self) -> dict:
        return {"hasNetwork": self._network is not None,
                "imageShape": list(self._image_shape) if self._image_shape else None}

    @classmethod
    def _from_saved(cls, network, model_data: dict):
        return cls(network, imageShape=model_data.get("imageShape"))

    # ------------------------------------------------------------------ task hooks
    def _output_fields(self) -> list[tuple[str, str, object]]:
        """``[(output column, field name, Spark type)]`` of the requested outputs."""
        raise NotImplementedError

    def _postprocess_fn(self):
        """A module-level function ``f(outputs, fields) -> list of pyarrow arrays`` (shipped to executors)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ transform
    def _spec(self, schema, stage) -> FeatureSpec:
        if self._network is None:
            raise ValueError(f"{stage}: this model has no network")
        kind, cols = self._feature_columns(schema, stage, self._network)
        if kind == "tokens":  # padded to maxLength, else each batch to its longest row (at most featureShape)
            pad, vocab = token_input(self._network)
            t = self._value(self.maxLength) or (self._value(self.featureShape) or [None])[0]
            if t is None:
                raise ValueError(f"{stage}: set maxLength (tokens per row) for this token-id network")
            return FeatureSpec(kind, cols, (t,), (t,), pad, vocab, per_batch=not self._value(self.maxLength))
        if not self._value(self.featureShape):
            raise ValueError(f"{stage}: featureShape (the network's per-row input shape) is not set")
        sample = tuple(self.getFeatureShape())
        if kind == "image":
            shape = self._image_shape or (sample if len(sample) == 3 else None)
            if shape is None or math.prod(shape) != math.prod(sample):
                raise ValueError(f"{stage}: cannot read images for a network whose rows have shape {sample}; "
                                 "construct the model with imageShape=[nChannels, height, width]")
            return FeatureSpec(kind, cols, tuple(shape), sample)
        if kind == "scalar" and len(cols) != math.prod(sample):
            raise ValueError(f"{stage}: featuresCols has {len(cols)} columns but the network takes "
                             f"{math.prod(sample)} values per row (featureShape {list(sample)})")
        return FeatureSpec(kind, cols, (math.prod(sample),), sample)

    def _broadcast(self, sc):
        from sparkdl.engine.broadcast import CloudBroadcast
        if self._bc is None or self._bc[0] is not sc:
            self._bc = (sc, CloudBroadcast(sc, self._network))
        return self._bc[1]

    def _transform(self, dataset):
        stage = f"{type(self).__name__}.transform"
        schema = dataset.schema
        spec = self._spec(schema, stage)
        fields = self._output_fields()
        if not fields:
            log.warning("%s: every output column is set to '', nothing to add", stage)
            return dataset
        for out, _, _ in fields:
            if out in schema.fieldNames():
                raise ValueError(f"{stage}: output column {out!r} already exists; set the output column Params "
                                 "(predictionCol, ...) to new names")
        check_executor_environment(dataset.sparkSession.sparkContext)
        handle = self.getHandleInvalid()
        df = dataset
        if handle == "skip":
            bad = F.lit(False)
            for c in V.feature_checks(spec.kind, spec.columns, schema,
                                      spec.size if spec.kind in ("vector", "array") else None,
                                      spec.input_shape if spec.kind == "image" else None, spec.vocab_size):
                bad = bad | c.predicate
            df = df.filter(~bad)
        rtype = StructType([StructField(f, t) for _, f, t in fields])
        udf = predict_column(self._broadcast(dataset.sparkSession.sparkContext), spec, self.getInferenceBatchSize(),
                             handle, [f for _, f, _ in fields], self._postprocess_fn(), rtype, stage)
        tmp = f"__sparkdl_{self.uid}"
        df = df.withColumn(tmp, udf(*V.feature_exprs(spec.kind, spec.columns, schema)))
        return df.withColumns({out: F.col(tmp)[f] for out, f, _ in fields}).drop(tmp)
