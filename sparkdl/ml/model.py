"""The models' ``transform``: batched Arrow inference with the network broadcast once per model, every input
column kept, each row paired with its own prediction, on batch and streaming DataFrames (see
:mod:`sparkdl.ml.predict` for the executor side); and the same outputs on the driver for one row (``predict``,
as PySpark's models) or a numpy batch (``predictBatch``)."""
from __future__ import annotations

import logging
import math

import numpy as np
from pyspark.ml import Model
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from sparkdl.engine.connect_session import SessionValue, is_connect
from sparkdl.engine.environment import check_executor_environment
from sparkdl.ml import validation as V
from sparkdl.ml.arrow import FeatureSpec
from sparkdl.ml.base import DLParams
from sparkdl.ml.packing import packed_features
from sparkdl.ml.persistence import DLReadable, DLWritable
from sparkdl.ml.predict import invalid_row_message, predict_arrays, predict_column
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
        self._outputs = None

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

    def __copy__(self):
        """The shallow copy of ``Params.copy`` (and so of ``transform(dataset, params)``), sharing the network's
        broadcast and the cached output columns instead of broadcasting the network again."""
        that = type(self).__new__(type(self))
        that.__dict__.update(self.__dict__)
        return that

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_bc"] = None
        state["_outputs"] = None
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
        """A module-level function ``f(outputs, fields) -> list of arrays`` (shipped to executors): from (n, K)
        float64 network outputs, one float64 array per field, (n,) for a double column, (n, k) for a Vector."""
        raise NotImplementedError

    # ------------------------------------------------------------------ driver-side prediction
    def _predict_rows(self, features, stage: str, fields: list) -> list:
        """Validated driver-side outputs ``fields`` for rows of features (see :meth:`predictBatch`)."""
        sample = self._sample_shape(stage)
        x = np.asarray(features, dtype=np.float32)
        if x.ndim == 0 or math.prod(x.shape[1:]) != math.prod(sample):
            raise ValueError(f"{stage}: features must have shape (N, {', '.join(map(str, sample))}) or (N, "
                             f"{math.prod(sample)}) for featureShape {list(sample)}, got shape {x.shape}")
        x = x.reshape(len(x), *sample)
        finite = np.isfinite(x.reshape(len(x), -1)).all(axis=1)
        if not finite.all():
            raise ValueError(f"{stage}: features row {int(np.argmin(finite))} holds NaN or infinite values")
        return predict_arrays(self._network, x, finite, self.getInferenceBatchSize(), self._postprocess_fn(), fields)

    def predictBatch(self, features) -> dict:
        """The outputs ``transform`` would add, for a batch of rows given as a numpy array, computed here on the
        driver (no Spark job).

        Parameters
        ----------
        features : array_like, shape (N, *featureShape) or (N, prod(featureShape))
            N rows of features (cast to float32).

        Returns
        -------
        dict
            Output column name (``predictionCol``, ...) -> float64 ndarray: shape (N,) for a double column, (N, k)
            for a Vector column. Output columns set to ``""`` are left out.

        Raises
        ------
        ValueError
            If the rows do not hold ``prod(featureShape)`` values each, or hold NaN or infinite values.
        """
        fields = self._output_fields()
        outputs = self._predict_rows(features, f"{type(self).__name__}.predictBatch", [f for _, f, _ in fields])
        return {out: a for (out, _, _), a in zip(fields, outputs)}

    def _predict_one(self, value, field: str, stage: str):
        from pyspark.ml.linalg import DenseVector, Vector
        x = value.toArray() if isinstance(value, Vector) else np.asarray(value, dtype=np.float64)
        out = self._predict_rows(x.reshape(1, -1), f"{type(self).__name__}.{stage}", [field])[0][0]
        return float(out) if np.ndim(out) == 0 else DenseVector(out)

    def predict(self, value):
        """The ``prediction`` of one row, as ``transform`` computes it (on the driver, no Spark job).

        Parameters
        ----------
        value : pyspark.ml.linalg.Vector or array_like
            One row's features: ``prod(featureShape)`` finite values.

        Returns
        -------
        float or DenseVector
            The class index (classifiers), or the network output (a float for one output, else a DenseVector).

        Raises
        ------
        ValueError
            If ``value`` holds another number of values, or NaN or infinite values.
        """
        return self._predict_one(value, "prediction", "predict")

    # ------------------------------------------------------------------ transform
    def _sample_shape(self, stage) -> tuple:
        if self._network is None:
            raise ValueError(f"{stage}: this model has no network")
        if not self._value(self.featureShape):
            raise ValueError(f"{stage}: featureShape (the network's per-row input shape) is not set")
        return tuple(self.getFeatureShape())

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
        sample = self._sample_shape(stage)
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

    def _broadcast(self, sc, session=None):
        """The network, shipped once per SparkContext (a broadcast) or, on Spark Connect (``sc`` None), once per
        Connect session (a session artifact, :class:`~sparkdl.engine.connect_session.SessionValue`)."""
        from sparkdl.engine.broadcast import CloudBroadcast
        owner = sc if sc is not None else session
        if self._bc is None or self._bc[0] is not owner:
            self._bc = (owner, CloudBroadcast(sc, self._network) if sc is not None else
                        SessionValue(session, self._network))
        return self._bc[1]

    def _output_columns(self, sc, schema, spec, handle, fields, stage, session=None) -> tuple:
        """The output columns of :meth:`_transform`: the fields of one Arrow UDF call as Columns (the UDF is
        deterministic, so Spark evaluates it once per row however many of its fields are selected). Columns resolve
        by name in whatever DataFrame selects them, so they are kept while what they depend on is unchanged (the
        SparkContext's broadcast, the Params, the feature columns' types); building them takes ~40 py4j calls."""
        bc, post = self._broadcast(sc, session), self._postprocess_fn()
        rtype = StructType([StructField(f, t) for _, f, t in fields])
        key = (bc, spec, tuple(schema[c].dataType.json() for c in spec.columns), self.getInferenceBatchSize(),
               handle, tuple((out, f) for out, f, _ in fields), post, rtype.json(), stage)
        cached = self._outputs  # one read: another thread may replace it meanwhile
        if cached is None or cached[0] != key:
            error = None if handle == "keep" else invalid_row_message(stage, spec, "{row}")
            exprs = V.feature_exprs(spec.kind, spec.columns, schema)
            if sc is not None:  # the JVM bridge packs vectors and arrays (not reachable on Spark Connect)
                spec, exprs = packed_features(sc, spec, exprs, schema, error)
            result = predict_column(bc, spec, self.getInferenceBatchSize(), handle, [f for _, f, _ in fields], post,
                                    rtype, stage)(*exprs)
            cached = self._outputs = (key, tuple(result.getField(f).alias(out) for out, f, _ in fields))
        return cached[1]

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
        session = dataset.sparkSession
        sc = None if is_connect(session) else session.sparkContext
        check_executor_environment(sc, session)
        handle = self.getHandleInvalid()
        df = dataset
        if handle == "skip":
            bad = F.lit(False)
            for c in V.feature_checks(spec.kind, spec.columns, schema,
                                      spec.size if spec.kind in ("vector", "array") else None,
                                      spec.input_shape if spec.kind == "image" else None, spec.vocab_size):
                bad = bad | c.predicate
            df = df.filter(~bad)
        # one select, one analysis; "*" keeps duplicate input names working
        return df.select("*", *self._output_columns(sc, schema, spec, handle, fields, stage, session))
