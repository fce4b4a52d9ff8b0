"""The SparkSession sparkdl creates when the caller has none, with the settings that cut the fixed
per-iteration cost of a training job, and sparkdl's JVM bridge jar on the driver and executor class paths. Users
with their own session should set the same keys (see :data:`RECOMMENDED_CONF` and the README); the jar is
attached to their session at run time (:func:`sparkdl.jvm.bridge`), or may be added when it is created
(``spark.jars``, see :func:`sparkdl.jvm.jar_path`)."""
from __future__ import annotations

import contextlib
import os
import sys

from pyspark import SparkConf
from pyspark.sql import SparkSession

from sparkdl.jvm import jar_path

__all__ = ["RECOMMENDED_CONF", "LOCAL_TRAINING_CONF", "DAEMON_CONF", "get_or_create_session",
           "default_numba_cache_dir"]

#: Spark settings applied to sessions sparkdl creates (measured in bench/engine.py; see bench/RESULTS.md).
RECOMMENDED_CONF = {
    # Reuse Python workers between tasks: numba kernels and broadcasts stay loaded.
    "spark.python.worker.reuse": "true",
    # Python workers talk to the JVM over Unix domain sockets (measured ~15% less per iteration than TCP).
    "spark.python.unix.domain.socket.enabled": "true",
    # Cached partitions are local to their executor; do not wait for a better slot.
    "spark.locality.wait": "0s",
    # Gradient blocks are dense floats: compression costs CPU and saves little.
    "spark.shuffle.compress": "false",
    "spark.shuffle.spill.compress": "false",
    "spark.broadcast.compress": "false",
    "spark.rdd.compress": "false",
    # tqdm shows progress on the driver; Spark's console bar would interleave with it.
    "spark.ui.showConsoleProgress": "false",
    # Applied early while the SparkContext starts, so that of spark-submit's dozens of startup INFO lines only
    # the first three print (a value given to spark-submit with --conf spark.log.level=... is kept).
    "spark.log.level": "WARN",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Arrow batches (transform, and fit's DataFrame loading) of the default inferenceBatchSize: while a Python
    # worker runs the forward pass of one batch, the JVM already writes the next and reads the last one back
    # (with 10,000-row batches a partition was often one batch, and the two sides ran one after the other).
    # transform on local[1], 20,000 rows: MLP 15.8k -> 20.3k rows/s, LeNet-5 10.9k -> 12.2k (bench/RESULTS.md).
    # Like every key here, it replaces a spark-defaults.conf value.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "1024",
    # In local mode the driver JVM is also the executor that caches the training data.
    "spark.driver.memory": "4g",
}


#: Added for a training-only session on a local master (``get_or_create_session(..., training=True)``, as
#: ``sparkdl train`` does). There the driver JVM is also the executor, and on a few cores the C2 compiler's
#: warm-up (~12 s of CPU in the first 2 epochs of LeNet-5 on MNIST) competes with the Python workers that
#: compute the gradients: C1 only made those epochs 15% faster (bench/RESULTS.md). It also makes JVM-heavy
#: work slower — Spark's Arrow conversion of ``array<float>`` columns ran at half speed —, so sessions that
#: also transform or query keep the default JIT.
LOCAL_TRAINING_CONF = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}


#: Added for a new session on a local master whose Python workers run this interpreter (``PYSPARK_PYTHON``
#: unset, not launched by spark-submit) and find this sparkdl: :mod:`sparkdl.daemon` prepares the daemon that forks
#: the workers (set-up of the first ``transform``: 8.4-9.7 s -> 4.4-5.9 s on local masters, bench/RESULTS.md).
#: On a cluster whose executors have sparkdl installed, set the same key.
DAEMON_CONF = {"spark.python.daemon.module": "sparkdl.daemon"}

#: Keys that choose another interpreter for the workers (of all jobs, or of SQL jobs).
_WORKER_PYTHON_KEYS = ("spark.pyspark.python", "spark.sql.execution.pyspark.python")


def _effective_master(master: str | None, conf: dict | None) -> str | None:
    """The master a new session gets: the builder applies ``conf`` after ``.master()``, so its key wins."""
    return (conf or {}).get("spark.master", master)


def _workers_run_this_python(master: str | None) -> bool:
    """Whether a new session's Python workers will run this interpreter (see :func:`_default_worker_python`)."""
    return (master or "local").startswith("local") and "PYSPARK_PYTHON" not in os.environ \
        and "PYSPARK_GATEWAY_PORT" not in os.environ


def _workers_find_this_sparkdl() -> bool:
    """Whether a fresh process of this interpreter, started here with this environment (as local Python workers
    are), finds the sparkdl package this process runs: not when the driver found it only through its own
    ``sys.path`` changes (a notebook's ``sys.path.insert``). Then ``python -m sparkdl.daemon`` would fail, and with
    it every Python job of the session. One short subprocess (no import, only the lookup)."""
    import subprocess

    import sparkdl
    code = "import importlib.util as u; s = u.find_spec('sparkdl'); print(s.origin if s else '')"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    found = out.stdout.strip()
    return out.returncode == 0 and bool(found) and os.path.realpath(found) == os.path.realpath(sparkdl.__file__)


