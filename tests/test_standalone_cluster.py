"""A real standalone cluster: a master and two workers (one core, 1 GiB each) started from the installed pyspark
on 127.0.0.1, then the README's ``spark-submit --master spark://...`` command for
``examples/train_lenet5_mnist.py`` on a subset of MNIST, and the README's DLClassifier pipeline (fit, transform,
save, load) in a plain session of that master. Both workers must run executors of both applications."""
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from pyspark.find_spark_home import _find_spark_home

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "train_lenet5_mnist.py")
PIPELINE = os.path.join(ROOT, "tests", "scripts", "standalone_pipeline.py")

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp) -> dict:
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp), "PYSPARK_PYTHON": sys.executable,
            "SPARK_CONF_DIR": str(tmp / "conf")}


def _wait(what, check, timeout=180.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"standalone cluster: {what} not ready after {timeout:.0f} s")


def _alive_workers(ui_port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
        return sum(w["state"] == "ALIVE" for w in json.load(r)["workers"])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``(master URL, [worker work dirs], env)``; the processes are stopped by pid at the end (logs in tmp)."""
    tmp = tmp_path_factory.mktemp("standalone")
    (tmp / "conf").mkdir()
    spark_class = os.path.join(_find_spark_home(), "bin", "spark-class")
    env = _env(tmp)
    port, ui = _free_port(), _free_port()
    master = f"spark://127.0.0.1:{port}"
    procs, work_dirs = [], []

    def start(name, *args):
        log = open(tmp / f"{name}.log", "w")
        procs.append(subprocess.Popen([spark_class, *args], stdout=log, stderr=subprocess.STDOUT, env=env))
        log.close()
    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(ui))
        _wait("the master", lambda: socket.create_connection(("127.0.0.1", port), timeout=2).close() or True)
        for i in (1, 2):
            work = tmp / f"worker{i}"
            work_dirs.append(work)
            start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1",
                  "--cores", "1", "--memory", "1g", "--webui-port", str(_free_port()), "--work-dir", str(work))
        _wait("two workers", lambda: _alive_workers(ui) == 2)
        yield master, work_dirs, env
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _apps_with_executors(work_dir) -> set:
    """Application ids for which this worker launched an executor (``<work dir>/<app id>/<executor id>/``)."""
    if not work_dir.is_dir():
        return set()
    return {app.name for app in work_dir.iterdir() if app.is_dir() and any(p.is_dir() for p in app.iterdir())}


def test_readme_spark_submit_and_a_pipeline_on_two_workers(cluster, tmp_path, mnist_cached):
    master, work_dirs, env = cluster
    submit = shutil.which("spark-submit", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    # The README's command (its cluster section), on a subset of MNIST.
    cmd = [submit, "--master", master, "--conf", f"spark.pyspark.python={sys.executable}", EXAMPLE,
           "--limit", "2048", "--test-limit", "1000", "--epochs", "1", "--batch-size", "256", "--partitions", "2",
           "--output", str(tmp_path / "run"), "--no-progress", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-4000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["master"] == master and r["iterations"] == 8 and r["partitions"] == 2
    assert r["test_accuracy"] > 0.5  # one epoch of 2048 images
    assert os.path.isfile(tmp_path / "run" / "model" / "metadata.json")

    out = subprocess.run([sys.executable, PIPELINE, master, str(tmp_path)], capture_output=True, text=True,
                         timeout=600, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-4000:]
    p = json.loads(out.stdout.strip().splitlines()[-1])
    assert p["accuracy"] > 0.9 and p["same_after_load"]
    assert len(p["task_jvms"]) == 2 and p["driver_jvm"] not in p["task_jvms"]  # the bridge, attached at run time
    apps = [_apps_with_executors(w) for w in work_dirs]
    assert all(p["app"] in a for a in apps)  # both workers ran executors of the pipeline's application
    assert all(len(a) == 2 for a in apps)  # and of the spark-submit application
