"""Which Python a local master's workers start, checked before any Spark job.

On a local master (``local[...]``, ``local-cluster[...]``) every Python worker runs on this machine with the
interpreter the SparkContext was given when it started: ``PYSPARK_PYTHON``, else the first ``python3`` on the
PATH (SQL jobs: ``spark.sql.execution.pyspark.python`` if set). Run with a virtual environment's ``python`` that
was not activated, that is the system's ``python3``, without the environment's packages. This module tells, with
one short subprocess of that interpreter and no Spark job, whether it is the driver's environment; when it is not,
the fix is ``PYSPARK_PYTHON=<this interpreter>`` (sessions :func:`sparkdl.engine.get_or_create_session` creates on
a local master set it themselves), not the cluster advice of :mod:`sparkdl.engine.environment`.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

__all__ = ["worker_python", "describe_python", "local_python_advice"]

#: Printed by :func:`describe_python` in the other interpreter: its environment and the versions that must match
#: (read from the installed packages' metadata, without importing them).
_DESCRIBE = """import json, sys
sys.path[:] = [p for p in sys.path if p]  # not the current directory (a source checkout's egg-info)
from importlib import metadata
def v(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
print(json.dumps({"prefix": sys.prefix, "python": "%d.%d" % sys.version_info[:2], "numpy": v("numpy"),
                  "sparkdl": v("sparkdl")}))
"""

#: What must agree for the driver's pickles to load in the workers (as :mod:`sparkdl.engine.environment` checks).
_MUST_MATCH = {"sparkdl": lambda v: v, "python": lambda v: v, "numpy": lambda v: v.split(".")[0]}


def worker_python(sc, session=None) -> tuple[str, str]:
    """``(executable, where it comes from)`` of the Python workers of RDD jobs, or with ``session`` (a
    SparkSession) of SQL jobs: the name as Spark will start it (maybe a bare ``python3``)."""
    if session is not None:
        sql = session.conf.get("spark.sql.execution.pyspark.python", None)
        if sql:
            return sql, "spark.sql.execution.pyspark.python"
    if sc.pythonExec == os.environ.get("PYSPARK_PYTHON"):
        return sc.pythonExec, "PYSPARK_PYTHON"
    if sc.pythonExec == "python3":
        return "python3", "PYSPARK_PYTHON was unset when the session started: the first python3 on the PATH"
    return sc.pythonExec, "PYSPARK_PYTHON when the session started"


def describe_python(executable: str) -> dict | None:
    """``{"prefix", "python", "numpy", "sparkdl"}`` of ``executable`` (numpy/sparkdl ``None`` when not installed),
    or ``None`` if it cannot be run. This interpreter is described without a subprocess."""
    if os.path.abspath(executable) == os.path.abspath(sys.executable):
        return _this_python()
    try:
        out = subprocess.run([executable, "-c", _DESCRIBE], capture_output=True, text=True, timeout=120)
        return json.loads(out.stdout) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _this_python() -> dict:
    import numpy

    import sparkdl
    return {"prefix": sys.prefix, "python": "%d.%d" % sys.version_info[:2], "numpy": numpy.__version__,
            "sparkdl": sparkdl.__version__}


def local_python_advice(sc, session=None) -> tuple[str | None, bool]:
    """``(message, fatal)`` about a local master's workers running another interpreter than this driver's:
    ``(None, False)`` when they run this environment's Python (or the master is not local). ``fatal`` when that
    interpreter cannot run sparkdl's tasks (no sparkdl or another version, another Python major.minor, another
    numpy major version, or it cannot be started); the message then names the exact fix."""
    if sc is None or not sc.master.startswith("local"):  # a cluster, or Spark Connect (the server's workers)
        return None, False
    name, origin = worker_python(sc, session)
    path = shutil.which(name) or name
    theirs, ours = describe_python(path), _this_python()
    if theirs is not None and theirs["prefix"] == ours["prefix"] and theirs["python"] == ours["python"]:
        return None, False
    if theirs is None:
        what, fatal = "which cannot be started", True
    else:
        differ = [f"{k} {theirs[k]} there, {ours[k]} here" for k, key in _MUST_MATCH.items()
                  if theirs[k] is None or key(theirs[k]) != key(ours[k])]
        what = f"Python environment {theirs['prefix']}" + (f" ({'; '.join(differ)})" if differ else "")
        fatal = bool(differ)
    message = (f"this local master's Python workers start {path} ({origin}), {what}, not this driver's "
               f"interpreter {sys.executable} (environment {sys.prefix}). Start them with the driver's: set "
               f"PYSPARK_PYTHON={sys.executable} in the environment before the session starts (in Python: "
               "os.environ['PYSPARK_PYTHON'] = sys.executable before SparkSession.builder...getOrCreate(); a "
               f"running session keeps its interpreter: stop it first; spark-submit: --conf "
               f"spark.pyspark.python={sys.executable}). Sessions created by sparkdl.engine.get_or_create_session "
               "on a local master do this themselves.")
    return message, fatal
