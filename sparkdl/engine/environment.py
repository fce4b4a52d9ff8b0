"""The executor environment check: before the first training or inference job of an application, one small
job asks every executor's Python workers for their Python, numpy, numba, pyarrow and sparkdl versions, numba
threading layer and numpy's BLAS kernel, and compares them with the driver's.

What must match, because objects pickled on the driver are unpickled on the executors:

- sparkdl exactly (the layers, optimizers and task functions shipped to the executors are sparkdl classes);
- Python ``major.minor`` (pickled code objects do not cross minor versions);
- numpy's major version (numpy 2 pickles arrays through modules numpy 1 does not have).

A difference there raises :class:`ExecutorEnvironmentError` with a table of driver vs executor versions. Other
differences (numba, pyarrow, the threading layer) change no result; a numba or pyarrow difference is logged as
a warning with the same table. So is a different BLAS kernel (library, version and the CPU family OpenBLAS chose
its kernels for): it may round GEMMs differently, so the executors' bits may differ from the driver's
single-process reference.

The job of a DataFrame stage (``transform``) runs through a SQL Python UDF, the others' through an RDD: Spark
keeps separate Python workers (a separate daemon) for the two, so the check warms the very workers the stage's
first job then uses (their imports of numpy, numba, pyarrow and sparkdl), instead of starting a second set.

The check runs once per application (per ``SparkContext.applicationId``); its outcome, error included, is
remembered in :data:`_RESULTS`. Testing seam: :func:`collect_reports` is the only function that runs a Spark job;
tests replace it (``monkeypatch.setattr(environment, "collect_reports", ...)``) to simulate executors with other
versions, and clear :data:`_RESULTS` to check again.
"""
from __future__ import annotations

import dataclasses
import logging

from sparkdl.engine.worker_python import local_python_advice

__all__ = ["EnvironmentReport", "ExecutorEnvironmentError", "driver_report", "collect_reports",
           "compare_environments", "check_executor_environment"]

log = logging.getLogger("sparkdl.engine")

#: The versions reported, in table order.
FIELDS = ("python", "numpy", "numba", "pyarrow", "sparkdl", "threading_layer", "blas")

#: Most tasks of the check job (one per core up to this many: enough to reach every executor of a cluster).
MAX_TASKS = 256

#: applicationId -> None (environments agree) or the ExecutorEnvironmentError raised.
_RESULTS: dict = {}


class ExecutorEnvironmentError(RuntimeError):
    """The executors run other versions of sparkdl, Python or numpy than the driver."""


@dataclasses.dataclass(frozen=True)
class EnvironmentReport:
    """Versions seen by one Python process (``None``: the package cannot be imported there)."""

    host: str
    python: str
    numpy: str | None
    numba: str | None
    pyarrow: str | None
    sparkdl: str | None
    threading_layer: str | None
    blas: str | None = None


def _reporter():
    """A function returning this process's report as a tuple in :class:`EnvironmentReport` field order.

    Nested and free of module-level references, so cloudpickle ships it by value: it runs on an executor
    that lacks sparkdl or has another version of it."""
    def report(_=None):
        import importlib
        import platform
        import socket
        versions = []
        for name in ("numpy", "numba", "pyarrow", "sparkdl"):
            try:
                versions.append(importlib.import_module(name).__version__)
            except ImportError:
                versions.append(None)
        layer = blas = None
        if versions[-1] is not None:
            from sparkdl.config import threading_layer
            layer = threading_layer()
        try:
            import numpy
            from threadpoolctl import threadpool_info
            numpy.ones(1) @ numpy.ones(1)  # noqa: B018  (numpy's BLAS is loaded)
            info = sorted((p for p in threadpool_info() if p["user_api"] == "blas"),
                          key=lambda p: "numpy" not in p["filepath"])  # numpy's own first
            if info:
                blas = f"{info[0]['internal_api']} {info[0]['version']} {info[0].get('architecture', '')}".strip()
        except ImportError:
            pass
        return (socket.gethostname(), platform.python_version(), *versions, layer, blas)
    return report


def driver_report() -> EnvironmentReport:
    """The driver's :class:`EnvironmentReport`."""
    return EnvironmentReport(*_reporter()())


