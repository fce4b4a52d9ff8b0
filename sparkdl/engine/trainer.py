"""Synchronous data-parallel training of a sparkdl model on Spark: :class:`DistributedTrainer` (BigDL's
``DistriOptimizer``).

The trainer checks its arguments and the data, then runs the driver loop (:mod:`sparkdl.engine.loop`; one
iteration is one Spark job, :mod:`sparkdl.engine.iteration`). Its options are one :class:`TrainerOptions`
(:mod:`sparkdl.engine.options`); the optimizer state stays sharded on the executors
(:mod:`sparkdl.engine.shards`) and passes through the driver only in snapshots, used to recover from a lost
executor by replaying the iterations since (bit-identically: every iteration is deterministic), and in
checkpoints (:mod:`sparkdl.engine.recovery`).
"""
from __future__ import annotations

import warnings

import numpy as np

from sparkdl.engine.checkpointing import check_checkpoint_dir
from sparkdl.engine.connect_data import ConnectBlocks
from sparkdl.engine.data import DataBlocks
from sparkdl.engine.environment import check_executor_environment
from sparkdl.engine.jvm_reduce import supports
from sparkdl.engine.loop import BLOCK_PARAMETERS, DriverLoop  # noqa: F401  (BLOCK_PARAMETERS: still importable here)
from sparkdl.engine.options import TrainerOptions, option_attributes, resolve_options
from sparkdl.engine.shipping import check_shippable
from sparkdl.engine.summary import TrainSummary
from sparkdl.engine.task_errors import TrainingDivergedError
from sparkdl.engine.triggers import TrainingState
from sparkdl.nn.graph import Graph
from sparkdl.nn.module import Module

__all__ = ["DistributedTrainer", "TrainerOptions", "TrainingDivergedError"]


