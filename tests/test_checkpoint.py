"""Checkpoints: bit-exact state round trips, the latest pointer, pruning, crash safety, corruption."""
import os

import numpy as np
import pytest

from sparkdl import nn
from sparkdl.io import ModelFormatError, list_checkpoints, load_checkpoint, save_checkpoint
from sparkdl.io import checkpoint as ckpt_mod


def mlp(seed=0):
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).initialize(seed)


class _Sched:
    def __init__(self):
        self.best, self.bad = float("inf"), 3

    def state_dict(self):
        return {"best": self.best, "bad": self.bad, "history": (0.5, np.float32(0.25))}


class _Opt:
    def get_config(self):
        return {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8}


def _assert_tree_equal(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _assert_tree_equal(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_tree_equal(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b)
    else:
        assert a == b


def test_full_roundtrip_bit_exact(tmp_path):
    m = mlp()
    rng = np.random.default_rng(42)
    rng.standard_normal(7)  # advance it
    state = {(0, 20): {"m": np.random.default_rng(0).standard_normal(20).astype(np.float32),
                       "v": np.full(20, 1e-30, np.float32), "step": 3},
             (20, 58): {"m": np.arange(38, dtype=np.float32), "v": np.zeros(38, np.float32), "step": 3}}
    extras = {"note": "hi", "nan": float("nan"), "big": 2 ** 100, "nested": [1, (2, 3), {"__x": 4}],
              "i64": np.int64(7), "none": None}
    path = save_checkpoint(tmp_path / "ck", m, iteration=12, epoch=2, samples_seen=1234, optimizer=_Opt(),
                           optimizer_state=state, schedule=_Sched(), rng=rng, extras=extras)
    assert os.path.basename(path) == "ckpt-12"
    assert sorted(os.listdir(path)) == ["checkpoint.json", "model", "state.npz"]
    assert (tmp_path / "ck" / "latest").read_text() == "ckpt-12\n"
    ck = load_checkpoint(tmp_path / "ck")
    assert (ck.iteration, ck.epoch, ck.samples_seen) == (12, 2, 1234)
    np.testing.assert_array_equal(ck.model.flat_parameters, m.flat_parameters)
    _assert_tree_equal(ck.optimizer_state, state)
    _assert_tree_equal(ck.extras, extras)
    _assert_tree_equal(ck.schedule_state, _Sched().state_dict())
    assert ck.optimizer_config == {"class": "_Opt", "config": {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8},
                                   "param_groups": None}
    np.testing.assert_array_equal(ck.rng.standard_normal(5), rng.standard_normal(5))


def test_mt19937_rng_state(tmp_path):
    rng = np.random.Generator(np.random.MT19937(5))
    rng.random(3)
    save_checkpoint(tmp_path, mlp(), iteration=1, rng=rng)
    ck = load_checkpoint(tmp_path)
    assert ck.rng.integers(0, 2 ** 62, 4).tolist() == rng.integers(0, 2 ** 62, 4).tolist()
    assert ck.optimizer_state is None and ck.schedule_state is None and ck.optimizer_config is None


def test_latest_which_and_pruning(tmp_path):
    d = tmp_path / "ck"
    assert list_checkpoints(d) == []
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(d)
    for it in (3, 10, 7):  # saving 7 last makes it "latest" even though 10 is larger
        save_checkpoint(d, mlp(it), iteration=it)
    assert list_checkpoints(d) == [3, 7, 10]
    assert load_checkpoint(d).iteration == 7
    assert load_checkpoint(d, 10).iteration == 10
    assert load_checkpoint(d, "ckpt-3").iteration == 3
    np.testing.assert_array_equal(load_checkpoint(d, 3).model.flat_parameters, mlp(3).flat_parameters)
    with pytest.raises(FileNotFoundError, match="have \\[3, 7, 10\\]"):
        load_checkpoint(d, 4)
    with pytest.raises(ValueError, match="which must be"):
        load_checkpoint(d, "best")
    save_checkpoint(d, mlp(20), iteration=20, keep_last=2)
    assert list_checkpoints(d) == [10, 20]
    save_checkpoint(d, mlp(21), iteration=21, keep_last=1)
    assert list_checkpoints(d) == [21]
    save_checkpoint(d, mlp(22), iteration=21, keep_last=1)  # re-saving an iteration replaces it
    np.testing.assert_array_equal(load_checkpoint(d).model.flat_parameters, mlp(22).flat_parameters)
    assert sorted(os.listdir(d)) == ["ckpt-21", "latest"]


def test_pointer_missing_falls_back_to_newest(tmp_path):
    for it in (1, 2):
        save_checkpoint(tmp_path, mlp(it), iteration=it)
    os.remove(tmp_path / "latest")
    assert load_checkpoint(tmp_path).iteration == 2
    (tmp_path / "latest").write_text("garbage")
    assert load_checkpoint(tmp_path).iteration == 2


def test_crash_while_writing_keeps_previous_checkpoint(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, mlp(1), iteration=3)

    def crash(*a, **k):
        raise KeyboardInterrupt  # killed mid-write
    monkeypatch.setattr(ckpt_mod, "write_model_files", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, mlp(2), iteration=5)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-3", "latest"]
    assert load_checkpoint(tmp_path).iteration == 3


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="iteration must be a non-negative int"):
        save_checkpoint(tmp_path, mlp(), iteration=-1)
    with pytest.raises(ValueError, match="keep_last"):
        save_checkpoint(tmp_path, mlp(), iteration=1, keep_last=0)
    with pytest.raises(TypeError, match=r"extras\[.f.\]: cannot save a builtin"):
        save_checkpoint(tmp_path, mlp(), iteration=1, extras={"f": print})
    with pytest.raises(TypeError, match="rng must be"):
        save_checkpoint(tmp_path, mlp(), iteration=1, rng=np.random.RandomState(0))
    assert list_checkpoints(tmp_path) == []


@pytest.mark.parametrize("fname", ["checkpoint.json", "state.npz", "model/weights.npz"])
def test_corruption_is_model_format_error(tmp_path, fname):
    state = {0: {"m": np.ones(50, np.float32), "step": 1}}
    path = save_checkpoint(tmp_path, mlp(), iteration=1, optimizer_state=state, rng=np.random.default_rng(0))
    target = os.path.join(path, fname)
    good = open(target, "rb").read()
    rng = np.random.default_rng(7)
    raised = 0
    for trial in range(20):
        data = bytearray(good)
        if trial % 2:
            data = data[:int(rng.integers(len(data)))]
        else:
            data[int(rng.integers(len(data)))] ^= int(rng.integers(1, 256))
        open(target, "wb").write(bytes(data))
        try:
            ck = load_checkpoint(tmp_path)
        except ModelFormatError:
            raised += 1
        else:
            assert fname == "checkpoint.json"  # a whitespace-only change
            _assert_tree_equal(ck.optimizer_state, state)
    assert raised >= 17


def test_through_pyarrow_filesystem(tmp_path):
    pafs = pytest.importorskip("pyarrow.fs")
    fs = pafs.LocalFileSystem()
    root = str(tmp_path / "arrow")
    for it in (1, 2, 3):
        save_checkpoint(root, mlp(it), iteration=it, keep_last=2, optimizer_state={"x": np.arange(it)},
                        filesystem=fs)
    assert list_checkpoints(root, filesystem=fs) == [2, 3]
    assert (tmp_path / "arrow" / "latest").read_text() == "ckpt-3\n"
    ck = load_checkpoint(root, filesystem=fs)
    assert ck.iteration == 3 and ck.optimizer_state["x"].tolist() == [0, 1, 2]
    np.testing.assert_array_equal(ck.model.flat_parameters, mlp(3).flat_parameters)
    assert load_checkpoint(tmp_path / "arrow", 2).iteration == 2  # same files through the local storage