def _sql_reports(session, n: int) -> set:
    """The reports of one SQL job of ``n`` tasks, through a Python UDF (as tuples)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, StringType
    report = _reporter()

    def strings(i):  # a closure over report only: shipped by value like it
        return [None if v is None else str(v) for v in report(i)]
    check = F.udf(strings, ArrayType(StringType()), useArrow=False)  # pickled rows: needs no pyarrow there
    rows = session.range(0, n, 1, n).select(check("id")).collect()
    return {tuple(r[0]) for r in rows}


def collect_reports(sc, session=None) -> list[EnvironmentReport]:
    """The distinct reports of the Python workers reached by one job of ``min(defaultParallelism, MAX_TASKS)``
    tasks (one small job; the testing seam of this module): an RDD job, or with ``session`` (a SparkSession) a
    SQL job through a Python UDF, which reaches the Python workers of DataFrame stages."""
    if sc is None:  # Spark Connect: no SparkContext, no job description
        from sparkdl.engine.connect_session import default_parallelism
        rows = _sql_reports(session, max(1, min(default_parallelism(session), MAX_TASKS)))
        return [EnvironmentReport(*row) for row in sorted(rows, key=lambda r: tuple(map(str, r)))]
    n = max(1, min(int(sc.defaultParallelism), MAX_TASKS))
    previous = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription("sparkdl: executor environment check")
    try:
        rows = _sql_reports(session, n) if session is not None else set(
            sc.parallelize(range(n), n).map(_reporter()).collect())
    finally:
        sc.setJobDescription(previous)
    return [EnvironmentReport(*row) for row in sorted(rows, key=lambda r: tuple(map(str, r)))]


def _major_minor(v: str | None):
    return tuple(v.split(".")[:2]) if v else None


def _major(v: str | None):
    return v.split(".")[0] if v else None


#: field -> (what must agree, key compared) for differences that break pickles between driver and executors.
_MUST_MATCH = {"sparkdl": ("the same version", lambda v: v),
               "python": ("the same major.minor version", _major_minor),
               "numpy": ("the same major version", _major)}


def _table(driver: EnvironmentReport, executors, flags) -> str:
    cols = [("", list(FIELDS)), ("driver", [str(getattr(driver, f)) for f in FIELDS])]
    for r in executors:
        cols.append((f"executor {r.host}", [str(getattr(r, f)) for f in FIELDS]))
    cols.append(("", [flags.get(f, "") for f in FIELDS]))
    widths = [max(len(h), *(len(v) for v in vals)) for h, vals in cols]
    lines = ["  ".join(h.ljust(w) for (h, _), w in zip(cols, widths)).rstrip()]
    for i in range(len(FIELDS)):
        lines.append("  ".join(vals[i].ljust(w) for (_, vals), w in zip(cols, widths)).rstrip())
    return "\n".join(lines)


def compare_environments(driver: EnvironmentReport, executors) -> tuple[str | None, str | None]:
    """``(error, warning)`` messages (``None`` when there is nothing to say) for the executors' reports."""
    executors = list(executors)
    flags = {}
    for field, (what, key) in _MUST_MATCH.items():
        if any(getattr(r, field) is None or key(getattr(r, field)) != key(getattr(driver, field)) for r in executors):
            missing = any(getattr(r, field) is None for r in executors)
            flags[field] = f"<- must be {what}" + (" (None: not installed)" if missing else "")
    if flags:
        return (f"the executors' Python environment does not match the driver's:\n{_table(driver, executors, flags)}"
                "\nInstall the driver's versions on every executor (the same requirements with pip on each node, or "
                "a packed environment shipped with spark.archives and spark.pyspark.python)."), None
    for field in ("numba", "pyarrow"):
        if any(getattr(r, field) != getattr(driver, field) for r in executors):
            flags[field] = "<- differs (results are not affected)"
    if any(r.blas != driver.blas for r in executors):
        flags["blas"] = "<- differs (GEMMs may round differently: bits may differ from the driver's)"
    if flags:
        return None, f"the executors' package versions differ from the driver's:\n{_table(driver, executors, flags)}"
    return None, None


def check_executor_environment(sc, session=None) -> None:
    """Compare the executors' environment with the driver's, once per application (through the Python workers
    of SQL jobs when ``session``, a SparkSession, is given: see :func:`collect_reports`). On Spark Connect
    ``sc`` is None and ``session`` the Connect session.

    On a local master, whose workers may start another interpreter than this one (``PYSPARK_PYTHON`` unset and
    another ``python3`` on the PATH), that is checked first, without a Spark job
    (:func:`sparkdl.engine.worker_python.local_python_advice`): an interpreter that cannot run sparkdl's tasks
    raises at once with the exact fix (``PYSPARK_PYTHON=<this interpreter>``), another one that can is a warning.

    Raises
    ------
    ExecutorEnvironmentError
        If sparkdl, Python (major.minor) or numpy (major) differ between the driver and an executor, or sparkdl
        is missing on an executor; the message holds a table of driver vs executor versions. On a local master
        whose workers would start such an interpreter: before any job, with the line that fixes it.
    """
    key = sc.applicationId if sc is not None else f"connect:{session.conf.get('spark.app.id')}"
    if key not in _RESULTS:
        advice, fatal = local_python_advice(sc, session)  # before any job: a local master's workers' Python
        if fatal:
            _RESULTS[key] = ExecutorEnvironmentError(advice)
            raise ExecutorEnvironmentError(advice)
        if advice:
            log.warning("sparkdl: %s", advice)
        error, warning = compare_environments(driver_report(), collect_reports(sc, session))
        if warning:
            log.warning("sparkdl: %s", warning)
        if error and advice:
            error = f"{error}\n{advice}"
        _RESULTS[key] = ExecutorEnvironmentError(error) if error else None
    if _RESULTS[key] is not None:
        raise ExecutorEnvironmentError(*_RESULTS[key].args)

