"""Executor-local copies of training partitions (no Spark needed)."""
import numpy as np

from sparkdl.engine import local_cache


def test_store_then_load_returns_the_arrays(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{tmp_path},/nonexistent")
    monkeypatch.setattr(local_cache, "_OPEN", {})
    x = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    y = np.array([3, 1, 0, 2])
    assert local_cache.load("app-7", 1) is None
    local_cache.store("app-7", 1, x, y)
    got_x, got_y = local_cache.load("app-7", 1)
    np.testing.assert_array_equal(got_x, x)
    np.testing.assert_array_equal(got_y, y)
    assert got_x.dtype == np.float32 and got_x.shape == (4, 2, 3)
    assert not got_x.flags.writeable  # memory-mapped read-only
    assert local_cache.load("app-7", 0) is None and local_cache.load("app-8", 1) is None
    assert not list(tmp_path.rglob("*.tmp"))  # written atomically, nothing left behind
    assert sorted(p.name for p in tmp_path.rglob("*.npy")) == ["part-00001-x.npy", "part-00001-y.npy"]


def test_store_keeps_the_first_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))
    monkeypatch.setattr(local_cache, "_OPEN", {})
    local_cache.store("k", 0, np.zeros((2, 2), np.float32), np.zeros(2))
    local_cache.store("k", 0, np.ones((2, 2), np.float32), np.ones(2))
    x, _ = local_cache.load("k", 0)
    assert x.sum() == 0.0


def test_unwritable_directory_means_no_copy(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(blocker))
    monkeypatch.setattr(local_cache, "_OPEN", {})
    local_cache.store("k", 0, np.zeros((2, 2), np.float32), np.zeros(2))  # no exception
    assert local_cache.load("k", 0) is None
