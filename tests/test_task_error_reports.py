"""A task error report is text from an executor: the driver reads it as data, imports nothing it names and
decompresses at most MAX_REPORT_BYTES."""
import base64
import json
import sys
import zlib
from dataclasses import asdict

import pytest

from sparkdl.engine import task_errors
from sparkdl.engine.task_errors import MARKER, TaskError, TaskErrorReport, original_error, task_context


def _raised_in_task(exc):
    with pytest.raises(TaskError) as info:
        with task_context("gradient", 3, 0, 4, rows=[2, 0]):
            raise exc
    return RuntimeError(f"Py4JJavaError: Job aborted ... {info.value}")  # as the driver sees it


def _forged(type_module, type_name, message="boom", payload=None):
    report = TaskErrorReport(type_module, type_name, message, "Traceback ...", "gradient", 1, 0, 0)
    data = payload if payload is not None else json.dumps(asdict(report)).encode()
    return RuntimeError(f"task failed: {MARKER}{base64.b64encode(zlib.compress(data)).decode()}")


def test_builtin_and_loaded_types_are_rebuilt():
    err = original_error(_raised_in_task(KeyError("k")))
    assert type(err) is KeyError and "data partition 3, epoch 1, iteration 5" in str(err)
    err = original_error(_raised_in_task(task_errors.TrainingDivergedError("nan")))
    assert type(err) is task_errors.TrainingDivergedError


def test_a_module_named_by_a_report_is_never_imported(tmp_path, monkeypatch):
    """An importable module with a side effect, named by a forged report: the driver must not run it."""
    name = "sparkdl_test_module_that_must_not_be_imported"
    marker = tmp_path / "imported"
    (tmp_path / f"{name}.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Boom(Exception):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert name not in sys.modules
    err = original_error(_forged(name, "Boom"))
    assert not marker.exists() and name not in sys.modules
    assert type(err) is RuntimeError
    assert str(err).startswith(f"{name}.Boom: boom (raised in a training task on data partition 1")


def test_a_loaded_module_is_used_but_only_for_exception_classes():
    err = original_error(_forged("os", "system"))  # a function, not an exception type: never called
    assert type(err) is RuntimeError and str(err).startswith("os.system: boom")
    err = original_error(_forged("json", "JSONDecodeError"))  # needs other arguments: stays a RuntimeError
    assert type(err) is RuntimeError and "json.JSONDecodeError: boom" in str(err)


def test_decompression_is_capped():
    report = TaskErrorReport("builtins", "ValueError", "x" * (task_errors.MAX_REPORT_BYTES + 10), "", "gradient",
                             0, 0, 0)
    big = json.dumps(asdict(report)).encode()
    assert len(zlib.compress(big)) < 100_000  # a small message that would inflate past the cap
    assert original_error(_forged("builtins", "ValueError", payload=big)) is None  # not read: transient
    small = _forged("builtins", "ValueError", "fits")
    assert type(original_error(small)) is ValueError


def test_reports_of_huge_errors_stay_under_the_cap():
    exc = _raised_in_task(ValueError("y" * (task_errors.MAX_REPORT_BYTES * 2)))
    err = original_error(exc)
    assert type(err) is ValueError and str(err).startswith("y" * 1000)
    with pytest.raises(TaskError) as info:
        with task_context("gradient", 0, 0, 0, rows=range(10 ** 6)):
            raise ValueError("many rows")
    assert "rows = [0, 1, 2" in str(original_error(RuntimeError(str(info.value))))
