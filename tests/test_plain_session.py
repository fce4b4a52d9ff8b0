"""sparkdl in sessions it did not create (no sparkdl jar, no sparkdl settings): DLClassifier fit and transform and
DistributedTrainer.fit work and give the bits of a session sparkdl created. The bridge jar is attached at run time
(driver class loader + ``SparkContext.addJar``); where the driver's class loader takes no jars, the Python paths
run with one warning naming the line that enables the fast path. Each case runs in its own process: a builder
session with a user's jar, a spark-submit session without ``--jars`` (so no case needs a third builder session with
neither), and a driver class loader that takes no jars."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from sparkdl import jvm
from tests.scripts import plain_session

pytestmark = pytest.mark.slow  # each case starts a Spark session in a process of its own (~30-50 s on 2 cores)

SCRIPT = plain_session.__file__
DIGESTS = ("classifier", "probabilities", "trainer")


def _env():
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": os.path.dirname(os.path.dirname(SCRIPT))}


def _run(*command) -> dict:
    out = subprocess.run(list(command), capture_output=True, text=True, timeout=900, env=_env())
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def reference(spark):
    """The digests in the tests' session, which sparkdl created with its jar: JVM reduce, packed features."""
    return plain_session.run_all(spark)


@pytest.fixture(scope="module")
def python_paths(spark):
    """The digests with the Python reduce and the plain Arrow path forced in the tests' session."""
    import sparkdl.engine.loop as loop
    mp = pytest.MonkeyPatch()
    mp.setattr(loop, "optional_bridge", lambda sc: None)  # DistributedTrainer's reduce
    mp.setattr(jvm, "optional_bridge", lambda sc: None)  # sparkdl.ml.packing's feature columns
    try:
        return plain_session.run_all(spark)
    finally:
        mp.undo()


def test_a_session_with_other_jars_keeps_them_and_attaches_the_bridge(reference, tmp_path):
    src = tmp_path / "src" / "sparkdltest"
    src.mkdir(parents=True)
    (src / "Other.java").write_text("package sparkdltest;\npublic class Other {\n"
                                    "  public static String hello() { return \"other jar\"; }\n}\n")
    subprocess.run(["javac", "-d", str(tmp_path / "classes"), str(src / "Other.java")], check=True, timeout=300)
    jar = tmp_path / "other.jar"
    subprocess.run(["jar", "cf", str(jar), "-C", str(tmp_path / "classes"), "."], check=True, timeout=300)
    r = _run(sys.executable, SCRIPT, "other-jar", str(jar))
    assert r["other_before"] == r["other_after"] == "other jar"
    assert r["bridge"] and r["warnings"] == []
    assert r["jars"] == ["other.jar", "sparkdl-bridge.jar"]
    assert {k: r[k] for k in DIGESTS} == reference


def test_spark_submit_without_jars_attaches_the_bridge(reference):
    spark_submit = shutil.which("spark-submit", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    r = _run(spark_submit, "--master", "local[2]", "--conf", "spark.ui.enabled=false", SCRIPT, "submit")
    assert r["master"] == "local[2]"
    assert r["bridge"] and r["warnings"] == []
    assert r["jars"] == ["sparkdl-bridge.jar"]  # shipped to the executors with SparkContext.addJar
    assert {k: r[k] for k in DIGESTS} == reference


def test_without_a_runtime_class_loader_the_python_paths_run_with_one_warning(reference, python_paths):
    r = _run(sys.executable, SCRIPT, "no-attach")
    assert not r["bridge"]
    assert len(r["warnings"]) == 1
    path = jvm.jar_path()
    assert f'.config("spark.jars", "{path}")' in r["warnings"][0]
    assert "takes no jars at run time" in r["warnings"][0]
    assert {k: r[k] for k in DIGESTS} == python_paths
    assert python_paths["classifier"] == reference["classifier"]  # the JVM reduce is bitwise the Python reduce
    assert python_paths["trainer"] == reference["trainer"]
