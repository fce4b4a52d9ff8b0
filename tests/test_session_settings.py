"""The configuration get_or_create_session gives a new session (no JVM is started here)."""
import os
import sys

from sparkdl.engine import LOCAL_TRAINING_CONF, RECOMMENDED_CONF
from sparkdl.engine.session import _default_worker_python, _settings

JIT = "spark.driver.extraJavaOptions"


def test_training_session_on_a_local_master_runs_its_jvm_with_c1_only(monkeypatch):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert LOCAL_TRAINING_CONF[JIT] == "-XX:TieredStopAtLevel=1"
    for master in (None, "local[2]", "local-cluster[2,1,1024]"):
        assert _settings(master, None, True)[JIT] == "-XX:TieredStopAtLevel=1"
    assert JIT not in _settings("local[2]", None, False)  # sessions that also transform keep C2
    assert JIT not in _settings("spark://host:7077", None, True)  # remote executors: their own JVMs
    assert _settings("local[2]", {JIT: "-Xss4m"}, True)[JIT] == "-Xss4m"  # the caller's conf wins
    assert {k: v for k, v in _settings("local[2]", None, True).items() if k in RECOMMENDED_CONF} == RECOMMENDED_CONF


def test_no_jvm_option_when_spark_submit_started_the_jvm(monkeypatch):
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    submitted = {"spark.master": "local[4]"}
    monkeypatch.setattr("sparkdl.jvm.submitted_conf", submitted.get)
    assert JIT not in _settings(None, None, True)
    assert "spark.executorEnv.NUMBA_CACHE_DIR" not in _settings(None, None, True)
    submitted["spark.master"] = "yarn"  # spark-submit's master, not a local default: executors get a numba cache
    assert _settings(None, None, False)["spark.executorEnv.NUMBA_CACHE_DIR"].endswith("sparkdl/numba")


def test_training_jit_option_is_appended_to_a_spark_defaults_value(monkeypatch, tmp_path):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    (tmp_path / "spark-defaults.conf").write_text("# site settings\nspark.driver.extraJavaOptions   -Dsite=1 -Xss8m\n"
                                                  "spark.executor.memory 2g\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert _settings("local[2]", None, True)[JIT] == "-Dsite=1 -Xss8m -XX:TieredStopAtLevel=1"
    assert JIT not in _settings("local[2]", None, False)  # nothing added: the file's value applies untouched
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "missing"))
    assert _settings("local[2]", None, True)[JIT] == "-XX:TieredStopAtLevel=1"


def test_local_workers_default_to_this_interpreter_while_the_session_starts(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", "recorded")  # so that monkeypatch restores the original state
    monkeypatch.delenv("PYSPARK_PYTHON")
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    with _default_worker_python("spark://host:7077"):  # remote workers: their own interpreters
        assert "PYSPARK_PYTHON" not in os.environ
    with _default_worker_python("local[2]"):
        assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert "PYSPARK_PYTHON" not in os.environ  # not left for a later session on a cluster
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")  # the caller's choice stays
    with _default_worker_python(None):
        assert os.environ["PYSPARK_PYTHON"] == "/opt/py/bin/python"
    assert os.environ["PYSPARK_PYTHON"] == "/opt/py/bin/python"


def test_spark_defaults_file_syntax_and_location(monkeypatch, tmp_path):
    from sparkdl.engine.session import _defaults_file
    (tmp_path / "spark-defaults.conf").write_text(
        "! comment\nspark.a=1\nspark.b : two words\nspark.c\t3\n\nspark.d\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert _defaults_file() == {"spark.a": "1", "spark.b": "two words", "spark.c": "3", "spark.d": ""}
    monkeypatch.delenv("SPARK_CONF_DIR")
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.chdir(tmp_path)  # a conf/ folder in the working directory is not Spark's
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions -Dstray=1\n")
    assert "-Dstray=1" not in _defaults_file().get(JIT, "")


def test_local_sessions_whose_workers_run_this_interpreter_use_sparkdls_daemon(monkeypatch):
    from sparkdl.engine.session import DAEMON_CONF
    key = "spark.python.daemon.module"
    assert DAEMON_CONF == {key: "sparkdl.daemon"}
    monkeypatch.setenv("PYSPARK_PYTHON", "recorded")
    monkeypatch.delenv("PYSPARK_PYTHON")
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    for master in (None, "local[2]", "local-cluster[2,1,1024]"):
        assert _settings(master, None, False)[key] == "sparkdl.daemon"
    assert key not in _settings("spark://host:7077", None, False)  # the executors' Python may lack sparkdl
    assert key not in _settings(None, {"spark.master": "yarn"}, False)  # the builder's conf wins over .master()
    for other in ("spark.pyspark.python", "spark.sql.execution.pyspark.python"):
        assert key not in _settings("local[2]", {other: "/opt/py/bin/python"}, False)
    assert _settings("local[2]", {key: "pyspark.daemon"}, False)[key] == "pyspark.daemon"  # the caller's wins
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")  # another interpreter: pyspark's own daemon
    assert key not in _settings("local[2]", None, False)
    monkeypatch.delenv("PYSPARK_PYTHON")
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")  # spark-submit chose the workers' Python
    monkeypatch.setattr("sparkdl.jvm.submitted_conf", {"spark.master": "local[2]"}.get)
    assert key not in _settings(None, None, False)


def test_no_daemon_when_fresh_workers_would_not_find_this_sparkdl(monkeypatch):
    """A driver that imported sparkdl only through its own sys.path (a notebook's sys.path.insert): a fresh
    interpreter finds another sparkdl or none, so ``python -m sparkdl.daemon`` could fail every Python job."""
    import sparkdl
    from sparkdl.engine.session import _workers_find_this_sparkdl
    monkeypatch.setenv("PYSPARK_PYTHON", "recorded")
    monkeypatch.delenv("PYSPARK_PYTHON")
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert _workers_find_this_sparkdl()
    monkeypatch.setattr(sparkdl, "__file__", "/elsewhere/sparkdl/__init__.py")
    assert not _workers_find_this_sparkdl()
    assert "spark.python.daemon.module" not in _settings("local[2]", None, False)
