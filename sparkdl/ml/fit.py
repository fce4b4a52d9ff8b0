"""``fit`` of both estimators: validate the DataFrame in Spark SQL, convert it through Arrow into cached blocks
on the executors, and train with :class:`~sparkdl.engine.DistributedTrainer`. Orchestration only: the math lives
in :mod:`sparkdl.nn` and the engine.

Order of work (every check happens before training starts):

0. the network, loss and optimizer can be pickled for the executors (else the attribute path is named);
   ``resume`` needs ``checkpointDir``;
1. schema: the feature/label/indicator/weight columns exist and have supported types;
2. the network and the loss are probed on the driver: rows of zeros through the network, and the loss forward
   and backward on its output with labels shaped as training will give them (before any job when
   ``featureShape`` or ``featuresCols`` fixes the input shape, else after step 3);
3. one aggregation job per DataFrame counts every kind of bad row and gathers shape statistics
   (``handleInvalid='error'`` raises here, naming the column, the count and an example row); the output width
   decides the label checks (class range, multi-output length), run as a small job only when the statistics
   show a problem; rows of several lengths are checked against the length the network accepts;
4. 'skip'/'keep': the bad rows are filtered out in SQL, counted (rows in minus rows cached) and logged;
5. repartition to ``numPartitions`` keeping the row order (:func:`~sparkdl.ml.data.repartition`), Arrow ->
   :class:`~sparkdl.engine.DataBlocks` (labels with their sample weights, see :mod:`sparkdl.ml.weights`),
   train (resuming from ``checkpointDir`` with ``resume``), unpersist.
"""
from __future__ import annotations

import copy
import logging
import math

import numpy as np
from pyspark.ml import Estimator
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType

from sparkdl.engine.connect_session import default_parallelism, is_connect
from sparkdl.engine.environment import check_executor_environment
from sparkdl.engine.shipping import check_shippable
from sparkdl.ml import validation as V
from sparkdl.ml import weights as W
from sparkdl.ml.arrow import FeatureSpec
from sparkdl.ml.base import DLEstimatorParams, EstimatorSetters, accepted_lengths, probe_loss, probe_network
from sparkdl.ml.data import repartition, to_blocks
from sparkdl.ml.persistence import DLReadable, DLWritable
from sparkdl.ml.tokens import token_input

__all__ = ["DLEstimatorBase"]

log = logging.getLogger("sparkdl.ml")


