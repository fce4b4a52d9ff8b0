"""The driver loop of synchronous data-parallel training on Spark (BigDL's ``DistriOptimizer``).

One iteration is one Spark job of two stages (see DESIGN.md and :mod:`sparkdl.engine.iteration`): stage 1
computes each cached partition's summed gradient and cuts it into K blocks; the shuffle routes block k to
task k of stage 2, which sums it, divides by the global normalizer and — zipped with shard k's optimizer
state, cached on the executors — applies the optimizer. The driver gathers the new shards, broadcasts them for the next iteration and
destroys the previous broadcast. Shard states never pass through the driver, except in snapshots (every
``snapshot_interval`` iterations and at checkpoints) used to recover from a lost executor by replaying
the iterations since the snapshot — bit-identically, since every iteration is deterministic.
"""
from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass

import numpy as np
from pyspark import StorageLevel

from sparkdl.engine import tasks
from sparkdl.engine.allreduce import block_bounds, merge_blocks
from sparkdl.engine.broadcast import CloudBroadcast
from sparkdl.engine.data import DataBlocks
from sparkdl.engine.environment import check_executor_environment
from sparkdl.engine.inference import evaluate
from sparkdl.engine.iteration import block_id, run_iteration
from sparkdl.engine.jvm_reduce import JvmAllReduce, supports
from sparkdl.engine.plan import batch_sizes
from sparkdl.engine.shipping import check_shippable
from sparkdl.engine.summary import TrainSummary
from sparkdl.engine.task_errors import TrainingDivergedError, original_error
from sparkdl.engine.triggers import EveryEpoch, MaxEpoch, TrainingState, Trigger
from sparkdl.step import sum_reduction
from sparkdl.jvm import bridge, empty_view, set_jvm_log_level, stop_console_progress_bar

__all__ = ["DistributedTrainer", "TrainingDivergedError"]

log = logging.getLogger("sparkdl.engine")

#: Parameters per AllReduce block when ``num_blocks`` is not given (4 MB of float32).
BLOCK_PARAMETERS = 1 << 20


@dataclass
class _Snapshot:
    iteration: int
    epoch: int
    iteration_in_epoch: int
    weights: np.ndarray
    buffers: np.ndarray
    states: list
    schedule_state: dict | None
    samples_seen: int


