"""sparkdl's JVM bridge: the jar is loaded by the driver and by executor JVMs of the sessions sparkdl creates,
and a session that cannot take it at run time gets an error naming the line to add (tests/test_plain_session.py:
sessions that can)."""
import json
import os
import re
import shutil
import subprocess
import sys
import weakref
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
        props = z.read("org/sparkdl/bridge/bridge.properties").decode()
    assert re.fullmatch(rf"version={re.escape(sparkdl.__version__)}\nsources=[0-9a-f]{{64}}\n", props)


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
    assert "cannot be added at run time: the driver's class loader" in r["error"]
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


def _jar_with_properties(tmp_path, text: str) -> str:
    """A copy of the built jar whose bridge.properties reads ``text``."""
    copy = tmp_path / "sparkdl-bridge.jar"
    with zipfile.ZipFile(jvm.jar_path()) as src, zipfile.ZipFile(copy, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            dst.writestr(item, text.encode() if item.filename.endswith("bridge.properties") else data)
    return str(copy)


def test_a_jar_built_from_other_sources_is_refused_in_a_source_checkout(spark, monkeypatch, tmp_path):
    """Same sparkdl version, other Java sources (a checkout edited or updated without rebuilding): refused
    before any JVM call, with the command that rebuilds it; the jar built from the checkout is accepted."""
    assert jvm._stale_checkout_jar() is None
    stale = _jar_with_properties(tmp_path, f"version={sparkdl.__version__}\nsources={'0' * 64}\n")
    monkeypatch.setattr(jvm, "jar_path", lambda: stale)
    monkeypatch.setattr(jvm, "_bridges", weakref.WeakKeyDictionary())
    with pytest.raises(jvm.BridgeMissingError, match=r"other Java sources .* 'python jvm_bridge/build.py'"):
        jvm.bridge(spark.sparkContext)
    (tmp_path / "older").mkdir()
    older = _jar_with_properties(tmp_path / "older", f"version={sparkdl.__version__}\n")  # built before the digest
    monkeypatch.setattr(jvm, "jar_path", lambda: older)
    assert "other Java sources" in jvm._stale_checkout_jar()


def test_sources_digest_changes_with_any_edit(tmp_path):
    build = jvm._checkout_build_module()
    assert build is not None  # the tests run from a source checkout
    src = tmp_path / "java"
    shutil.copytree(build.SOURCES, src)
    first = build.sources_digest(str(src))
    assert first == build.sources_digest() and len(first) == 64
    java = src / "org" / "sparkdl" / "bridge" / "FloatRows.java"
    java.write_text(java.read_text() + "\n")
    assert build.sources_digest(str(src)) != first
    java.write_text(java.read_text()[:-1])
    assert build.sources_digest(str(src)) == first
    java.rename(java.with_name("FloatRows2.java"))
    assert build.sources_digest(str(src)) != first
