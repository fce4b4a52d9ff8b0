"""The SparkSession sparkdl creates when the caller has none, with the settings that cut the fixed
per-iteration cost of a training job. Users with their own session should set the same keys (see
:data:`RECOMMENDED_CONF` and the README)."""
from __future__ import annotations

import os

from pyspark.sql import SparkSession

__all__ = ["RECOMMENDED_CONF", "get_or_create_session", "default_numba_cache_dir"]

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
    # In local mode the driver JVM is also the executor that caches the training data.
    "spark.driver.memory": "4g",
}


def default_numba_cache_dir() -> str:
    """``$XDG_CACHE_HOME/sparkdl/numba`` (default ``~/.cache/sparkdl/numba``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sparkdl", "numba")


def get_or_create_session(master: str | None = None, app_name: str = "sparkdl", conf: dict | None = None):
    """Return the active SparkSession, or create one with :data:`RECOMMENDED_CONF`.

    Parameters
    ----------
    master : str, optional
        Master URL for a new session. Default: the master ``spark-submit`` was given when this process was
        launched by ``spark-submit``, else ``local[*]``. Ignored when a session is already active, which
        is then returned unchanged.
    conf : dict, optional
        Extra settings for a new session (override the recommended ones).
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if master is not None or "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        builder = builder.master(master or "local[*]")
    settings = dict(RECOMMENDED_CONF)
    if not (master or "local").startswith("local"):
        # Remote executors may not be able to write next to an installed package: give numba a
        # writable cache. (Local executors share the driver's cache, so kernels compile once.)
        settings["spark.executorEnv.NUMBA_CACHE_DIR"] = default_numba_cache_dir()
    settings.update(conf or {})
    if "PYSPARK_GATEWAY_PORT" in os.environ and "spark.log.level" not in (conf or {}):
        from sparkdl.jvm import submitted_conf
        if submitted_conf("spark.log.level") is not None:  # spark-submit's --conf spark.log.level wins
            del settings["spark.log.level"]
    for k, v in settings.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
