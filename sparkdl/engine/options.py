"""The options of :class:`~sparkdl.engine.DistributedTrainer`, validated together in one small dataclass.

``DistributedTrainer(model, loss, optimizer, batch_size=..., end_trigger=..., ...)`` builds a
:class:`TrainerOptions` from its keyword arguments; ``DistributedTrainer(model, loss, optimizer, options)`` takes
one directly (keyword arguments given as well replace its fields). The meaning of every option is documented on
:class:`~sparkdl.engine.DistributedTrainer`, which also reads and sets each as an attribute of the same name
(:func:`option_attributes`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sparkdl.engine.triggers import EveryEpoch, MaxEpoch, Trigger

__all__ = ["TrainerOptions", "resolve_options", "option_attributes"]


@dataclass(kw_only=True)
class TrainerOptions:
    """Every option of :class:`~sparkdl.engine.DistributedTrainer` but the model, loss and optimizer.

    Validated on construction (``__post_init__``); ``None`` triggers become their defaults (``end_trigger``:
    ``MaxEpoch(1)``; ``validation_trigger`` and ``checkpoint_trigger``: ``EveryEpoch()``). Field meanings,
    types and defaults are those of the trainer's keyword arguments of the same names.

    Raises
    ------
    TypeError
        If ``end_trigger`` is not a Trigger or ``jvm_reduce`` is not None, True or False.
    ValueError
        If ``batch_size`` or ``snapshot_interval`` is not an int >= 1, ``max_recoveries`` not an int >= 0,
        ``num_blocks`` or ``iterations_per_job`` neither None nor an int >= 1, or ``compress`` neither None nor
        ``'fp16'``.
    """

    batch_size: int
    end_trigger: Trigger | None = None
    seed: int = 0
    num_blocks: int | None = None
    compress: str | None = None
    shuffle: bool = True
    validation_trigger: Trigger | None = None
    validation_metrics: list = dataclasses.field(default_factory=list)
    validation_batch_size: int = 1024
    checkpoint_dir: str | None = None
    checkpoint_trigger: Trigger | None = None
    keep_checkpoints: int = 3
    log_dir: str | None = None
    num_classes: int | None = None
    threads_per_task: int | None = None
    progress: bool = True
    snapshot_interval: int = 50
    max_recoveries: int = 3
    local_data_copy: bool = True
    jvm_reduce: bool | None = None
    iterations_per_job: int | None = None

    def __post_init__(self):
        for name in ("batch_size", "snapshot_interval"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"DistributedTrainer: {name} must be an int >= 1, got {v!r}")
        v = self.max_recoveries
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"DistributedTrainer: max_recoveries must be an int >= 0, got {v!r}")
        for name in ("num_blocks", "iterations_per_job"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"DistributedTrainer: {name} must be None or an int >= 1, got {v!r}")
        if self.compress not in (None, "fp16"):
            raise ValueError(f"DistributedTrainer: compress must be None or 'fp16', got {self.compress!r}")
        if self.end_trigger is not None and not isinstance(self.end_trigger, Trigger):
            raise TypeError(f"DistributedTrainer: end_trigger must be a Trigger, got {type(self.end_trigger).__name__}")
        if self.jvm_reduce not in (None, True, False):
            raise TypeError(f"DistributedTrainer: jvm_reduce must be None, True or False, got {self.jvm_reduce!r}")
        self.end_trigger = self.end_trigger or MaxEpoch(1)
        self.validation_trigger = self.validation_trigger or EveryEpoch()
        self.checkpoint_trigger = self.checkpoint_trigger or EveryEpoch()
        self.seed, self.shuffle = int(self.seed), bool(self.shuffle)
        self.validation_metrics = list(self.validation_metrics)
        self.local_data_copy = bool(self.local_data_copy)


_NAMES = tuple(f.name for f in dataclasses.fields(TrainerOptions))


def resolve_options(options: TrainerOptions | None, keywords: dict) -> TrainerOptions:
    """The trainer's options: ``options`` with the fields named in ``keywords`` replaced, or, without
    ``options``, a :class:`TrainerOptions` of ``keywords`` (which must then name ``batch_size``).

    Raises
    ------
    TypeError
        If ``options`` is not a TrainerOptions, a keyword names no option, or ``batch_size`` is missing.
    """
    if options is not None and not isinstance(options, TrainerOptions):
        raise TypeError(f"DistributedTrainer: options must be a TrainerOptions, got {type(options).__name__}")
    unknown = sorted(set(keywords) - set(_NAMES))
    if unknown:
        raise TypeError(f"DistributedTrainer: unknown keyword argument(s) {unknown}; the options are "
                        f"{', '.join(_NAMES)}")
    if options is None:
        if "batch_size" not in keywords:
            raise TypeError("DistributedTrainer: batch_size (the global mini-batch size) is required, as a "
                            "keyword argument or in options")
        return TrainerOptions(**keywords)
    return dataclasses.replace(options, **keywords)


def _option_property(name: str) -> property:
    def get(self):
        return getattr(self.options, name)

    def set_(self, value):
        self.options = dataclasses.replace(self.options, **{name: value})  # validated with the other options
    return property(get, set_, doc=f"The ``{name}`` option (``options.{name}``).")


def option_attributes(cls):
    """Class decorator: every :class:`TrainerOptions` field becomes an attribute of ``cls``'s instances, read from
    and written to their ``options`` (``trainer.seed``, ``trainer.max_recoveries = 5``); a new value is validated
    as a TrainerOptions is (TypeError, ValueError)."""
    for name in _NAMES:
        setattr(cls, name, _option_property(name))
    return cls
