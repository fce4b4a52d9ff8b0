"""The Python daemon of executors that run sparkdl: pyspark's own daemon, started after one-time preparation.

Spark starts one daemon per executor (``python -m <spark.python.daemon.module>``, default ``pyspark.daemon``) and
the daemon forks a Python worker per task slot. Every worker then imports what its tasks need. With sparkdl that
was ~3 s of CPU per worker before the first row was scored (measured with py-spy on the benchmark machine, MLP
``transform`` on ``local[2]``), most of it import work that is the same in every worker. Sessions sparkdl creates
on a local master set ``spark.python.daemon.module=sparkdl.daemon`` (:data:`sparkdl.engine.session.DAEMON_CONF`);
on a cluster, set it when sparkdl is installed in the executors' Python. Before running pyspark's daemon
unchanged, this module

1. imports pyspark from its installed package instead of ``<pyspark>/python/lib/pyspark.zip``, when that zip
   belongs to the very installation Python would import otherwise (so the code is the same). Spark puts the zip
   first on the workers' ``PYTHONPATH``; Python compiles every module imported from a zip from source, in every
   process (a zip holds no bytecode cache), and each worker re-read the zip's 1,500-entry directory when pyspark
   added the task's file directory to ``sys.path`` (``importlib.invalidate_caches``): ~1.5 s per worker;
2. imports, once, modules that start no thread of their own: pyspark's worker, numpy, numba with its compiler's
   target context, and sparkdl's layers, kernels, optimizers and engine. Forked workers inherit them. The only
   threads alive at the fork are the pools of the two BLAS libraries (numpy's and SciPy's OpenBLAS), which stop
   and restart around ``fork`` themselves (``pthread_atfork``), as in any forking server that imported numpy.
   pyarrow and pandas are not imported here: they start threads of their own when imported (pyspark's daemon
   imports even its worker module after the fork for that reason). numba's parallel kernels are not run here
   either: the threading layer starts its threads on the first run;
3. freezes the garbage collector's view of what is loaded (:func:`gc.freeze`), so that the workers' collections
   skip these objects (pages are still copied when reference counts change).

Effects beyond sparkdl's own tasks, on every Python worker of the session: ``sparkdl.config`` chooses numba's
threading layer (on ``numba.config``; no environment variable is set); modules preloaded here (numpy,
numba, SciPy, pyspark, sparkdl) cannot be replaced by a different copy shipped with ``--py-files``; each daemon
holds ~135 MB more (164 against 30 MB RSS, measured), shared with its workers until they write to it.

The daemon starts only if ``sparkdl`` imports (``python -m sparkdl.daemon`` runs ``sparkdl/__init__``, and with it
``sparkdl.config``, before :func:`main`), which is why sessions set it only where a fresh interpreter finds this
sparkdl. A failure of step 2 (an import error in a broken environment) is reported on stderr and the daemon runs
anyway: the task that needs the module then fails with the error, where Spark shows it.
"""
from __future__ import annotations

import os
import sys

from sparkdl.config import load_compiler

__all__ = ["prefer_installed_pyspark", "preload", "quiet_when_the_jvm_hung_up", "main"]

#: Imported by :func:`preload`; none of them imports pyarrow or pandas (tests/test_daemon.py checks).
PRELOADED = ("pyspark.worker", "sparkdl.nn", "sparkdl.optim", "sparkdl.engine", "sparkdl.io")


def _is_spark_core_jar(path: str) -> bool:
    name = os.path.basename(path)
    return name.startswith("spark-core_") and name.endswith(".jar")


def prefer_installed_pyspark() -> list[str]:
    """Take Spark's ``pyspark.zip`` off ``sys.path`` when it lies inside the pyspark package found on the rest
    of ``sys.path`` (``<package>/python/lib/pyspark.zip``, as in a pip install), together with the
    ``spark-core_*.jar`` Spark also puts there as a place pyspark may be found (a zip too: its ~6,000-entry
    directory was re-read by every worker). Returns the entries removed: none when pyspark is already imported or
    the zip is the only pyspark (a Spark distribution without a pip install)."""
    import importlib.machinery

    if any(m == "pyspark" or m.startswith("pyspark.") for m in sys.modules):
        return []
    zips = [p for p in sys.path if os.path.basename(p) == "pyspark.zip"]
    spec = importlib.machinery.PathFinder.find_spec("pyspark", [p for p in sys.path if p not in zips])
    if not zips or spec is None or not spec.submodule_search_locations:
        return []
    own = os.path.join(os.path.realpath(list(spec.submodule_search_locations)[0]), "python", "lib", "pyspark.zip")
    if not any(os.path.realpath(z) == own for z in zips):
        return []
    removed = [p for p in sys.path if os.path.realpath(p) == own or _is_spark_core_jar(p)]
    sys.path[:] = [p for p in sys.path if p not in removed]
    for p in removed:
        sys.path_importer_cache.pop(p, None)
    return removed


def preload() -> None:
    """Import :data:`PRELOADED` and set up numba's compiler (its typing and target contexts, loaded lazily by
    the first compilation or cache load of a process), then :func:`gc.freeze`."""
    import gc
    import importlib

    for name in PRELOADED:
        importlib.import_module(name)
    load_compiler()
    gc.collect()
    gc.freeze()


def quiet_when_the_jvm_hung_up(worker):
    """pyspark's per-connection ``worker`` function, made silent when the JVM closed the connection first.

    At a session's end Spark closes its idle workers' connections and only then stops the daemon, so each idle
    worker reads end-of-file, fails to flush its reply (``BrokenPipeError``) and prints a traceback, unless the
    daemon's hang-up signal kills it first. pyspark's own daemon won that race because a worker formatting a
    traceback first read the source lines out of ``pyspark.zip``; from the installed package it lost it (measured
    here: ``Traceback ...`` in the driver's log at the end of 3 of 17 successful sessions, in the daemon's own
    stderr in 4 of 10; 0 of 15 with this wrapper, 0 of 9 with pyspark's daemon). The
    worker still exits as pyspark makes it (a non-zero code: not reused); only the traceback, which says nothing
    the JVM does not know, is dropped. Other exceptions are unchanged."""
    def run(sock, authenticated):
        try:
            return worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError):
            return 1
    return run


def main() -> None:
    """Prepare (:func:`prefer_installed_pyspark`, :func:`preload`), then run ``pyspark.daemon.manager`` with
    :func:`quiet_when_the_jvm_hung_up` around its ``worker``."""
    prefer_installed_pyspark()
    try:
        preload()
    except Exception as e:  # the daemon must start: the tasks report what is broken
        print(f"sparkdl.daemon: preloading failed, workers import on demand: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)
    import pyspark.daemon
    pyspark.daemon.worker = quiet_when_the_jvm_hung_up(pyspark.daemon.worker)
    pyspark.daemon.manager()


if __name__ == "__main__":
    main()
