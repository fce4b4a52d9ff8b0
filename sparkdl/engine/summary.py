"""Training summary: per-iteration loss, learning rate and throughput plus validation metrics, readable
from Python and optionally written as TensorBoard event files (through ``tensorboardX``).

A ``log_dir`` on a Hadoop file system (``hdfs://``, ``s3a://``, ...: see :mod:`sparkdl.io`) is written in a local
temporary directory and copied up by :meth:`TrainSummary.sync` (at every checkpoint) and at :meth:`close`.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field

from sparkdl.io._fs import LocalStorage, resolve

__all__ = ["TrainSummary"]


@dataclass
class TrainSummary:
    """What :meth:`DistributedTrainer.fit` records.

    Attributes
    ----------
    iterations : list of dict
        One per iteration: ``iteration`` (global, 1-based), ``epoch`` (1-based), ``loss`` (mean training loss
        of the global batch), ``lr``, ``samples``, ``seconds`` (wall time), ``samples_per_s``.
    validations : list of dict
        One per validation: ``iteration``, ``epoch`` and one key per metric name.
    log_dir : str or None
        TensorBoard directory (scalars ``train/loss``, ``train/lr``, ``train/samples_per_s``,
        ``validation/<metric>``). A local path, or a Hadoop URI (written locally, copied up by :meth:`sync`).
    """

    log_dir: str | None = None
    iterations: list = field(default_factory=list)
    validations: list = field(default_factory=list)

    def __post_init__(self):
        self._writer = self._remote = None
        if self.log_dir is not None:
            from tensorboardX import SummaryWriter
            storage, target = resolve(self.log_dir)
            local = target
            if not isinstance(storage, LocalStorage):
                self._remote = (storage, target, tempfile.mkdtemp(prefix="sparkdl-tensorboard-"))
                local = self._remote[2]
            self._writer = SummaryWriter(local)

    def add_iteration(self, record: dict) -> None:
        self.iterations.append(record)
        if self._writer is not None:
            step = record["iteration"]
            for key in ("loss", "lr", "samples_per_s"):
                self._writer.add_scalar(f"train/{key}", record[key], step)

    def add_validation(self, record: dict) -> None:
        self.validations.append(record)
        if self._writer is not None:
            for key, value in record.items():
                if key not in ("iteration", "epoch"):
                    self._writer.add_scalar(f"validation/{key}", value, record["iteration"])

    @property
    def loss(self) -> list[float]:
        """Training loss per iteration."""
        return [r["loss"] for r in self.iterations]

    def sync(self) -> None:
        """Copy the event files written so far up to a Hadoop ``log_dir`` (each replaced atomically); nothing for a
        local one."""
        if self._writer is not None and self._remote is not None:
            self._writer.flush()
            self._upload()

    def _upload(self) -> None:
        storage, target, local = self._remote
        for base, _, files in os.walk(local):
            rel = os.path.relpath(base, local)
            folder = target if rel == "." else storage.join(target, *rel.split(os.sep))
            storage.makedirs(folder)
            for name in sorted(files):
                with open(os.path.join(base, name), "rb") as f:
                    storage.write_bytes(storage.join(folder, name), f.read())

    def close(self) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            try:
                if self._remote is not None:
                    self._upload()
            finally:
                self._writer = None
                if self._remote is not None:
                    shutil.rmtree(self._remote[2], ignore_errors=True)
                    self._remote = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_writer"] = state["_remote"] = None
        return state
