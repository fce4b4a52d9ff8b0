"""Recovery of a fit: driver-side snapshots replayed after a lost executor, and checkpoints to resume from.

A lost executor takes the optimizer state cached on it (:mod:`sparkdl.engine.shards`) with it. Every
``snapshot_interval`` iterations the driver therefore keeps a :class:`Snapshot` (weights, buffers, every shard's
state, schedule state and counters); a transient Spark failure (:func:`is_spark_failure`) restores the last one
and the iterations since are replayed, bit-identically, since every iteration is deterministic. An error raised by
the computation inside a task is deterministic too: it is never replayed and reaches the caller as itself
(:func:`sparkdl.engine.task_errors.original_error`). Checkpoints (:mod:`sparkdl.engine.checkpointing`) hold the
same state on disk for ``fit(resume=True)``.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from sparkdl.engine.checkpointing import restore_training_checkpoint, save_training_checkpoint
from sparkdl.engine.task_errors import original_error

__all__ = ["Snapshot", "Recovery", "is_spark_failure"]

log = logging.getLogger("sparkdl.engine")


@dataclass
class Snapshot:
    """The driver's copy of a fit's state after ``iteration`` global iterations."""

    iteration: int
    epoch: int
    iteration_in_epoch: int
    weights: np.ndarray
    buffers: np.ndarray
    states: list
    schedule_state: dict | None
    samples_seen: int


def is_spark_failure(e: BaseException) -> bool:
    """Errors raised by a failed Spark job (executor lost, block missing), as opposed to driver bugs."""
    name = type(e).__name__
    return name in ("Py4JJavaError", "Py4JError", "PythonException", "SparkRuntimeException") or \
        "SparkException" in str(e)[:2000] or "Job aborted" in str(e)[:2000]


class Recovery:
    """Mixin of :class:`~sparkdl.engine.DistributedTrainer`: snapshots, replay and checkpoints.

    Uses the trainer's ``model``, ``optimizer``, ``options``, ``state``, ``samples_seen``, ``summary``,
    ``_iteration_in_epoch`` and its shard states (:class:`sparkdl.engine.shards.ShardStates`).
    """

    def _take_snapshot(self, states=None) -> Snapshot:
        self._sync_model()
        schedule = getattr(self.optimizer, "schedule", None)
        return Snapshot(self.state.iteration, self.state.epoch, self._iteration_in_epoch,
                        self.model.flat_parameters.copy(),
                        self.model.flat_buffers.copy(), states if states is not None else self._collect_states(),
                        schedule.state_dict() if schedule is not None and hasattr(schedule, "state_dict") else None,
                        self.samples_seen)

    def _restore_snapshot(self, snap: Snapshot):
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

    def _can_replay(self, e: Exception, recoveries: int) -> bool:
        """Whether the failed iteration's error ``e`` is a transient Spark failure to replay (after ``recoveries``
        replays so far, at most ``max_recoveries``). An error raised by the computation in a task is raised here
        as itself (deterministic: never replayed), the model keeping the last good weights."""
        error = original_error(e)
        if error is not None:
            self._sync_model()
            raise error from None
        return recoveries < self.options.max_recoveries and is_spark_failure(e)

    def _replay(self, snapshot: Snapshot, e: Exception, recovery: int):
        """Restore ``snapshot``, from which the loop replays the iterations since (recovery number ``recovery``)."""
        log.warning("sparkdl: iteration %d failed (%s); replaying from iteration %d (recovery %d/%d)",
                    self.state.iteration + 1, type(e).__name__, snapshot.iteration, recovery,
                    self.options.max_recoveries)
        self._restore_snapshot(snapshot)

    def _save_checkpoint(self):
        save_training_checkpoint(self, self._collect_states())

    def _restore_checkpoint(self, K):
        return restore_training_checkpoint(self, K)
