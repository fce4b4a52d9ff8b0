"""Errors raised inside training tasks, carried back to the driver as themselves.

Spark reports a failed Python task to the driver as a JVM exception whose text holds the worker's
traceback, after retrying the task (``spark.task.maxFailures``). For the engine, a *transient* failure (a
lost executor, a missing shuffle block, a killed task) is worth replaying from its last snapshot; an error
raised by the computation itself — a layer, a loss, the optimizer, a bad row, our own checks — is
deterministic: replaying it would fail again, and the caller wants the original exception.

So the computing part of a task runs inside :func:`task_context`, which turns any exception into a
:class:`TaskError` whose message carries an encoded :class:`TaskErrorReport` (exception type, message,
the executor's traceback, partition, stage, epoch and iteration). :func:`original_error` finds that report
in the text of the driver-side exception and rebuilds an exception of the original type whose message
names where it happened. Exceptions raised outside :func:`task_context` (Spark's own, a test's fault
hook) stay transient.

The report is text that reached the driver from an executor, so it is read as untrusted data: its decompressed
size is capped (:data:`MAX_REPORT_BYTES`), and the original type is rebuilt only when its module is already
imported on the driver (builtins, sparkdl's own errors, the user's loaded code): the driver imports no module a
report names. Any other type becomes a ``RuntimeError`` carrying the type's name and the original message.
"""
from __future__ import annotations

import base64
import json
import re
import sys
import traceback
import zlib
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["TaskError", "TaskErrorReport", "TrainingDivergedError", "task_context", "original_error",
           "MARKER", "MAX_REPORT_BYTES"]

#: Prefix of the encoded report in a :class:`TaskError` message.
MARKER = "sparkdl-task-error:"
_ENCODED = re.compile(re.escape(MARKER) + r"([A-Za-z0-9+/=]+)")
_SHOWN_ROWS = 32
#: Largest decompressed report read on the driver. Reports of :func:`task_context` stay below it (message and
#: traceback cut to :data:`_MAX_TEXT` characters, rows to :data:`_MAX_ROWS`), so a larger one is no report of ours.
MAX_REPORT_BYTES = 4 << 20
_MAX_TEXT, _MAX_ROWS = 256 << 10, 100_000


class TrainingDivergedError(FloatingPointError):
    """The loss, a gradient or the updated weights became NaN or infinite; training stopped (checkpoints kept)."""


@dataclass
class TaskErrorReport:
    """What the driver needs to re-raise an error from a task."""

    type_module: str
    type_name: str
    message: str
    traceback: str
    stage: str  # "gradient" (stage 1) or "reduce" (stage 2)
    partition: int  # data partition (stage 1) or AllReduce block (stage 2)
    epoch: int  # 0-based
    iteration: int  # 0-based global iteration
    rows: tuple | None = None  # partition rows of the batch, in batch order (stage 1)

    def where(self) -> str:
        what = f"data partition {self.partition}" if self.stage == "gradient" else f"AllReduce block {self.partition}"
        text = f"raised in a training task on {what}, epoch {self.epoch + 1}, iteration {self.iteration + 1}"
        if self.rows is not None:
            shown = ", ".join(map(str, self.rows[:_SHOWN_ROWS])) + (", ..." if len(self.rows) > _SHOWN_ROWS else "")
            text += f"; batch row j is row rows[j] of the partition, rows = [{shown}]"
        return text


class TaskError(RuntimeError):
    """Raised inside a task in place of the original exception; its message encodes a :class:`TaskErrorReport`."""


@contextmanager
def task_context(stage: str, partition: int, epoch: int, iteration: int, rows=None):
    """Run a task's computation; an exception leaves it as a :class:`TaskError` carrying its report.

    Parameters
    ----------
    stage : {'gradient', 'reduce'}
    partition : int
    epoch, iteration : int
        0-based epoch and global iteration.
    rows : array of int, optional
        The partition rows that form the batch (named in the message, so a row index reported by a loss
        can be traced back to the data).
    """
    try:
        yield
    except Exception as e:
        cls = type(e)
        report = TaskErrorReport(cls.__module__, cls.__qualname__, str(e)[:_MAX_TEXT],
                                 traceback.format_exc()[-_MAX_TEXT:], stage, int(partition), int(epoch),
                                 int(iteration),
                                 None if rows is None else tuple(int(r) for r in np.asarray(rows)[:_MAX_ROWS]))
        encoded = base64.b64encode(zlib.compress(json.dumps(asdict(report)).encode())).decode("ascii")  # data, not pickle
        raise TaskError(f"{cls.__name__}: {e} ({report.where()}) {MARKER}{encoded}") from e


def _inflate(data: bytes) -> bytes:
    """zlib-decompress at most :data:`MAX_REPORT_BYTES` (a larger report is refused, not read)."""
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, MAX_REPORT_BYTES)
    if inflater.unconsumed_tail or not inflater.eof:
        raise ValueError(f"task error report over {MAX_REPORT_BYTES} bytes or truncated")
    return out


def _loaded_exception_type(module: str, qualname: str):
    """The exception class ``module.qualname`` if its module is already imported (never imports), else None."""
    obj = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) and issubclass(obj, Exception) else None


def _report(exc: BaseException) -> TaskErrorReport | None:
    seen, e = set(), exc
    while e is not None and id(e) not in seen:  # the text may sit on the exception or on one it wraps
        seen.add(id(e))
        found = _ENCODED.findall(str(e))
        if found:
            try:
                fields = json.loads(_inflate(base64.b64decode(found[-1])))
                rows = fields.pop("rows")
                return TaskErrorReport(**fields, rows=None if rows is None else tuple(rows))
            except Exception:  # not a report of ours
                return None
        e = e.__cause__ or e.__context__
    return None


def original_error(exc: BaseException) -> BaseException | None:
    """The exception a task raised inside :func:`task_context`, rebuilt from the driver-side ``exc``.

    Returns an instance of the original type (a ``RuntimeError`` naming that type if its module is not already
    imported on the driver or it cannot be built from a message) whose message is the original one followed by the partition, epoch and iteration; the
    executor's traceback is attached as a note. ``None`` when ``exc`` carries no report (a transient
    failure).
    """
    report = _report(exc)
    if report is None:
        return None
    message = f"{report.message} ({report.where()})"
    err, cls = None, _loaded_exception_type(report.type_module, report.type_name)
    if cls is not None:
        try:
            err = cls(message)
        except Exception:  # a constructor that takes other arguments
            err = None
    if err is None:
        err = RuntimeError(f"{report.type_module}.{report.type_name}: {message}")
    if hasattr(err, "add_note"):
        err.add_note("Traceback on the executor:\n" + report.traceback.rstrip())
    return err