@option_attributes
class DistributedTrainer(DriverLoop):
    """Train a sparkdl model on a Spark RDD with synchronous data-parallel SGD.

    Parameters
    ----------
    model : sparkdl.nn.Module
        Trained in place: after :meth:`fit` its parameters and buffers hold the result.
    loss : sparkdl.nn.loss.Loss
        Any reduction; the engine evaluates ``reduction='sum'`` per partition and divides by the global
        normalizer, so one iteration equals one single-process ``'mean'`` step on the union of the local
        batches.
    optimizer : sparkdl.optim optimizer
        Its ``schedule`` (if any) is evaluated on the driver once per iteration.
    batch_size : int
        Global mini-batch size, split across partitions in proportion to their sizes (any value works).
    end_trigger : Trigger, default MaxEpoch(1)
        When to stop (:mod:`sparkdl.engine.triggers`; combine with ``|`` / ``&``).
    seed : int
        Source of all randomness (shuffling, Dropout).
    num_blocks : int, optional
        AllReduce blocks K, i.e. reduce tasks per iteration. Default: one per
        :data:`~sparkdl.engine.loop.BLOCK_PARAMETERS` parameters, at most one per data partition (each reduce task
        is a fixed cost of tens of milliseconds, so small models use one block; measured in bench/RESULTS.md), but
        no block over :data:`~sparkdl.engine.loop.MAX_BLOCK_BYTES` (16 MiB of float32: the driver holds
        several reduce results at once).
    compress : {None, 'fp16'}
        Send gradient blocks as float16 (summed in float32; weights stay float32).
    validation_trigger : Trigger, optional
        When to evaluate ``validation_metrics`` on the validation data (default every epoch).
    validation_metrics : sequence of metrics
        From :mod:`sparkdl.metrics`; the first one is the "score" used by ``MaxScore`` and plateau schedules.
    checkpoint_dir : str, optional
        Where checkpoints go: a local path or a URI of the session's Hadoop file systems (``hdfs://``, ``s3a://``,
        ...; see :mod:`sparkdl.io`), checked before training. ``checkpoint_trigger`` (default every epoch) says when.
    log_dir : str, optional
        TensorBoard event files (local path, or a Hadoop URI: written locally, copied up at every checkpoint and at
        the end).
    num_classes : int, optional
        For classification: labels are checked to be integers in ``[0, num_classes)`` before training.
    threads_per_task : int, optional
        numba/BLAS threads per task (default ``spark.task.cpus``).
    progress : bool
        Show a tqdm progress bar with loss, samples/s and ETA.
    snapshot_interval : int
        Iterations between driver-side snapshots used to recover from executor loss.
    max_recoveries : int
        How many transient failures (a lost executor, a fetch failure, a killed task) to recover from, by
        replay from the last snapshot, before giving up. An error raised by the computation inside a task (a
        layer, the loss, the optimizer, a bad row, a NaN loss) is deterministic: it is never replayed and
        reaches the caller as itself — original type and message, plus the data partition, epoch and
        iteration (and the executor's traceback as a note; see :mod:`sparkdl.engine.task_errors`).
    local_data_copy : bool
        After the first iteration, read each partition's mini-batch rows from an executor-local copy of the
        partition (``.npy`` files in Spark's local directory, memory-mapped) instead of streaming the whole
        cached partition from the JVM to Python every iteration (see :mod:`sparkdl.engine.local_cache`).
        Costs the raw data size once per executor in local disk/page cache.
    jvm_reduce : bool, optional
        Run stage 2 of every iteration (sum, optimizer update, cached shard states) on the JVM through the
        ``jvm_bridge`` (:mod:`sparkdl.engine.jvm_reduce`): one py4j call and one Python stage per iteration,
        one gradient task per executor core over the executor-local data copies, results bitwise equal to
        the Python reduce. Default (``None``): on when the bridge is on the session's class path and the
        configuration is supported (SGD, Adam, AdamW, with or without ``compress``; ``clip_norm`` with one AllReduce
        block); ``True`` requires it; ``False`` always uses the Python reduce. With one block (models under
        ~1M parameters) the driver JVM sums and updates (one stage per iteration).
    iterations_per_job : int, optional
        Run up to this many iterations in one Spark job (driver reduce over executor-local copies: the JVM
        reduce with one AllReduce block). The gradient tasks then stay running and meet at the driver after
        every iteration through Spark's own RPC (``jvm_bridge``: ``Rendezvous``, ``TaskLink``), which saves a
        job's scheduling and task launch per iteration (15-40 ms on ``local[2]``); the arithmetic is the same, so
        the results are bitwise those of one job per iteration. A job never runs past an iteration after which
        a trigger fires (end, validation, checkpoint) or a snapshot is due, so it needs triggers that
        read only counters and scores (``Trigger.predictable``: all built-in ones but :class:`MinLoss`) and a
        learning-rate schedule without state (not ``ReduceLROnPlateau``); otherwise every iteration is a job.
        Default (``None``): as many as take about :data:`~sparkdl.engine.loop.JOB_SECONDS` seconds (the
        progress bar and the summary then advance once per job); ``1``: a job per iteration.
    options : TrainerOptions, optional
        All of the above but ``model``, ``loss`` and ``optimizer`` in one :class:`TrainerOptions`, an alternative
        to the keyword arguments (keyword arguments given as well replace its fields).

    Attributes
    ----------
    options : TrainerOptions
        The options, validated (the keyword arguments above, with their defaults). Each is also an attribute of
        the same name (``trainer.max_recoveries``); setting one validates it.
    state : TrainingState
        Epoch, global iteration, last loss and score (restored on resume).
    samples_seen : int
        Training samples processed since the start of training, resumed runs included.
    summary : TrainSummary
        Per-iteration and validation records of the last :meth:`fit`.

    Raises
    ------
    TypeError, ValueError
        For invalid arguments (an unknown keyword argument names the options), or a model with a
        :class:`~sparkdl.nn.Graph` of fixed ``batch_size``, before any Spark job runs.

    Notes
    -----
    BatchNorm is the one exception to global-mean semantics: in training mode its batch statistics are those of
    each partition's share of the global batch (as PyTorch DDP without SyncBatchNorm), and the new running
    statistics are the shares' running statistics averaged with their row counts as weights. A share of one
    row is normalised with the running statistics (see :class:`sparkdl.nn.BatchNorm1d`); empty shares do not
    count. ``sparkdl.trainer.train_step(..., groups=shares)`` computes exactly the same step in one process.
    """

    def __init__(self, model, loss, optimizer, options: TrainerOptions | None = None, **kwargs):
        if not isinstance(model, Module):
            raise TypeError(f"DistributedTrainer: model must be a sparkdl.nn.Module, got {type(model).__name__}")
        opts = resolve_options(options, kwargs)
        if model.dtype != np.float32:
            raise TypeError(f"DistributedTrainer: the model must be float32, got {model.dtype}")
        fixed = [(name or "model", m.batch_size) for name, m in model.named_modules()
                 if isinstance(m, Graph) and m.batch_size is not None]
        if fixed:
            raise ValueError(f"DistributedTrainer: {fixed[0][0]!r} computes batches of exactly {fixed[0][1]} rows "
                             "(Graph.batch_size: an ONNX file exported with static shapes), but each iteration "
                             "splits the batch across partitions; export the model with a dynamic batch axis "
                             "(torch.onnx.export(..., dynamic_shapes=...) or dynamic_axes=...) to train it here")
        if opts.jvm_reduce:
            reason = supports(optimizer, opts.compress, opts.num_blocks)
            if reason is not None:
                raise ValueError(f"DistributedTrainer: jvm_reduce=True is not possible: {reason}; "
                                 "use jvm_reduce=None (automatic) or False")
        self.model, self.loss, self.optimizer, self.options = model, loss, optimizer, opts
        # Testing aid, not an option: a test sets ``hook(stage=, partition=, epoch=, iteration=, attempt=)`` here
        # before calling fit; every task calls it (``FitContext.fault_hook``, :mod:`sparkdl.engine.tasks`).
        self._fault_hook = None
        self._jvm = self._connect = self._sc = None
        self.summary: TrainSummary | None = None
        self.state = TrainingState()
        self._state_rdd = self._state_broadcast = None
        self._model_stale = False
        self._results = None
        self._iteration_in_epoch = 0
        self.samples_seen = 0

    # ------------------------------------------------------------------ public API
    def fit(self, train, validation=None, *, resume: bool = False) -> TrainSummary:
        """Train until ``end_trigger`` fires.

        Parameters
        ----------
        train : DataBlocks, ConnectBlocks or pyspark.RDD of (features, label)
            Training data; an RDD is converted and cached with :meth:`DataBlocks.from_samples`. ConnectBlocks
            (:mod:`sparkdl.engine.connect_data`) train on a Spark Connect session (docs/connect.md).
        validation : DataBlocks, ConnectBlocks or RDD, optional
            Evaluated with ``validation_metrics`` whenever ``validation_trigger`` fires.
        resume : bool
            Continue from the latest checkpoint in ``checkpoint_dir`` (model, optimizer state, schedule,
            counters); the continuation is identical to an uninterrupted run.

        Returns
        -------
        TrainSummary

        Raises
        ------
        TypeError
            Before any Spark job, if the model, loss or optimizer holds something that cannot be sent to the
            executors (naming the attribute path, e.g. ``model.3.resource``).
        ValueError
            For invalid data (naming partition and row) or a feature shape the model does not accept.
        sparkdl.engine.environment.ExecutorEnvironmentError
            Before any other job, if the executors run another sparkdl, Python (major.minor) or numpy (major)
            than the driver (checked once per application).
        """
        for name, obj in (("model", self.model), ("loss", self.loss), ("optimizer", self.optimizer)):
            check_shippable(obj, name, "DistributedTrainer.fit")
        if isinstance(train, ConnectBlocks):
            check_executor_environment(None, train.session)
            if validation is not None and not isinstance(validation, ConnectBlocks):
                raise TypeError("DistributedTrainer.fit: on Spark Connect the validation data must be ConnectBlocks "
                                f"too, got {type(validation).__name__}")
            data, val = train, validation
        else:
            check_executor_environment(train.rdd.context if isinstance(train, DataBlocks) else train.context)
            data = train if isinstance(train, DataBlocks) else DataBlocks.from_samples(train)
            val = validation if validation is None or isinstance(validation, DataBlocks) else \
                DataBlocks.from_samples(validation)
        data.check_labels(self.options.num_classes)
        if val is not None:
            val.check_labels(self.options.num_classes)
            if not self.options.validation_metrics:
                raise ValueError("DistributedTrainer.fit: validation data given but validation_metrics is empty")
        self._check_feature_shape(data)
        _warn_if_uneven(data.sizes)
        check_checkpoint_dir(self.options.checkpoint_dir)
        self.summary = TrainSummary(self.options.log_dir)
        try:
            self._fit(data, val, resume)
        finally:
            self.summary.close()
            self._replace_state_rdd(None)
            if self._sc is not None:
                self._sc.setJobDescription(None)  # do not label the caller's later jobs
        return self.summary

    # ------------------------------------------------------------------ setup
    def _check_feature_shape(self, data: DataBlocks):
        if data.feature_shape is None:
            raise ValueError("DistributedTrainer.fit: the training data is empty")
        x = np.zeros((1, *data.feature_shape), np.float32)
        try:
            self.model(x)
        except (ValueError, TypeError) as e:
            raise ValueError(f"DistributedTrainer.fit: the model does not accept the training features of "
                             f"shape {data.feature_shape} (per sample): {e}") from e


#: Largest / smallest partition size above which :meth:`DistributedTrainer.fit` warns.
UNEVEN_PARTITIONS_RATIO = 8


def _warn_if_uneven(sizes) -> None:
    """Warn when the largest partition holds more than :data:`UNEVEN_PARTITIONS_RATIO` times the smallest: each
    iteration waits for the task with the largest share of the batch."""
    if len(sizes) < 2 or max(sizes) <= UNEVEN_PARTITIONS_RATIO * min(sizes):
        return
    warnings.warn(f"DistributedTrainer.fit: the training partitions are very uneven (largest {max(sizes)} rows, "
                  f"smallest {min(sizes)}; more than {UNEVEN_PARTITIONS_RATIO}x): every iteration waits for the "
                  "partition with the largest share of the batch. Rebalance the data before fit with "
                  "rdd.repartition(n) (DataBlocks.from_numpy splits evenly; DLClassifier/DLEstimator: the "
                  "numPartitions Param)", RuntimeWarning, stacklevel=3)