class DistributedTrainer:
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
        AllReduce blocks K, i.e. reduce tasks per iteration. Default: one per :data:`BLOCK_PARAMETERS`
        parameters, at most one per data partition (each reduce task is a fixed cost of tens of
        milliseconds, so small models use one block; measured in bench/RESULTS.md).
    compress : {None, 'fp16'}
        Send gradient blocks as float16 (summed in float32; weights stay float32).
    validation_trigger : Trigger, optional
        When to evaluate ``validation_metrics`` on the validation data (default every epoch).
    validation_metrics : sequence of metrics
        From :mod:`sparkdl.metrics`; the first one is the "score" used by ``MaxScore`` and plateau schedules.
    checkpoint_dir : str, optional
        Where checkpoints go (local path). ``checkpoint_trigger`` (default every epoch) says when.
    log_dir : str, optional
        TensorBoard event files.
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
    fault_hook : callable, optional
        Testing aid: ``hook(stage=, partition=, epoch=, iteration=, attempt=)`` called inside every task.

    Attributes
    ----------
    state : TrainingState
        Epoch, global iteration, last loss and score (restored on resume).
    samples_seen : int
        Training samples processed since the start of training, resumed runs included.
    summary : TrainSummary
        Per-iteration and validation records of the last :meth:`fit`.

    Raises
    ------
    TypeError, ValueError
        For invalid arguments, before any Spark job runs.

    Notes
    -----
    BatchNorm is the one exception to global-mean semantics: in training mode its batch statistics are those of
    each partition's share of the global batch (as PyTorch DDP without SyncBatchNorm), and the new running
    statistics are the shares' running statistics averaged with their row counts as weights. A share of one
    row is normalised with the running statistics (see :class:`sparkdl.nn.BatchNorm1d`); empty shares do not
    count. ``sparkdl.trainer.train_step(..., groups=shares)`` computes exactly the same step in one process.
    """

    def __init__(self, model, loss, optimizer, *, batch_size: int, end_trigger: Trigger | None = None,
                 seed: int = 0, num_blocks: int | None = None, compress: str | None = None, shuffle: bool = True,
                 validation_trigger: Trigger | None = None, validation_metrics=(), validation_batch_size: int = 1024,
                 checkpoint_dir: str | None = None, checkpoint_trigger: Trigger | None = None,
                 keep_checkpoints: int = 3,
                 log_dir: str | None = None, num_classes: int | None = None, threads_per_task: int | None = None,
                 progress: bool = True, snapshot_interval: int = 50, max_recoveries: int = 3,
                 local_data_copy: bool = True, jvm_reduce: bool | None = None, fault_hook=None):
        from sparkdl.nn.module import Module
        if not isinstance(model, Module):
            raise TypeError(f"DistributedTrainer: model must be a sparkdl.nn.Module, got {type(model).__name__}")
        for name, v in (("batch_size", batch_size), ("snapshot_interval", snapshot_interval)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"DistributedTrainer: {name} must be an int >= 1, got {v!r}")
        if isinstance(max_recoveries, bool) or not isinstance(max_recoveries, int) or max_recoveries < 0:
            raise ValueError(f"DistributedTrainer: max_recoveries must be an int >= 0, got {max_recoveries!r}")
        if num_blocks is not None and (not isinstance(num_blocks, int) or num_blocks < 1):
            raise ValueError(f"DistributedTrainer: num_blocks must be None or an int >= 1, got {num_blocks!r}")
        if compress not in (None, "fp16"):
            raise ValueError(f"DistributedTrainer: compress must be None or 'fp16', got {compress!r}")
        if end_trigger is not None and not isinstance(end_trigger, Trigger):
            raise TypeError(f"DistributedTrainer: end_trigger must be a Trigger, got {type(end_trigger).__name__}")
        if model.dtype != np.float32:
            raise TypeError(f"DistributedTrainer: the model must be float32, got {model.dtype}")
        self.model, self.loss, self.optimizer = model, loss, optimizer
        self.batch_size, self.seed, self.shuffle = batch_size, int(seed), bool(shuffle)
        self.end_trigger = end_trigger or MaxEpoch(1)
        self.num_blocks, self.compress = num_blocks, compress
        self.validation_trigger = validation_trigger or EveryEpoch()
        self.validation_metrics = list(validation_metrics)
        self.validation_batch_size = validation_batch_size
        self.checkpoint_dir, self.keep_checkpoints = checkpoint_dir, keep_checkpoints
        self.checkpoint_trigger = checkpoint_trigger or EveryEpoch()
        self.log_dir, self.num_classes, self.threads_per_task = log_dir, num_classes, threads_per_task
        self.progress, self.snapshot_interval, self.max_recoveries = progress, snapshot_interval, max_recoveries
        self.fault_hook = fault_hook
        self.local_data_copy = bool(local_data_copy)
        if jvm_reduce not in (None, True, False):
            raise TypeError(f"DistributedTrainer: jvm_reduce must be None, True or False, got {jvm_reduce!r}")
        if jvm_reduce:
            reason = supports(optimizer, compress, num_blocks)
            if reason is not None:
                raise ValueError(f"DistributedTrainer: jvm_reduce=True is not possible: {reason}; "
                                 "use jvm_reduce=None (automatic) or False")
        self.jvm_reduce = jvm_reduce
        self._jvm = None
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
        train : DataBlocks or pyspark.RDD of (features, label)
            Training data; an RDD is converted and cached with :meth:`DataBlocks.from_samples`.
        validation : DataBlocks or RDD, optional
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
        check_executor_environment(train.rdd.context if isinstance(train, DataBlocks) else train.context)
        data = train if isinstance(train, DataBlocks) else DataBlocks.from_samples(train)
        val = validation if validation is None or isinstance(validation, DataBlocks) else \
            DataBlocks.from_samples(validation)
        data.check_labels(self.num_classes)
        if val is not None:
            val.check_labels(self.num_classes)
            if not self.validation_metrics:
                raise ValueError("DistributedTrainer.fit: validation data given but validation_metrics is empty")
        self._check_feature_shape(data)
        _warn_if_uneven(data.sizes)
        self.summary = TrainSummary(self.log_dir)
        try:
            self._fit(data, val, resume)
        finally:
            self.summary.close()
            self._replace_state_rdd(None)
            data.rdd.context.setJobDescription(None)  # do not label the caller's later jobs
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

    def _fit(self, data: DataBlocks, val, resume: bool):
        sc = data.rdd.context
        self._sc = sc
        # Unpersisting last iteration's locally checkpointed state RDD is intended: do not warn each time.
        for logger in ("org.apache.spark.api.python.PythonRDD",  # the Python reduce's state RDD
                       "org.apache.spark.rdd.ZippedPartitionsRDD2"):  # the JVM reduce's
            set_jvm_log_level(sc, logger, "ERROR")
        P = self.model.num_parameters()
        K = self.num_blocks or min(data.num_partitions, -(-P // BLOCK_PARAMETERS))
        bounds = block_bounds(P, K)
        if self.optimizer.layout is None:
            self.optimizer.configure(self.model.parameter_layout())
        elif self.optimizer.layout.size != P:
            raise ValueError(f"DistributedTrainer: the optimizer is configured for {self.optimizer.layout.size} "
                             f"parameters but the model has {P}")
        integer_labels = data.label_kind == "i" or self.num_classes is not None
        offsets = np.concatenate([[0], np.cumsum(data.sizes)]).astype(np.int64)
        fit_ctx = tasks.FitContext(self.model.copy(), sum_reduction(self.loss), self.optimizer, bounds, offsets,
                                   self.batch_size, self.seed, self.shuffle, integer_labels, self.compress,
                                   self.threads_per_task, self.fault_hook,
                                   f"{sc.applicationId}-{data.rdd.id()}" if self.local_data_copy else None)
        self._bc_fit = CloudBroadcast(sc, fit_ctx)
        use_jvm, reason = self.jvm_reduce, supports(self.optimizer, self.compress, K)
        if use_jvm is None:
            use_jvm = reason is None
        elif use_jvm and reason is not None:
            raise ValueError(f"DistributedTrainer: jvm_reduce=True is not possible: {reason}; "
                             "use jvm_reduce=None (automatic) or False")
        if use_jvm:
            bridge(sc)  # BridgeMissingError naming the line to add to the session
            groups = max(1, sc.defaultParallelism // _task_cpus(sc)) if self.local_data_copy else 0
            self._jvm = JvmAllReduce(data, self._bc_fit, self.optimizer, bounds, groups)
            self._local_view = None
        else:
            self._local_view = empty_view(data.rdd) if self.local_data_copy else None
        self._local_copies_ready = False
        self._results = sc.accumulator({}, tasks.ShardResults())
        self._bounds = bounds
        sizes = batch_sizes(data.num_samples, self.batch_size)
        states = [self.optimizer.init_state(int(bounds[k]), int(bounds[k + 1])) for k in range(K)]
        self.state = TrainingState()
        self._iteration_in_epoch = 0
        self.samples_seen = 0
        if resume:
            states = self._restore_checkpoint(K)
        self._set_state_rdd(states)
        snapshot = self._take_snapshot(states)
        bar = self._progress_bar(len(sizes))
        recoveries = 0
        try:
            while not self.end_trigger(self.state):
                try:
                    self._step(data, self.state.epoch, self._iteration_in_epoch, sizes, bar)
                except TrainingDivergedError:
                    self._sync_model()  # the last good weights
                    raise
                except Exception as e:  # a lost executor takes cached optimizer state with it: replay
                    error = original_error(e)
                    if error is not None:  # raised by the computation in a task: deterministic, never replayed
                        self._sync_model()  # the model keeps the last good weights
                        raise error from None
                    if recoveries >= self.max_recoveries or not _is_spark_failure(e):
                        raise
                    recoveries += 1
                    log.warning("sparkdl: iteration %d failed (%s); replaying from iteration %d (recovery %d/%d)",
                                self.state.iteration + 1, type(e).__name__, snapshot.iteration, recoveries,
                                self.max_recoveries)
                    self._restore_snapshot(snapshot)
                    continue
                self._after_iteration(val, bar)
                if self.state.iteration - snapshot.iteration >= self.snapshot_interval:
                    snapshot = self._take_snapshot()
            self._sync_model()
        finally:
            if bar is not None:
                bar.close()
            self._bc_fit.destroy()

    # ------------------------------------------------------------------ one iteration
    def _step(self, data, epoch, i, sizes, bar):
        sc = self._sc
        g = self.state.iteration
        lr = self._learning_rate()
        sc.setJobDescription(f"sparkdl fit: epoch {epoch + 1}, iteration {i + 1}/{len(sizes)} "
                             f"(global {g + 1})")
        t0 = time.perf_counter()
        if self._jvm is not None:
            ok, source, loss_sum, norm_sum, _ = self._jvm.step(epoch, i, g, lr)
            if source == 2:
                log.info("sparkdl: iteration %d reran on the full partitions (no executor-local copy yet)", g + 1)
            loss = loss_sum / norm_sum if norm_sum > 0 else math.nan
            if not ok:
                self._raise_diverged(g, epoch, loss)
            self._model_stale = True
            self._record(loss, epoch, i, g, lr, sizes, t0, bar)
            return
        bc_w = sc.broadcast((self.model.flat_parameters.copy(), self.model.flat_buffers.copy()))
        ctx = tasks.IterationContext(self._bc_fit, bc_w, epoch, i, g, lr)
        K = len(self._bounds) - 1
        try:
            while True:
                source = self._local_view if self._local_copies_ready else data.rdd
                updated = run_iteration(source, self._state_rdd, ctx, self._results, K, self.optimizer.clip_norm,
                                        self.optimizer.needs_tensor_norms)
                if updated is not None:
                    break
                # An executor had no local copy of its partition: rerun on the full data (restores the copies).
                log.info("sparkdl: iteration %d reran on the full partitions (no executor-local copy yet)", g + 1)
                self._local_copies_ready = False
        except BaseException:
            bc_w.destroy()
            raise
        results = self._results.value
        if len(results) != K:
            updated.unpersist()
            bc_w.destroy()
            raise RuntimeError(f"sparkdl: iteration {g + 1} returned {len(results)} of {K} weight shards")
        # The cached state RDD's own task closure references this iteration's weight broadcast: it is
        # destroyed together with that RDD, one iteration later.
        self._replace_state_rdd(updated, bc_w)
        self._local_copies_ready = self._local_view is not None
        self._apply_results(results, epoch, i, g, lr, sizes, t0, bar)

    def _apply_results(self, results, epoch, i, g, lr, sizes, t0, bar):
        new_w = merge_blocks(((k, shard) for k, (shard, _) in results.items()), self._bounds)
        loss_sum, norm_sum, buf, n = results[0][1]
        loss = loss_sum / norm_sum if norm_sum > 0 else math.nan
        if not math.isfinite(loss) or not np.isfinite(new_w).all():
            self._raise_diverged(g, epoch, loss)
        self.model.flat_parameters[...] = new_w
        if buf is not None and n > 0:
            self.model.flat_buffers[...] = buf / np.float32(n)
        self._record(loss, epoch, i, g, lr, sizes, t0, bar)

    @staticmethod
    def _raise_diverged(g, epoch, loss):
        what = "loss" if not math.isfinite(loss) else "updated weights"
        raise TrainingDivergedError(
            f"training diverged at iteration {g + 1} (epoch {epoch + 1}): the {what} became NaN or infinite "
            f"(loss={loss}); the model keeps the last good weights and existing checkpoints are untouched. "
            "Lower the learning rate or enable gradient clipping (clip_norm).")

    def _record(self, loss, epoch, i, g, lr, sizes, t0, bar):
        """Advance the counters and log one finished iteration."""
        samples = int(sizes[i])
        self.samples_seen += samples
        seconds = time.perf_counter() - t0
        self.state.iteration = g + 1
        self._iteration_in_epoch = i + 1
        self.state.loss = loss
        self.state.epoch_end = self._iteration_in_epoch == len(sizes)
        if self.state.epoch_end:
            self.state.epoch = epoch + 1
            self._iteration_in_epoch = 0
        self.summary.add_iteration({"iteration": g + 1, "epoch": epoch + 1, "loss": loss, "lr": lr,
                                    "samples": samples, "seconds": seconds, "samples_per_s": samples / seconds})
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.4f}", samples_per_s=f"{samples / seconds:,.0f}", refresh=False)

    def _learning_rate(self) -> float:
        return float(self.optimizer.lr_at(iteration=self.state.iteration, epoch=self.state.epoch,
                                          metric=self.state.score))

    # ------------------------------------------------------------------ triggers
    def _sync_model(self):
        """Copy the weights the JVM reduce holds into ``self.model`` (only when something reads them)."""
        if self._jvm is not None and self._model_stale:
            params, buffers = self._jvm.weights(self.model.num_parameters())
            self.model.flat_parameters[...] = params
            self.model.flat_buffers[...] = buffers
            self._model_stale = False

    def _after_iteration(self, val, bar):
        if val is not None and self.validation_trigger(self.state):
            self._sync_model()
            scores = evaluate(self.model, val, self.validation_metrics, batch_size=self.validation_batch_size,
                              integer_labels=self.num_classes is not None or val.label_kind == "i")
            self.state.score = float(scores[self.validation_metrics[0].name])
            self.summary.add_validation({"iteration": self.state.iteration, "epoch": self.state.epoch, **scores})
            line = f"epoch {self.state.epoch} iteration {self.state.iteration}: " + \
                ", ".join(f"{k}={v:.4f}" for k, v in scores.items())
            if bar is not None:
                bar.write(line)
            else:
                log.info(line)
        if self.checkpoint_dir is not None and self.checkpoint_trigger(self.state):
            self._sync_model()
            self._save_checkpoint()

    # ------------------------------------------------------------------ optimizer state on executors
    def _set_state_rdd(self, states):
        """Ship shard states to the executors (at the start, on resume and on recovery only); the JVM
        reduce also takes the model's current weights here."""
        if self._jvm is not None:
            self._jvm.set_states(states)
            self._jvm.set_weights(self.model.flat_parameters, self.model.flat_buffers)
            self._model_stale = False
            return
        records = [(k, (tasks.STATE, s)) for k, s in enumerate(states)]
        rdd = self._sc.parallelize(records, len(states)).partitionBy(len(states), block_id)
        self._replace_state_rdd(rdd.persist(StorageLevel.MEMORY_AND_DISK))

    def _replace_state_rdd(self, updated, broadcast=None):
        """Make ``updated`` (cached, partitioned like the gradient blocks, one ``(k, (STATE, state))`` record
        per partition) the optimizer state for the next iteration; release the previous one and its weight
        broadcast, so cached blocks, broadcasts and lineage stay bounded. ``None`` (the end of a fit) also
        closes the JVM reduce."""
        if updated is None and self._jvm is not None:
            self._jvm.close()
            self._jvm = None
        if self._state_rdd is not None:
            self._state_rdd.unpersist()
        if self._state_broadcast is not None:
            self._state_broadcast.destroy()
        self._state_rdd, self._state_broadcast = updated, broadcast

    def _collect_states(self) -> list:
        if self._jvm is not None:
            return self._jvm.states()
        pairs = sorted(self._state_rdd.collect(), key=lambda kv: kv[0])
        return [state for _, (_, state) in pairs]

    def _take_snapshot(self, states=None) -> _Snapshot:
        self._sync_model()
        schedule = getattr(self.optimizer, "schedule", None)
        return _Snapshot(self.state.iteration, self.state.epoch, self._iteration_in_epoch,
                         self.model.flat_parameters.copy(),
                         self.model.flat_buffers.copy(), states if states is not None else self._collect_states(),
                         schedule.state_dict() if schedule is not None and hasattr(schedule, "state_dict") else None,
                         self.samples_seen)

    def _restore_snapshot(self, snap: _Snapshot):
        self.model.flat_parameters[...] = snap.weights
        self.model.flat_buffers[...] = snap.buffers
        self.state.iteration, self.state.epoch = snap.iteration, snap.epoch
        self._iteration_in_epoch = snap.iteration_in_epoch
        self.samples_seen = snap.samples_seen
        del self.summary.iterations[snap.iteration:]
        schedule = getattr(self.optimizer, "schedule", None)
        if snap.schedule_state is not None:
            schedule.load_state_dict(snap.schedule_state)
        self._set_state_rdd([{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in s.items()}
                             for s in snap.states])

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self):
        from sparkdl.engine.checkpointing import save_training_checkpoint
        save_training_checkpoint(self, self._collect_states())

    def _restore_checkpoint(self, K):
        from sparkdl.engine.checkpointing import restore_training_checkpoint
        return restore_training_checkpoint(self, K)

    def _progress_bar(self, iterations_per_epoch):
        if not self.progress:
            return None
        from tqdm.auto import tqdm
        if stop_console_progress_bar(self._sc):  # its "[Stage N:>" lines would overwrite this bar
            log.info("sparkdl: stopped Spark's console progress bar for this session (spark.ui.showConsoleProgress); "
                     "sparkdl shows its own")
        total = None
        t = self.end_trigger
        if isinstance(t, MaxEpoch):
            total = t.max_epoch * iterations_per_epoch
        elif hasattr(t, "max_iteration"):
            total = t.max_iteration
        return tqdm(total=total, initial=self.state.iteration, unit="it", desc="sparkdl fit", dynamic_ncols=True)


def _task_cpus(sc) -> int:
    try:
        return max(1, int(sc.getConf().get("spark.task.cpus", "1")))
    except ValueError:
        return 1


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


def _is_spark_failure(e: BaseException) -> bool:
    """Errors raised by a failed Spark job (executor lost, block missing), as opposed to driver bugs."""
    name = type(e).__name__
    return name in ("Py4JJavaError", "Py4JError", "PythonException", "SparkRuntimeException") or \
        "SparkException" in str(e)[:2000] or "Job aborted" in str(e)[:2000]
