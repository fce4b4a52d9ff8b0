"""A local master whose Python workers would start another interpreter than the driver's (a virtual environment's
python run without activating it, ``PYSPARK_PYTHON`` unset): said before any Spark job, with the exact fix."""
import logging
import os
import subprocess
import sys
import sysconfig
import types

import pytest

from sparkdl.engine import environment
from sparkdl.engine.environment import ExecutorEnvironmentError
from sparkdl.engine.worker_python import describe_python, local_python_advice


def _venv(path, with_our_packages: bool):
    """A virtual environment of this Python without pip: bare, or seeing this environment's packages through a
    ``.pth`` file (another interpreter with the same versions)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=300)
    if with_our_packages:
        site = subprocess.run([str(path / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                               "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(site, "ours.pth"), "w") as f:
            f.write(sysconfig.get_paths()["purelib"] + "\n")
    return path / "bin"


@pytest.fixture
def unset_python(spark, monkeypatch):
    """The test session as if started with PYSPARK_PYTHON unset (its workers start ``python3`` from the PATH),
    with its environment check not yet done and no Spark job allowed."""
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setattr(spark.sparkContext, "pythonExec", "python3")
    monkeypatch.setattr(environment, "_RESULTS", {})

    def no_job(*args, **kwargs):
        raise AssertionError("a Spark job ran")
    monkeypatch.setattr(environment, "collect_reports", no_job)
    return spark.sparkContext


def test_sessions_sparkdl_creates_start_workers_with_this_interpreter(spark):
    assert spark.sparkContext.pythonExec == sys.executable
    assert local_python_advice(spark.sparkContext) == (None, False)


def test_another_interpreter_without_sparkdl_is_an_error_before_any_job(unset_python, monkeypatch, tmp_path):
    bin_dir = _venv(tmp_path / "bare", with_our_packages=False)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(ExecutorEnvironmentError) as e:
        environment.check_executor_environment(unset_python)
    message = str(e.value)
    assert f"workers start {bin_dir / 'python3'} (PYSPARK_PYTHON was unset" in message
    import numpy
    import sparkdl
    assert (f"Python environment {tmp_path / 'bare'} (sparkdl None there, {sparkdl.__version__} here; numpy None "
            f"there, {numpy.__version__} here)") in message
    assert f"set PYSPARK_PYTHON={sys.executable} in the environment" in message
    assert f"--conf spark.pyspark.python={sys.executable}" in message
    assert "spark.archives" not in message  # not the cluster advice
    with pytest.raises(ExecutorEnvironmentError, match="PYSPARK_PYTHON="):  # remembered for the application
        environment.check_executor_environment(unset_python)


def test_another_interpreter_with_the_same_versions_is_a_warning(unset_python, monkeypatch, tmp_path, caplog):
    bin_dir = _venv(tmp_path / "same", with_our_packages=True)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert describe_python(str(bin_dir / "python3"))["sparkdl"] is not None
    monkeypatch.setattr(environment, "collect_reports", lambda sc, session=None: [environment.driver_report()])
    with caplog.at_level(logging.WARNING, logger="sparkdl.engine"):
        environment.check_executor_environment(unset_python)  # works: no error
    warnings = [r.getMessage() for r in caplog.records if "PYSPARK_PYTHON=" in r.getMessage()]
    assert len(warnings) == 1
    assert f"Python environment {tmp_path / 'same'}, not this driver's interpreter {sys.executable}" in warnings[0]


def test_the_same_environment_under_another_name_is_fine(unset_python, monkeypatch, tmp_path):
    link = tmp_path / "bin" / "python3"
    link.parent.mkdir()
    link.symlink_to(sys.executable)  # a venv's python found by another path: still the venv (its pyvenv.cfg)
    monkeypatch.setattr(unset_python, "pythonExec", sys.executable + "3" if os.path.exists(sys.executable + "3")
                        else sys.executable)
    assert local_python_advice(unset_python) == (None, False)


def test_sql_jobs_follow_their_own_interpreter_setting(spark, monkeypatch):
    monkeypatch.setattr(spark.sparkContext, "pythonExec", sys.executable)
    spark.conf.set("spark.sql.execution.pyspark.python", "/nonexistent/python3")
    try:
        message, fatal = local_python_advice(spark.sparkContext, spark)
    finally:
        spark.conf.unset("spark.sql.execution.pyspark.python")
    assert fatal and "/nonexistent/python3 (spark.sql.execution.pyspark.python), which cannot be started" in message
    assert local_python_advice(spark.sparkContext) == (None, False)  # RDD jobs: PYSPARK_PYTHON


def test_cluster_masters_are_left_to_the_environment_check():
    sc = types.SimpleNamespace(master="spark://127.0.0.1:7077", pythonExec="python3")
    assert local_python_advice(sc) == (None, False)
