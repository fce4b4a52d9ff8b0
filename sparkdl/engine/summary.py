"""Training summary: per-iteration loss, learning rate and throughput plus validation metrics, readable
from Python and optionally written as TensorBoard event files (through ``tensorboardX``)."""
from __future__ import annotations

from dataclasses import dataclass, field

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
        ``validation/<metric>``).
    """

    log_dir: str | None = None
    iterations: list = field(default_factory=list)
    validations: list = field(default_factory=list)

    def __post_init__(self):
        self._writer = None
        if self.log_dir is not None:
            from tensorboardX import SummaryWriter
            self._writer = SummaryWriter(self.log_dir)

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

    def close(self) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_writer"] = None
        return state
