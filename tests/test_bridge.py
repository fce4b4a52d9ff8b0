"""sparkdl's JVM bridge: the jar is loaded by the driver and by executor JVMs of the sessions sparkdl creates,
and a session without it gets an error naming the line to add."""
import json
import os
import subprocess
import sys
import zipfile

import pytest

import sparkdl
from sparkdl import jvm

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "bridge_session.py")


def _run(*args) -> dict:
    out = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_jar_is_built_into_the_package():
    path = jvm.jar_path()
    assert os.path.isfile(path), f"{path} missing: run 'python jvm_bridge/build.py' or 'pip install -e .'"
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        assert "org/sparkdl/bridge/Bridge.class" in names
        assert z.read("org/sparkdl/bridge/bridge.properties").decode() == f"version={sparkdl.__version__}\n"


def test_version_on_driver_and_tasks_local(spark):
    sc = spark.sparkContext
    b = jvm.bridge(sc)
    assert b.version() == sparkdl.__version__
    assert jvm.bridge(sc) is b  # looked up once per SparkContext
    tasks = list(b.taskVersions(sc._jsc, 3))
    assert tasks == [f"{b.jvmName()} {sparkdl.__version__}"] * 3  # local mode: tasks run in the driver JVM


@pytest.mark.slow
def test_version_on_executor_jvms_local_cluster():
    r = _run("cluster")
    assert r["driver_version"] == sparkdl.__version__
    assert r["task_versions"] == [sparkdl.__version__]
    assert r["driver_jvm"] not in r["task_jvms"]  # the class was loaded by separate executor JVMs
    assert 1 <= len(r["task_jvms"]) <= 2


def test_missing_bridge_error_names_the_line_to_add():
    r = _run("missing")
    assert r["type"] == "BridgeMissingError" and r["is_runtime_error"]
    path = jvm.jar_path()
    assert f"--jars {path}" in r["error"]
    assert f'.config("spark.jars", "{path}")' in r["error"]
    assert "python -m sparkdl.jvm" in r["error"]


def test_existing_spark_jars_are_kept(tmp_path):
    other = tmp_path / "other.jar"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
    r = _run("extra-jars", str(other))
    assert r["spark.jars"].split(",") == [str(other), jvm.jar_path()]
    assert r["version"] == sparkdl.__version__


def test_jar_path_printed_by_module():
    out = subprocess.run([sys.executable, "-m", "sparkdl.jvm"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(sparkdl.__file__))})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == jvm.jar_path()


@pytest.mark.parametrize("jars, expected", [(None, ["J"]), ("a.jar", ["a.jar", "J"]), ("a.jar,J", ["a.jar", "J"]),
                                            (" a.jar , ", ["a.jar", "J"])])
def test_with_bridge_jar_appends_once(monkeypatch, tmp_path, jars, expected):
    from sparkdl.engine import session
    jar = tmp_path / "sparkdl-bridge.jar"
    jar.write_bytes(b"")
    monkeypatch.setattr(session, "jar_path", lambda: str(jar))
    got = session._with_bridge_jar(jars.replace("J", str(jar)) if jars else jars)
    assert got.split(",") == [e.replace("J", str(jar)) for e in expected]