class DLEstimatorBase(Estimator, DLEstimatorParams, EstimatorSetters, DLWritable, DLReadable):
    """``fit`` of both estimators. Subclasses define the task through the ``_task_*`` hooks."""

    #: The model class fit returns.
    _model_class: type = None

    def copy(self, extra=None):
        """A copy with the same uid; the network and optimizer values are deep copies (so tuning never shares
        mutable objects between candidates)."""
        that = super().copy(extra)
        for p in (that.network, that.optimizer):
            if that.isSet(p):
                that._paramMap[p] = copy.deepcopy(that._paramMap[p])
        return that

    # ------------------------------------------------------------------ persistence hooks
    def _saved_network(self):
        return self.getNetwork() if self.isSet(self.network) else None

    def _model_data(self) -> dict:
        return {"hasNetwork": self.isSet(self.network)}

    @classmethod
    def _from_saved(cls, network, model_data: dict):
        est = cls()
        if network is not None:
            est._set(network=network)
        return est

    # ------------------------------------------------------------------ task hooks
    #: True for classification (labels are class indices).
    _classification = False

    def _task_check_label(self, kind: str | None, stage: str, name: str, dtype) -> None:
        """Raise TypeError if the label column's type does not suit the task."""
        raise NotImplementedError

    def _task_setup(self, out_shape: tuple, label_kind: str, stage: str) -> "TaskSetup":
        raise NotImplementedError

    def _task_loss_fixes(self, out_shape: tuple) -> str:
        """How to make the loss, the network's output and the labels fit (for the loss probe's message)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ fit
    def _fit(self, dataset):
        stage = type(self).__name__
        if self._value(self.network) is None:
            raise ValueError(f"{stage}: the network Param is not set; pass network=<sparkdl.nn.Module>, e.g. "
                             "sparkdl.models.mlp(in_features=..., hidden=(64,), num_classes=2)")
        for param in (self.network, self.loss, self.optimizer):
            if self._value(param) is not None:
                check_shippable(self.getOrDefault(param), param.name, f"{stage}.fit")
        net = self.getNetwork().copy()
        resume = self._resume(stage)
        kind, cols = self._feature_columns(dataset.schema, stage, net)
        tokens = token_input(net)  # (padding value, vocabulary size) of a token-id network
        lname = self.getLabelCol()
        lfield = V.field(dataset.schema, stage, "labelCol", lname)
        lkind = V.column_kind(lfield.dataType)
        self._task_check_label(lkind, stage, lname, lfield.dataType)
        frames = self._frames(dataset, kind, lkind, stage)
        wcol = self._value(self.weightCol)
        if wcol:
            W.check_weight_column(dataset.schema, stage, wcol)
        fshape = tuple(self._value(self.featureShape) or ()) or None
        handle = self.getHandleInvalid()
        if fshape or kind == "scalar":  # the per-row input shape is known without looking at the data
            self._probe(net, fshape or (len(cols),), lkind, stage, "featureShape" if fshape else "featuresCols")

        session = dataset.sparkSession
        connect = is_connect(session)
        if connect:  # the first job; once per application
            check_executor_environment(None, session)
        else:
            check_executor_environment(session.sparkContext)
        # One aggregation job per DataFrame: counts of bad rows (raised at once in error mode) + shape statistics.
        stats = [self._phase1(df, name, kind, cols, lkind, lname, fshape, stage, tokens[1] if tokens else None)
                 for name, df in frames]
        spec = self._feature_spec(kind, cols, fshape, stats, stage, net, handle, tokens)
        task, loss = self._probe(net, spec.sample_shape, lkind, stage,
                                 "featureShape" if fshape else f"the rows of {list(cols)}")
        prepared = [self._apply_checks(st, spec, task, handle, stage) for st in stats]

        train_df, val_df = self._split(prepared)
        train_label, train_loss, label_col = task.label, loss, None
        if self._weighted():
            weight = W.weight_expr(wcol, self._class_weights(task, stage), lname)
            train_label, label_col = W.weighted_label(task.label, lkind, lname, weight)
            train_loss = W.weighted_loss(loss, task.label, stage)
            probe_loss(net, train_loss, spec.sample_shape, train_label, stage, lname, "use a sparkdl loss")
        trainer = self._trainer(net, train_loss, task.metrics if val_df is not None else (),
                                None if self._weighted() else task.num_classes)
        n = self._value(self.numPartitions) or (default_parallelism(session) if connect else
                                                  session.sparkContext.defaultParallelism)
        train = self._blocks(repartition(train_df, n), spec, train_label, lname, lkind, label_col, n)
        val = None
        try:
            if train.num_samples == 0:
                raise ValueError(f"{stage}: no training rows" + (" left after skipping invalid rows"
                                                                  if handle != "error" else ""))
            if val_df is not None:
                val = self._blocks(repartition(val_df, n), spec, task.label, lname, lkind, None, n)
                if val.num_samples == 0:
                    raise ValueError(f"{stage}: the validation data has no rows" +
                                     (" left after skipping invalid rows" if handle != "error" else ""))
            skipped = self._log_skipped(stage, stats, train, val)
            summary = trainer.fit(train, val, resume=resume)
        finally:
            train.unpersist()
            if val is not None:
                val.unpersist()
        model = self._model_class(net, imageShape=list(spec.input_shape) if kind == "image" else None)
        self._copyValues(model)
        model._set(featureShape=list(spec.sample_shape))
        model._summary, model._num_skipped_rows = summary, skipped
        return model

    def _probe(self, net, sample_shape, lkind, stage, what):
        """On the driver: the network's output shape for ``sample_shape`` rows, the task set-up it implies, and a
        forward/backward of the loss on it with labels as training will give them. Returns ``(task, loss)``."""
        out_shape = probe_network(net, sample_shape, stage, what)
        task = self._task_setup(out_shape, lkind, stage)
        loss = self._value(self.loss) or task.default_loss
        probe_loss(net, loss, sample_shape, task.label, stage, self.getLabelCol(), self._task_loss_fixes(out_shape))
        return task, loss

    def _resume(self, stage) -> bool:
        """Whether fit continues from a checkpoint: ``resume`` is set and ``checkpointDir`` holds one."""
        if not self.getResume():
            return False
        directory = self._value(self.checkpointDir)
        if not directory:
            raise ValueError(f"{stage}: resume=True needs checkpointDir, the directory of the checkpoints to continue "
                             "from; set checkpointDir")
        from sparkdl.io import list_checkpoints
        found = list_checkpoints(directory)
        if not found:
            log.info("%s.fit: resume=True but %s holds no checkpoint yet: training starts from the beginning", stage,
                     directory)
        return bool(found)

    def _blocks(self, df, spec, label, lname, lkind, label_col=None, num_partitions=None):
        return to_blocks(df, spec, V.feature_exprs(spec.kind, spec.columns, df.schema), label,
                         V.label_expr(lkind, lname, df.schema) if label_col is None else label_col, num_partitions)

    def _weighted(self) -> bool:
        return bool(self._value(self.weightCol)) or bool(self._class_weight_values())

    def _class_weight_values(self):
        return self._value(self.classWeights) if self.hasParam("classWeights") else None

    def _class_weights(self, task, stage):
        """``classWeights`` checked against the number of classes (None when unset)."""
        weights = self._class_weight_values()
        if weights:
            classes = task.num_classes or 2
            if len(weights) != classes:
                raise ValueError(f"{stage}: classWeights has {len(weights)} entries but the network classifies "
                                 f"{classes} classes; give one weight per class index 0..{classes - 1}")
        return weights

    def _frames(self, dataset, kind, lkind, stage):
        """[(name, DataFrame)]: the training data, plus ``validationData`` when set (type-checked)."""
        frames = [("training data", dataset)]
        ind = self._value(self.validationIndicatorCol)
        if ind:
            f = V.field(dataset.schema, stage, "validationIndicatorCol", ind)
            if not isinstance(f.dataType, BooleanType):
                raise TypeError(f"{stage}: validationIndicatorCol {ind!r} must be boolean, got "
                                f"{f.dataType.simpleString()}")
        if self._value(self.validationData) is not None:
            where = f"{stage} (validationData)"
            if ind:
                raise ValueError(f"{stage}: set either validationIndicatorCol or validationData, not both")
            vdf = self.getValidationData()
            vkind, _ = self._feature_columns(vdf.schema, where, self.getNetwork())
            lf = V.field(vdf.schema, where, "labelCol", self.getLabelCol())
            if vkind != kind or V.column_kind(lf.dataType) != lkind:
                raise TypeError(f"{where}: the feature/label columns have types {vkind}/{V.column_kind(lf.dataType)} "
                                f"but the training data has {kind}/{lkind}")
            frames.append(("validationData", vdf))
        return frames

    def _phase1(self, df, name, kind, cols, lkind, lname, fshape, stage, vocab_size=None) -> dict:
        schema = df.schema
        size = math.prod(fshape) if fshape and kind in ("vector", "array") else None
        source = f"featureShape {list(fshape)}" if size else ""
        checks = V.feature_checks(kind, cols, schema, size, vocab_size=vocab_size, size_source=source) + \
            V.label_checks(lkind, lname, schema, self._classification)
        ind = self._value(self.validationIndicatorCol)
        if ind:
            checks.append(V.Check(ind, "null values", F.col(V.quote(ind)).isNull()))
        if self._value(self.weightCol) and name == "training data":
            checks += W.weight_checks(self.getWeightCol())
        aggs = []
        c0 = F.col(V.quote(cols[0]))
        if kind in ("vector", "array", "tokens"):
            s = F.when(c0.isNotNull(), F.size(V.values(kind, c0)))
            aggs += [F.min(s), F.max(s)]
        elif kind == "image":
            for k in ("nChannels", "height", "width"):
                aggs += [F.min(c0[k]), F.max(c0[k])]
        lcol = F.col(V.quote(lname))
        if lkind == "scalar":
            aggs += [F.min(lcol.cast("double")), F.max(lcol.cast("double"))]
        else:
            s = F.when(lcol.isNotNull(), F.size(V.values(lkind, lcol)))
            aggs += [F.min(s), F.max(s)]
        counts, total, extra = V.run_checks(df, checks, aggs)
        where = stage if name == "training data" else f"{stage} ({name})"
        if total == 0:
            raise ValueError(f"{stage}: the {name} has no rows")
        if self.getHandleInvalid() == "error":
            V.raise_first(where, df, checks, counts, total)
        return {"name": name, "where": where, "df": df, "checks": checks, "counts": counts, "total": total,
                "stats": extra}

    def _feature_spec(self, kind, cols, fshape, stats, stage, net, handle, tokens=None) -> FeatureSpec:
        st = stats[0]["stats"]
        if kind == "tokens":
            if fshape:
                raise ValueError(f"{stage}: featureShape does not apply to token-id sequences; set maxLength instead")
            t = self._value(self.maxLength) or max(int(st[1] or 0), 1)
            return FeatureSpec(kind, tuple(cols), (t,), (t,), tokens[0], tokens[1])
        if kind == "scalar":
            input_shape = (len(cols),)
        elif kind == "image":
            lo, hi = st[0:6:2], st[1:6:2]
            if lo != hi:
                raise ValueError(f"{stage}: images in column {cols[0]!r} have different sizes (nChannels x height x "
                                 f"width from {'x'.join(map(str, lo))} to {'x'.join(map(str, hi))}); resize them "
                                 "to one size first")
            input_shape = tuple(int(v) for v in lo)
        elif fshape:
            input_shape = (int(np.prod(fshape)),)
        else:
            lo, hi = st[0], st[1]
            if lo is None:
                raise ValueError(f"{stage}: column {cols[0]!r} has no non-null rows")
            expected = lo
            if lo != hi:
                df = stats[0]["df"]
                c = F.size(V.values(kind, F.col(V.quote(cols[0]))))
                accepted = accepted_lengths(net, (lo, hi))
                if len(accepted) != 1:
                    raise ValueError(f"{stage}: column {cols[0]!r} holds {kind}s of different lengths, e.g. "
                                     f"{lo}: {V.example_row(df, c == lo)} and {hi}: {V.example_row(df, c == hi)}. "
                                     "Make them equal, or set featureShape (rows of other lengths are then invalid "
                                     "and handleInvalid decides)")
                expected = accepted[0]
                if handle == "error":
                    raise ValueError(f"{stage}: column {cols[0]!r} holds {kind}s of {lo} to {hi} values, but the "
                                     f"network takes {expected} values per row; e.g. "
                                     f"{V.example_row(df, c != expected)} has {hi if expected == lo else lo}. Fix "
                                     f"the data, or set handleInvalid='skip' to drop rows whose length is not "
                                     f"{expected}")
            input_shape = (int(expected),)
        sample_shape = tuple(fshape) if fshape else input_shape
        if math.prod(sample_shape) != math.prod(input_shape):
            raise ValueError(f"{stage}: featureShape {list(sample_shape)} has {math.prod(sample_shape)} elements but "
                             f"the rows of {list(cols)} have {math.prod(input_shape)} values (shape {input_shape})")
        return FeatureSpec(kind, tuple(cols), input_shape, sample_shape)

    def _apply_checks(self, st, spec, task, handle, stage):
        """Error mode: the checks that needed the network's output shape run (one small job) only when the label
        statistics show a problem. Skip/keep: filter out the rows failing any check."""
        df = st["df"]
        if handle == "error":
            if not task.labels_ok(*st["stats"][-2:]):
                counts, total, _ = V.run_checks(df, task.label_checks)
                V.raise_first(st["where"], df, task.label_checks, counts, total)
            return df
        fchecks = V.feature_checks(spec.kind, spec.columns, df.schema,
                                   spec.size if spec.kind in ("vector", "array") else None,
                                   spec.input_shape if spec.kind == "image" else None, spec.vocab_size)
        bad = F.lit(False)
        for c in st["checks"] + fchecks + task.label_checks:
            bad = bad | c.predicate
        return df.filter(~bad)

    def _split(self, prepared):
        train = prepared[0]
        if self._value(self.validationIndicatorCol):
            ind = F.col(V.quote(self.getValidationIndicatorCol()))
            return train.filter(~ind), train.filter(ind)
        return train, (prepared[1] if len(prepared) > 1 else None)

    def _log_skipped(self, stage, stats, train, val) -> int:
        total = sum(s["total"] for s in stats)
        kept = train.num_samples + (val.num_samples if val is not None else 0)
        if total != kept:
            detail = "; ".join(f"{k} with {c.what} in {c.column!r}" for s in stats
                               for c, k in zip(s["checks"], s["counts"]) if k)
            log.warning("%s.fit: skipped %d of %d rows with invalid values (handleInvalid=%r)%s", stage, total - kept,
                        total, self.getHandleInvalid(), f": {detail}" if detail else "")
        return total - kept

    def _trainer(self, net, loss, metrics, num_classes):
        from sparkdl.engine import DistributedTrainer, MaxEpoch
        from sparkdl.optim import Adam, optimizer_config, optimizer_from_config
        if self._value(self.optimizer) is not None:
            opt = self.getOptimizer()
            cfg = optimizer_config(opt)
            if self.isSet(self.learningRate):
                cfg["config"]["lr"] = self.getLearningRate()
            opt = optimizer_from_config(cfg, net.parameter_layout() if opt.layout is not None else None)
        else:
            opt = Adam(lr=self.getLearningRate())
        return DistributedTrainer(
            net, loss, opt, batch_size=self.getBatchSize(), end_trigger=MaxEpoch(self.getMaxEpoch()),
            seed=self.getSeed() % (2 ** 63), validation_metrics=list(metrics),
            validation_batch_size=self.getInferenceBatchSize(),
            checkpoint_dir=self._value(self.checkpointDir), max_recoveries=self.getMaxRecoveries(),
            num_classes=num_classes, progress=False)
