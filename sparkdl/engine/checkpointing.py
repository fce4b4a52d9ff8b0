"""Checkpoint and resume for :class:`DistributedTrainer`, on top of :mod:`sparkdl.io.checkpoint`.

A training checkpoint holds the model (parameters and buffers), the optimizer's configuration and the
state of every shard (gathered from the executors only when a checkpoint is written), the schedule's
state and the counters (epoch, global iteration, iteration within the epoch). Resuming with a different
number of AllReduce blocks re-shards element-wise state. ``checkpoint_dir`` is a local path or a URI of the
session's Hadoop file systems (see :mod:`sparkdl.io`).
"""
from __future__ import annotations

import numpy as np

from sparkdl.engine.allreduce import block_bounds
from sparkdl.io._fs import resolve
from sparkdl.io.checkpoint import load_checkpoint, save_checkpoint

__all__ = ["check_checkpoint_dir", "save_training_checkpoint", "restore_training_checkpoint", "reshard_states"]


def check_checkpoint_dir(checkpoint_dir) -> None:
    """Fail before training, not at the first checkpoint, when ``checkpoint_dir`` is a URI that this process cannot
    reach (:class:`sparkdl.io.FileSystemUnavailableError`) or a scheme the session's Hadoop configuration does not
    know (``OSError``)."""
    if checkpoint_dir is not None:
        storage, root = resolve(checkpoint_dir)
        storage.exists(root)


def save_training_checkpoint(trainer, states: list) -> str:
    """Write a checkpoint of ``trainer`` with the shard ``states`` (one per block, in block order)."""
    bounds = trainer._bounds
    opt_state = {(int(bounds[k]), int(bounds[k + 1])): s for k, s in enumerate(states)}
    schedule = getattr(trainer.optimizer, "schedule", None)
    if trainer.summary is not None:
        trainer.summary.sync()  # a Hadoop log_dir holds the event files up to every checkpoint
    return save_checkpoint(
        trainer.options.checkpoint_dir, trainer.model, iteration=trainer.state.iteration, epoch=trainer.state.epoch,
        samples_seen=int(trainer.samples_seen), optimizer=trainer.optimizer, optimizer_state=opt_state,
        schedule=schedule,
        extras={"iteration_in_epoch": trainer._iteration_in_epoch, "seed": trainer.options.seed,
                "batch_size": trainer.options.batch_size, "score": trainer.state.score},
        keep_last=trainer.options.keep_checkpoints)


def reshard_states(states_by_range: dict, new_bounds: np.ndarray) -> list:
    """Re-cut shard states saved for ranges ``{(lo, hi): state}`` into the blocks of ``new_bounds``.

    Arrays whose length equals their shard's size are concatenated and re-sliced; everything else (the
    step count, scalars) is taken from the first shard (all shards agree on it).
    """
    ranges = sorted(states_by_range)
    first = states_by_range[ranges[0]]
    if [r for r in ranges] == [(int(new_bounds[k]), int(new_bounds[k + 1])) for k in range(len(new_bounds) - 1)]:
        return [states_by_range[r] for r in ranges]
    merged = {}
    for key, value in first.items():
        if isinstance(value, np.ndarray) and value.ndim == 1 and len(value) == ranges[0][1] - ranges[0][0]:
            merged[key] = np.concatenate([states_by_range[r][key] for r in ranges])
        else:
            merged[key] = value
    out = []
    for k in range(len(new_bounds) - 1):
        lo, hi = int(new_bounds[k]), int(new_bounds[k + 1])
        out.append({key: (v[lo:hi].copy() if key in first and isinstance(first[key], np.ndarray) and
                          isinstance(v, np.ndarray) and v.ndim == 1 and len(v) == new_bounds[-1] else v)
                    for key, v in merged.items()})
    return out


def restore_training_checkpoint(trainer, num_blocks: int) -> list:
    """Load the latest checkpoint of ``trainer.options.checkpoint_dir`` into the trainer; return shard states.

    Raises
    ------
    FileNotFoundError
        If there is no checkpoint to resume from.
    ValueError
        If the checkpoint's model does not have the trainer's parameter layout, or it was written with another
        seed or batch size.
    """
    if trainer.options.checkpoint_dir is None:
        raise ValueError("DistributedTrainer.fit(resume=True) needs checkpoint_dir")
    ckpt = load_checkpoint(trainer.options.checkpoint_dir)
    run = {"seed": trainer.options.seed, "batch_size": trainer.options.batch_size}
    saved = {k: ckpt.extras.get(k) for k in run}
    if saved != run:
        raise ValueError(f"cannot resume from {ckpt.path}: it was written by a run with {saved}, this run has {run}; "
                         "the continuation of a run needs the same seed and batch size")
    saved = ckpt.model.parameter_layout()
    own = trainer.model.parameter_layout()
    if [(e.name, e.shape) for e in saved] != [(e.name, e.shape) for e in own]:
        raise ValueError(f"cannot resume from {ckpt.path}: its model's parameters {saved.names()} differ from "
                         f"the trainer's {own.names()}")
    trainer.model.load_state_dict(ckpt.model.state_dict())
    trainer.state.iteration, trainer.state.epoch = ckpt.iteration, ckpt.epoch
    trainer.samples_seen = int(ckpt.samples_seen)
    trainer.state.score = ckpt.extras.get("score")
    trainer._iteration_in_epoch = int(ckpt.extras.get("iteration_in_epoch", 0))
    schedule = getattr(trainer.optimizer, "schedule", None)
    if schedule is not None and ckpt.schedule_state is not None:
        schedule.load_state_dict(ckpt.schedule_state)
    bounds = block_bounds(trainer.model.num_parameters(), num_blocks)
    return reshard_states(ckpt.optimizer_state, bounds)
