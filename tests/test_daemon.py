"""sparkdl.daemon, the Python daemon of sessions sparkdl creates on local masters: pyspark from its installed
package rather than from Spark's zip copy, the common imports done once before the fork and none that starts a
thread, and workers of the test session really forked by it."""
import os
import subprocess
import sys

import pyspark
import pytest

PYSPARK_DIR = os.path.dirname(pyspark.__file__)
ZIP = os.path.join(PYSPARK_DIR, "python", "lib", "pyspark.zip")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str, pythonpath: list) -> list:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*pythonpath, ROOT])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()


def test_pyspark_comes_from_the_installed_package_not_sparks_zip_copy():
    assert os.path.isfile(ZIP)
    jar = os.path.join(PYSPARK_DIR, "jars", "spark-core_2.13-0.0.jar")  # as Spark appends it (need not exist)
    lines = _run("import sparkdl.daemon as d, sys\nprint(d.prefer_installed_pyspark())\nimport pyspark\n"
                 "print(pyspark.__file__)\nprint([p for p in sys.path if p.endswith(('.zip', '.jar'))])",
                 [ZIP, jar])
    assert lines[0] == repr([ZIP, jar])
    assert lines[1] == pyspark.__file__ and ".zip" not in lines[1]
    assert "pyspark.zip" not in lines[2] and ".jar" not in lines[2]


def test_a_zip_of_another_pyspark_stays_on_the_path(tmp_path):
    other = tmp_path / "python" / "lib" / "pyspark.zip"
    other.parent.mkdir(parents=True)
    other.write_bytes(open(ZIP, "rb").read())
    lines = _run("import sparkdl.daemon as d\nprint(d.prefer_installed_pyspark())\nimport pyspark\n"
                 "print(pyspark.__file__)", [str(other)])
    assert lines[0] == "[]"
    assert lines[1].startswith(str(other))  # Python's own order: the zip first


def test_nothing_changes_once_pyspark_is_imported():
    lines = _run("import pyspark, sparkdl.daemon as d\nprint(d.prefer_installed_pyspark())", [ZIP])
    assert lines == ["[]"]


def test_preload_imports_the_layers_and_starts_no_thread():
    """pyspark's daemon forks its workers: a thread alive at the fork (pyarrow's jemalloc thread, numba's pool)
    could hold a lock the child then never sees released. BLAS libraries start their threads when loaded and
    handle forks themselves: the baseline is a process that imports numpy and SciPy's BLAS."""
    count = "len(os.listdir('/proc/self/task'))"
    base = _run(f"import os, numpy, scipy.linalg.cython_blas\nprint({count})", [])
    lines = _run("import os, sys, sparkdl.daemon as d\nd.preload()\n"
                 f"print({count})\nprint(sorted(m for m in ('pyarrow', 'pandas', 'pyspark.worker', 'sparkdl.nn', "
                 "'sparkdl.engine.inference', 'numba') if m in sys.modules))\n"
                 "import gc\nprint(gc.get_freeze_count() > 0)", [])
    assert int(lines[0]) == int(base[0])
    assert lines[1] == repr(["numba", "pyspark.worker", "sparkdl.engine.inference", "sparkdl.nn"])
    assert lines[2] == "True"


def test_a_failing_preload_still_runs_pysparks_daemon():
    lines = _run("import sparkdl.daemon as d, pyspark.daemon\n"
                 "def broken():\n    raise ImportError('no numba here')\n"
                 "d.preload = broken\npyspark.daemon.manager = lambda: print('manager ran')\nd.main()", [])
    assert lines == ["manager ran"]


def test_the_sessions_workers_are_forked_by_it(spark):
    """The test session is created by get_or_create_session on local[2,3]: its workers (RDD and SQL jobs) come
    from sparkdl.daemon, with pyspark imported from the installed package."""
    def where(_):
        import sys
        import pyspark as p
        main = getattr(sys.modules["__main__"], "__spec__", None)  # python -m runs the daemon as __main__
        zipped = any(s.endswith("pyspark.zip") for s in sys.path)
        return p.__file__, getattr(main, "name", None) == "sparkdl.daemon", zipped
    assert spark.sparkContext.getConf().get("spark.python.daemon.module") == "sparkdl.daemon"
    assert set(spark.sparkContext.parallelize(range(2), 2).map(where).collect()) == {(pyspark.__file__, True, False)}
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType
    row = spark.range(1).select(F.udf(lambda _: repr(where(_)), StringType())("id")).first()[0]
    assert row == repr((pyspark.__file__, True, False))


def test_a_worker_whose_jvm_hung_up_exits_without_a_traceback():
    """At a session's end Spark closes idle workers' connections before stopping the daemon: their failed flush
    must not print a traceback into the driver's log; the worker still exits (code 1, not reused). Other errors
    still propagate to pyspark's daemon, which prints them."""
    from sparkdl.daemon import quiet_when_the_jvm_hung_up

    def hung_up(sock, authenticated):
        raise BrokenPipeError(32, "Broken pipe")

    def reset(sock, authenticated):
        raise ConnectionResetError(104, "Connection reset by peer")

    def broken(sock, authenticated):
        raise ValueError("a real bug")
    assert quiet_when_the_jvm_hung_up(hung_up)(None, True) == 1
    assert quiet_when_the_jvm_hung_up(reset)(None, True) == 1
    assert quiet_when_the_jvm_hung_up(lambda s, a: 0)(None, True) == 0
    with pytest.raises(ValueError, match="a real bug"):
        quiet_when_the_jvm_hung_up(broken)(None, True)


def test_main_wraps_pysparks_worker_function():
    lines = _run("import sparkdl.daemon as d, pyspark.daemon\noriginal = pyspark.daemon.worker\n"
                 "pyspark.daemon.manager = lambda: print(pyspark.daemon.worker is not original, "
                 "pyspark.daemon.worker.__qualname__)\nd.main()", [])
    assert lines == ["True quiet_when_the_jvm_hung_up.<locals>.run"]
