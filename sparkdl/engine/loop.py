"""The driver loop of synchronous data-parallel training on Spark (BigDL's ``DistriOptimizer``).

One iteration is one Spark job of two stages (see :mod:`sparkdl.engine.iteration`): stage 1 computes each cached
partition's summed gradient and cuts it into K blocks; the shuffle routes block k to task k of stage 2, which
sums it, divides by the global normalizer and — zipped with shard k's optimizer state, cached on the executors
(:mod:`sparkdl.engine.shards`) — applies the optimizer. On this Python path the driver gathers the new shards,
broadcasts them for the next iteration and destroys the previous broadcast. With the JVM reduce
(:mod:`sparkdl.engine.jvm_reduce`) an iteration is one py4j call instead, and with several blocks the new shards
stay on the executors that computed them. After each iteration the loop records it, validates and checkpoints when
their triggers fire, and keeps a snapshot every ``snapshot_interval`` iterations to replay from after a lost
executor (:mod:`sparkdl.engine.recovery`).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time

import numpy as np

from sparkdl.chunking import min_blocks
from sparkdl.engine import tasks
from sparkdl.engine.allreduce import block_bounds, merge_blocks
from sparkdl.engine.broadcast import CloudBroadcast, WithoutParameters
from sparkdl.engine.connect_data import ConnectBlocks
from sparkdl.engine.connect_reduce import ConnectAllReduce
from sparkdl.engine.data import DataBlocks
from sparkdl.engine.inference import evaluate
from sparkdl.engine.iteration import run_iteration
from sparkdl.engine.jvm_reduce import JvmAllReduce, supports
from sparkdl.engine.plan import batch_sizes
from sparkdl.engine.recovery import Recovery
from sparkdl.engine.shards import ShardStates
from sparkdl.engine.task_errors import TrainingDivergedError
from sparkdl.engine.triggers import MaxEpoch, TrainingState
from sparkdl.jvm import bridge, empty_view, optional_bridge, set_jvm_log_level, stop_console_progress_bar
from sparkdl.step import sum_reduction

__all__ = ["DriverLoop", "BLOCK_PARAMETERS", "JOB_SECONDS"]

log = logging.getLogger("sparkdl.engine")

#: Parameters per AllReduce block when ``num_blocks`` is not given (4 MB of float32).
BLOCK_PARAMETERS = 1 << 20
#: Seconds of iterations one Spark job runs by default (``iterations_per_job=None``): long enough that a job's own
#: cost (15-40 ms on local[2]) is a few percent, short enough that the progress bar and a replay after a failure
#: stay fine-grained.
JOB_SECONDS = 1.0
#: Largest AllReduce block by default (float32 bytes), whatever the number of partitions: a reduce task's result
#: (its block's new weights) is deserialized on the driver, up to four at once and in about three copies each, and
#: a 100M-parameter model in two 200 MB blocks ran a 2 GiB driver out of heap, in 64 MiB blocks a 1280 MB one
#: (``num_blocks`` overrides it).
MAX_BLOCK_BYTES = 16 << 20


class DriverLoop(Recovery, ShardStates):
    """Mixin of :class:`~sparkdl.engine.DistributedTrainer`: the loop of iterations on the driver.

    Uses the trainer's ``model``, ``loss``, ``optimizer``, ``options``, ``summary`` and ``_fault_hook``; keeps
    ``state``, ``samples_seen`` and ``_iteration_in_epoch`` up to date.
    """

    def _fit(self, data: DataBlocks, val, resume: bool):
        """Run iterations until ``end_trigger`` fires; the model then holds the result."""
        K = self._set_up(data)
        bounds = self._bounds
        sizes = batch_sizes(data.num_samples, self.options.batch_size)
        states = [self.optimizer.init_state(int(bounds[k]), int(bounds[k + 1])) for k in range(K)]
        self.state = TrainingState()
        self._iteration_in_epoch = 0
        self._seconds_per_iteration = math.inf  # no multi-iteration job before one iteration is timed
        self._one_job_each_until = 0
        self.samples_seen = 0
        if resume:
            states = self._restore_checkpoint(K)
        self._set_state_rdd(states)
        snapshot = self._take_snapshot(states)
        bar = self._progress_bar(len(sizes))
        recoveries = 0
        try:
            while not self.options.end_trigger(self.state):
                plan = self._plan(sizes, val, snapshot.iteration)
                try:
                    if len(plan) < 2 or not self._run_planned(plan, sizes, bar):
                        self._step(data, self.state.epoch, self._iteration_in_epoch, sizes, bar)
                except TrainingDivergedError:
                    self._sync_model()  # the last good weights
                    raise
                except Exception as e:  # a lost executor takes cached optimizer state with it: replay
                    if not self._can_replay(e, recoveries):
                        raise
                    recoveries += 1
                    if len(plan) > 1:
                        # A multi-iteration job fails as a whole when one task fails (a retried task cannot rejoin
                        # the others mid-job): replay its iterations one job each, whose tasks Spark retries alone.
                        self._one_job_each_until = plan[-1][2] + 1
                    self._replay(snapshot, e, recoveries)
                    continue
                self._after_iteration(val, bar)
                if self.state.iteration - snapshot.iteration >= self.options.snapshot_interval:
                    snapshot = self._take_snapshot()
            self._sync_model()
        finally:
            if bar is not None:
                bar.close()
            if self._bc_fit is not None:
                self._bc_fit.destroy()

    def _set_up(self, data: DataBlocks) -> int:
        """Everything a fit's iterations share: AllReduce blocks, the broadcast :class:`tasks.FitContext`, the
        reduce (JVM or Python) and the data's executor-local view; on Spark Connect, the Connect transport
        (:mod:`sparkdl.engine.connect_reduce`). Returns the number of blocks K."""
        if isinstance(data, ConnectBlocks):
            return self._set_up_connect(data)
        sc = data.rdd.context
        self._sc = sc
        opts = self.options
        # Unpersisting last iteration's locally checkpointed state RDD is intended: do not warn each time.
        for logger in ("org.apache.spark.api.python.PythonRDD",  # the Python reduce's state RDD
                       "org.apache.spark.rdd.ZippedPartitionsRDD2"):  # the JVM reduce's
            set_jvm_log_level(sc, logger, "ERROR")
        K, bounds, fit_ctx = self._fit_context(
            data, f"{sc.applicationId}-{data.rdd.id()}" if opts.local_data_copy else None)
        self._bc_fit = CloudBroadcast(sc, fit_ctx)
        use_jvm, reason = opts.jvm_reduce, supports(self.optimizer, opts.compress, K)
        if use_jvm is None:
            use_jvm = reason is None and optional_bridge(sc) is not None  # and the session can take the bridge
        elif use_jvm and reason is not None:
            raise ValueError(f"DistributedTrainer: jvm_reduce=True is not possible: {reason}; "
                             "use jvm_reduce=None (automatic) or False")
        if use_jvm:
            bridge(sc)  # BridgeMissingError naming the line to add to the session
            groups = _task_slots(sc) if opts.local_data_copy else 0
            self._jvm = JvmAllReduce(data, self._bc_fit, self.optimizer, bounds, groups)
            self._local_view = None
        else:
            self._local_view = empty_view(data.rdd) if opts.local_data_copy else None
        self._local_copies_ready = False
        self._results = sc.accumulator({}, tasks.ShardResults())
        self._bounds = bounds
        return K

    def _fit_context(self, data, data_key):
        """``(K, bounds, FitContext)`` of a fit on ``data`` (DataBlocks or ConnectBlocks); configures the optimizer."""
        opts = self.options
        P = self.model.num_parameters()
        K = opts.num_blocks or max(min(data.num_partitions, -(-P // BLOCK_PARAMETERS)),
                                   -(-4 * P // MAX_BLOCK_BYTES))
        K = min(max(K, min_blocks(P)), max(P, 1))  # no gradient record over the chunk limit
        bounds = block_bounds(P, K)
        if self.optimizer.layout is None:
            self.optimizer.configure(self.model.parameter_layout())
        elif self.optimizer.layout.size != P:
            raise ValueError(f"DistributedTrainer: the optimizer is configured for {self.optimizer.layout.size} "
                             f"parameters but the model has {P}")
        integer_labels = data.label_kind == "i" or opts.num_classes is not None
        offsets = np.concatenate([[0], np.cumsum(data.sizes)]).astype(np.int64)
        # tasks set the parameters from each iteration's weights: the model ships without their values, so it needs
        # no copy either (the fit context is pickled as it is broadcast, before the fit changes anything)
        fit_ctx = tasks.FitContext(WithoutParameters(self.model), sum_reduction(self.loss), self.optimizer, bounds,
                                   offsets, opts.batch_size, opts.seed, opts.shuffle, integer_labels, opts.compress,
                                   opts.threads_per_task, self._fault_hook, data_key)
        return K, bounds, fit_ctx

    def _set_up_connect(self, data: ConnectBlocks) -> int:
        """:meth:`_set_up` on Spark Connect: no SparkContext, broadcast or JVM reduce (see docs/connect.md)."""
        if self.options.jvm_reduce:
            raise ValueError("DistributedTrainer: jvm_reduce=True is not possible on a Spark Connect session (no "
                             "py4j): use jvm_reduce=None or False; the reduce then runs on the client")
        self._sc = self._bc_fit = self._local_view = None
        K, bounds, fit_ctx = self._fit_context(data, None)
        self._connect = ConnectAllReduce(data, fit_ctx, bounds)
        self._local_copies_ready = False
        self._bounds = bounds
        return K

    # ------------------------------------------------------------------ several iterations in one job
    def _plan(self, sizes, val, snapshot_iteration: int) -> list:
        """The iterations the next Spark job may run, ``(epoch, iteration in epoch, global iteration, lr)`` each
        (see ``iterations_per_job``): up to the first after which a trigger fires or a snapshot is due, found by
        evaluating the triggers on the counters those iterations will reach. Empty when a job must run one
        iteration: no JVM driver reduce, a trigger that may read the loss, a schedule with state, the replay of
        a failed multi-iteration job, or a snapshot interval after the JVM refused one."""
        opts = self.options
        limit = opts.iterations_per_job or max(1, int(JOB_SECONDS / self._seconds_per_iteration))
        triggers = [opts.end_trigger] + ([opts.validation_trigger] if val is not None else []) \
            + ([opts.checkpoint_trigger] if opts.checkpoint_dir is not None else [])
        schedule = self.optimizer.schedule
        if self._jvm is None or not self._jvm.several_per_job or limit < 2 \
                or self.state.iteration < self._one_job_each_until \
                or not all(t.predictable for t in triggers) or (schedule is not None and schedule.state_dict()):
            return []
        state = dataclasses.replace(self.state)
        i, plan = self._iteration_in_epoch, []
        while len(plan) < limit:
            plan.append((state.epoch, i, state.iteration, float(self.optimizer.lr_at(
                iteration=state.iteration, epoch=state.epoch, metric=state.score))))
            state.iteration, i = state.iteration + 1, i + 1
            state.epoch_end = i == len(sizes)
            if state.epoch_end:
                state.epoch, i = state.epoch + 1, 0
            if any(t(state) for t in triggers) or state.iteration - snapshot_iteration >= opts.snapshot_interval:
                break
        return plan

    def _run_planned(self, plan, sizes, bar) -> bool:
        """Run ``plan`` (:meth:`_plan`) in one job on the JVM; False if it could not run (then :meth:`_step` runs
        one iteration). Records every iteration that ran; raises :class:`TrainingDivergedError` at a non-finite
        one (the iterations before it are kept)."""
        (e0, i0, g0, _), (e1, i1, g1, _) = plan[0], plan[-1]
        self._sc.setJobDescription(f"sparkdl fit: iterations {g0 + 1}-{g1 + 1} (epoch {e0 + 1}, iteration "
                                   f"{i0 + 1} to epoch {e1 + 1}, iteration {i1 + 1}/{len(sizes)})")
        t0 = time.perf_counter()
        results, missed = self._jvm.run(plan)
        if missed:
            log.info("sparkdl: iteration %d reran on the full partitions (no executor-local copy yet)",
                     plan[len(results)][2] + 1)
        if not results:
            if self._jvm.refused:  # no slot for every task, fan-in bounds: ask again after a snapshot interval
                self._one_job_each_until = self.state.iteration + self.options.snapshot_interval
            return False
        seconds = (time.perf_counter() - t0) / len(results)
        self._model_stale = True
        for (epoch, i, g, lr), (ok, loss_sum, norm_sum, _) in zip(plan, results):
            loss = loss_sum / norm_sum if norm_sum > 0 else math.nan
            if not ok:
                self._raise_diverged(g, epoch, loss)
            self._record(loss, epoch, i, g, lr, sizes, None, bar, seconds)
        return True

    # ------------------------------------------------------------------ one iteration
    def _step(self, data, epoch, i, sizes, bar):
        sc = self._sc
        g = self.state.iteration
        lr = self._learning_rate()
        if self._connect is not None:
            t0 = time.perf_counter()
            results = self._connect.step(self.model.flat_parameters, self.model.flat_buffers, epoch, i, g, lr)
            self._apply_results(results, epoch, i, g, lr, sizes, t0, bar)
            return
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

    def _record(self, loss, epoch, i, g, lr, sizes, t0, bar, seconds=None):
        """Advance the counters and log one finished iteration (of ``seconds``, else since ``t0``)."""
        samples = int(sizes[i])
        self.samples_seen += samples
        if seconds is None:
            seconds = time.perf_counter() - t0
        # the time an iteration takes, for the length of the next multi-iteration job (iterations_per_job)
        self._seconds_per_iteration = seconds
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

    def _after_iteration(self, val, bar):
        opts = self.options
        if val is not None and opts.validation_trigger(self.state):
            self._sync_model()
            scores = evaluate(self.model, val, opts.validation_metrics, batch_size=opts.validation_batch_size,
                              integer_labels=opts.num_classes is not None or val.label_kind == "i")
            self.state.score = float(scores[opts.validation_metrics[0].name])
            self.summary.add_validation({"iteration": self.state.iteration, "epoch": self.state.epoch, **scores})
            line = f"epoch {self.state.epoch} iteration {self.state.iteration}: " + \
                ", ".join(f"{k}={v:.4f}" for k, v in scores.items())
            if bar is not None:
                bar.write(line)
            else:
                log.info(line)
        if opts.checkpoint_dir is not None and opts.checkpoint_trigger(self.state):
            self._sync_model()
            self._save_checkpoint()

    def _progress_bar(self, iterations_per_epoch):
        if not self.options.progress:
            return None
        from tqdm.auto import tqdm
        # Spark's "[Stage N:>" lines would overwrite this bar (a Connect client shows none)
        if self._sc is not None and stop_console_progress_bar(self._sc):
            log.info("sparkdl: stopped Spark's console progress bar for this session (spark.ui.showConsoleProgress); "
                     "sparkdl shows its own")
        total = None
        t = self.options.end_trigger
        if isinstance(t, MaxEpoch):
            total = t.max_epoch * iterations_per_epoch
        elif hasattr(t, "max_iteration"):
            total = t.max_iteration
        return tqdm(total=total, initial=self.state.iteration, unit="it", desc="sparkdl fit", dynamic_ncols=True)


def _task_slots(sc) -> int:
    """Gradient tasks per iteration over executor-local copies: the application's task slots."""
    return max(1, sc.defaultParallelism // _task_cpus(sc))


def _task_cpus(sc) -> int:
    try:
        return max(1, int(sc.getConf().get("spark.task.cpus", "1")))
    except ValueError:
        return 1


