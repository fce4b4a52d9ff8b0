"""numba on executors (sparkdl.config): caching without writable directories, corrupt cache entries,
concurrent and forked callers of parallel kernels. Every case runs in a fresh interpreter."""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Runs a parallel kernel and checks its value against numpy (float64 sum of squares).
KERNEL = textwrap.dedent("""
    import numpy as np
    import sparkdl.nn  # decorates every kernel of the library
    from sparkdl.optim.clip import partial_sq_norm
    g = np.linspace(-1, 1, 50_000, dtype=np.float32)
    expected = float(np.sum(g.astype(np.float64) ** 2))
    assert abs(partial_sq_norm(g) - expected) <= 1e-9 * expected, (partial_sq_norm(g), expected)
""")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "SPARK_LOCAL_DIRS"))}
    env.update({"PYTHONPATH": ROOT, "PYTHONWARNINGS": "default"}, **extra)
    return env


#: As root, file permissions only bind a process without these capabilities.
NO_DAC = ["setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]


def _run(code, env, restricted=False, timeout=600):
    """``python -c code`` in the directory of the sparkdl it should import (the first PYTHONPATH entry);
    ``restricted``: obey file permissions even as root."""
    prefix = NO_DAC if restricted and os.geteuid() == 0 else []
    return subprocess.run([*prefix, sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=env["PYTHONPATH"].split(os.pathsep)[0])


@pytest.fixture()
def cache_dir():
    d = tempfile.mkdtemp(prefix="sparkdl-numba-test-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- (a) writable


@pytest.fixture()
def read_only_install():
    """A copy of the package and a HOME that the test process cannot write."""
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("as root, needs setpriv to run a process that obeys file permissions")
    base = tempfile.mkdtemp(prefix="sparkdl-ro-")
    os.chmod(base, 0o755)
    pkg, home, scratch = (os.path.join(base, d) for d in ("site", "home", "scratch"))
    shutil.copytree(os.path.join(ROOT, "sparkdl"), os.path.join(pkg, "sparkdl"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    os.makedirs(home)
    os.makedirs(scratch)
    os.chmod(scratch, 0o777)
    for d, _, files in os.walk(pkg):
        os.chmod(d, 0o555)
        for f in files:
            os.chmod(os.path.join(d, f), 0o444)
    os.chmod(home, 0o555)
    yield pkg, home, scratch
    for d, _, _ in os.walk(base):
        os.chmod(d, 0o755)
    shutil.rmtree(base, ignore_errors=True)


def test_import_and_run_with_unwritable_package_and_home_caches_in_temp(read_only_install):
    pkg, home, scratch = read_only_install
    env = _env(PYTHONPATH=pkg, HOME=home, TMPDIR=scratch)
    env.pop("XDG_CACHE_HOME", None)
    out = _run(KERNEL + "import sparkdl; assert sparkdl.__file__.startswith(%r)\n" % pkg, env, restricted=True)
    assert out.returncode == 0, out.stderr[-3000:]
    cached = [f for _, _, fs in os.walk(scratch) for f in fs if f.endswith(".nbi")]
    assert any(f.startswith("clip._block_sq_sums") for f in cached), cached
    assert "no locator" not in out.stderr


def test_spark_local_dir_is_preferred_to_temp(read_only_install):
    pkg, home, scratch = read_only_install
    local = os.path.join(scratch, "spark-local")
    os.makedirs(local)
    os.chmod(local, 0o777)
    env = _env(PYTHONPATH=pkg, HOME=home, TMPDIR=scratch, SPARK_LOCAL_DIRS=local + ",/nonexistent")
    env.pop("XDG_CACHE_HOME", None)
    out = _run(KERNEL, env, restricted=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert any(f.endswith(".nbi") for _, _, fs in os.walk(local) for f in fs)


def test_no_writable_directory_at_all_turns_caching_off_with_one_warning(read_only_install):
    pkg, home, scratch = read_only_install
    os.chmod(scratch, 0o555)
    env = _env(PYTHONPATH=pkg, HOME=home, TMPDIR=scratch)
    env.pop("XDG_CACHE_HOME", None)
    # tempfile would fall back to /tmp: make the unwritable TMPDIR its only choice
    code = "import tempfile; tempfile.tempdir = %r\n" % scratch + KERNEL
    out = _run(code, env, restricted=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr.count("sparkdl: numba kernels are not cached") == 1, out.stderr[-3000:]


# ---------------------------------------------------------------------------------------------- (b) corrupt


@pytest.mark.parametrize("which", ["index", "data"])
def test_truncated_cache_entry_is_recompiled(cache_dir, which):
    env = _env(NUMBA_CACHE_DIR=cache_dir)
    first = _run(KERNEL, env)
    assert first.returncode == 0, first.stderr[-3000:]
    suffix = ".nbi" if which == "index" else ".nbc"
    files = [os.path.join(d, f) for d, _, fs in os.walk(cache_dir) for f in fs
             if f.startswith("clip._block_sq_sums") and f.endswith(suffix)]
    assert files
    for f in files:
        with open(f, "r+b") as fh:
            size = os.path.getsize(f)
            fh.truncate(size // 2)
    second = _run(KERNEL, env)
    assert second.returncode == 0, second.stderr[-3000:]
    assert all(os.path.getsize(f) > 0 for f in files)
    # The rewritten entry is valid again: a third process loads it without recompiling.
    third = _run(KERNEL + "from sparkdl.optim.clip import _block_sq_sums as k\n"
                 "assert sum(k.stats.cache_hits.values()) == 1, k.stats\n", env)
    assert third.returncode == 0, third.stderr[-3000:]


# ---------------------------------------------------------------------------------------------- (c), (d)

THREADS = KERNEL + textwrap.dedent("""
    import threading
    errors = []
    def work():
        try:
            for _ in range(200):
                assert abs(partial_sq_norm(g) - expected) <= 1e-9 * expected
        except BaseException as e:
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads: t.start()
    for t in threads: t.join()
    assert not errors, errors
""")


@pytest.mark.parametrize("layer", [None, "workqueue"])
def test_threads_calling_parallel_kernels_at_once_do_not_abort(cache_dir, layer):
    env = _env(NUMBA_CACHE_DIR=cache_dir, **({"NUMBA_THREADING_LAYER": layer} if layer else {}))
    out = _run(THREADS, env)
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])


FORK = KERNEL + textwrap.dedent("""
    import os
    pid = os.fork()
    if pid == 0:
        ok = abs(partial_sq_norm(g) - expected) <= 1e-9 * expected
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    assert code == 0, f"forked child ended with {code}"
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_process_forked_after_parallel_kernels_ran_can_run_them(cache_dir):
    out = _run(FORK, _env(NUMBA_CACHE_DIR=cache_dir))
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])


def test_threading_layer_is_thread_and_fork_safe_or_serialized():
    code = ("import sparkdl.config as c, numba\n"
            "print(c.threading_layer(), c.serializes_parallel_kernels())\n")
    out = _run(code, _env())
    assert out.returncode == 0, out.stderr[-3000:]
    layer, serialized = out.stdout.split()
    assert layer in ("tbb", "workqueue")
    assert serialized == str(layer == "workqueue")
    out = _run(code, _env(NUMBA_THREADING_LAYER="omp"))  # the user's explicit choice is kept
    assert out.stdout.split() == ["omp", "False"], out.stderr[-2000:]