def default_numba_cache_dir() -> str:
    """``$XDG_CACHE_HOME/sparkdl/numba`` (default ``~/.cache/sparkdl/numba``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sparkdl", "numba")


def _with_bridge_jar(jars: str | None) -> str | None:
    """``jars`` (a comma-separated ``spark.jars`` value) with the bridge jar appended, unless it is there or
    was not built (then :func:`sparkdl.jvm.bridge` explains what is missing)."""
    items = [j.strip() for j in (jars or "").split(",") if j.strip()]
    path = jar_path()
    if os.path.isfile(path) and not any(os.path.basename(j) == os.path.basename(path) for j in items):
        items.append(path)
    return ",".join(items) or None


def _defaults_file() -> dict:
    """``spark-defaults.conf`` of ``$SPARK_CONF_DIR``, else of the Spark home's ``conf/`` (``$SPARK_HOME`` or the
    pyspark package, as Spark finds it), as a dict; empty if there is none. Java properties syntax: a key, then
    ``=``, ``:`` or whitespace, then the value; ``#`` and ``!`` start comments.

    Settings given to the builder replace the file's values, so a key sparkdl adds to must be merged by hand."""
    import re

    from pyspark.find_spark_home import _find_spark_home
    conf_dir = os.environ.get("SPARK_CONF_DIR") or os.path.join(_find_spark_home(), "conf")
    out = {}
    try:
        with open(os.path.join(conf_dir, "spark-defaults.conf"), encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line or line[0] in "#!":
                    continue
                key, _, value = re.match(r"([^=:\s]+)\s*([=:\s])\s*(.*)", line + " ").groups()
                out[key] = value.strip()
    except (OSError, AttributeError):  # no file; a line without a separator
        pass
    return out


def _settings(master: str | None, conf: dict | None, training: bool) -> dict:
    """The configuration of a new session (see :func:`get_or_create_session`)."""
    settings = dict(RECOMMENDED_CONF)
    master = _effective_master(master, conf)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # the JVM already runs: JVM options cannot apply
    if master is None and submitted:
        from sparkdl.jvm import submitted_conf
        master = submitted_conf("spark.master")  # spark-submit's --master (YARN, k8s, standalone or local)
    local = (master or "local").startswith("local")
    if training and local and not submitted:
        defaults = _defaults_file()
        for key, value in LOCAL_TRAINING_CONF.items():  # appended to a spark-defaults.conf value, not replacing it
            settings[key] = " ".join(v for v in (defaults.get(key), value) if v)
    if _workers_run_this_python(master) and not any(k in (conf or {}) for k in _WORKER_PYTHON_KEYS) \
            and "spark.python.daemon.module" not in (conf or {}) and _workers_find_this_sparkdl():
        settings.update(DAEMON_CONF)
    if not local:
        # Remote executors may not be able to write next to an installed package: give numba a
        # writable cache. (Local executors share the driver's cache, so kernels compile once.)
        settings["spark.executorEnv.NUMBA_CACHE_DIR"] = default_numba_cache_dir()
    settings.update(conf or {})
    jars = _with_bridge_jar(settings.get("spark.jars", SparkConf().get("spark.jars", None)))
    if jars:
        settings["spark.jars"] = jars
    if submitted and "spark.log.level" not in (conf or {}):
        from sparkdl.jvm import submitted_conf
        if submitted_conf("spark.log.level") is not None:  # spark-submit's --conf spark.log.level wins
            del settings["spark.log.level"]
    return settings


@contextlib.contextmanager
def _default_worker_python(master: str | None):
    """While a session on a local master that this process starts is created, ``PYSPARK_PYTHON`` names this
    interpreter (with its packages, e.g. a virtual environment's numba) instead of leaving the workers to the
    first ``python3`` on the PATH — unless it already names one. PySpark reads it once, when the SparkContext
    starts; it is unset again afterwards, so a later session on a cluster is not sent this machine's path."""
    if not _workers_run_this_python(master):
        yield
        return
    os.environ["PYSPARK_PYTHON"] = sys.executable
    try:
        yield
    finally:
        os.environ.pop("PYSPARK_PYTHON", None)


def get_or_create_session(master: str | None = None, app_name: str = "sparkdl", conf: dict | None = None,
                          training: bool = False):
    """Return the active SparkSession, or create one with :data:`RECOMMENDED_CONF`.

    Parameters
    ----------
    master : str, optional
        Master URL for a new session. Default: the master ``spark-submit`` was given when this process was
        launched by ``spark-submit``, else ``local[*]``. Ignored when a session is already active, which
        is then returned unchanged.
    conf : dict, optional
        Extra settings for a new session (override the recommended ones). The bridge jar is appended to
        ``spark.jars`` (to this one, or to one set in ``spark-defaults.conf``/by ``spark-submit``).
    training : bool
        The session will only train (no DataFrame transforms or SQL): on a local master, a new session also
        gets :data:`LOCAL_TRAINING_CONF` (its JVM is started here, so the JIT setting applies; ``conf`` wins;
        a ``spark-defaults.conf`` value of the same key is kept in front of it).

    Notes
    -----
    A new session on a local master starts its Python workers with this interpreter when ``PYSPARK_PYTHON`` is
    unset, so they import the same packages as the driver (a virtual environment need not be activated), and
    through :mod:`sparkdl.daemon` (:data:`DAEMON_CONF`), which does their common imports once.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if master is not None or "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        builder = builder.master(master or "local[*]")
    settings = _settings(master, conf, training)
    for k, v in settings.items():
        builder = builder.config(k, v)
    with _default_worker_python(_effective_master(master, conf)):
        return builder.getOrCreate()
