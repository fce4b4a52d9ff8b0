"""Model persistence: round trips, strict loading, corruption, atomic writes, pluggable file systems."""
import json
import os

import numpy as np
import pytest

from sparkdl import nn
from sparkdl.io import ModelFormatError, build_model, get_architecture, load_model, load_weights, save_model
from sparkdl.io import _format, model_io
from sparkdl.nn.module import Module


class IoTestScaleShift(Module):
    """y = x * scale + shift + offset (offset is a buffer, updated in training like running stats)."""

    def __init__(self, num_features: int, momentum: float = 0.1):
        super().__init__()
        self.num_features, self.momentum = num_features, momentum
        self.add_parameter("scale", (num_features,))
        self.add_parameter("shift", (num_features,))
        self.add_buffer("offset", np.zeros(num_features))
        self.reset_parameters(np.random.default_rng())

    def reset_parameters(self, rng):
        self.scale[...] = rng.uniform(0.5, 1.5, self.num_features)
        self.shift[...] = rng.standard_normal(self.num_features)

    def forward(self, x, *, training=False, rng=None):
        if training:
            self.offset[...] = (1 - self.momentum) * self.offset + self.momentum * x.mean(axis=0)
        return x * self.scale + self.shift + self.offset, x

    def backward(self, cache, grad_y, grad_params):
        g = self.grad_views(grad_params)
        g["scale"][...] = (grad_y * cache).sum(0)
        g["shift"][...] = grad_y.sum(0)
        return grad_y * self.scale

    def get_config(self):
        return {"num_features": self.num_features, "momentum": self.momentum}


def mlp(seed=0):
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)).initialize(seed)


def fancy(seed=0):
    """Containers, buffers (a test layer's and BatchNorm's)."""
    body = [nn.Linear(8, 8), IoTestScaleShift(8), nn.BatchNorm1d(8)]
    m = nn.Sequential(nn.Linear(5, 8), nn.Residual(nn.Sequential(*body)),
                      nn.Concat(nn.Linear(8, 2), nn.Sequential(nn.ReLU(), nn.Linear(8, 3))), nn.ReLU())
    m.initialize(seed)
    x = np.random.default_rng(9).standard_normal((16, 5)).astype(np.float32)
    m.forward(x.astype(m.dtype), training=True, rng=np.random.default_rng(0))  # move the buffers off init
    return m


X6 = np.random.default_rng(1).standard_normal((7, 6)).astype(np.float32)
X5 = np.random.default_rng(2).standard_normal((7, 5)).astype(np.float32)


def _same_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        assert sa[k].dtype == sb[k].dtype
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)


@pytest.mark.parametrize("make,x", [(mlp, X6), (fancy, X5)], ids=["mlp", "containers-buffers"])
def test_roundtrip_identical_predictions(tmp_path, make, x):
    m = make()
    path = save_model(m, tmp_path / "model")
    assert sorted(os.listdir(path)) == ["metadata.json", "weights.npz"]
    m2 = load_model(path)
    assert type(m2) is type(m) and repr(m2) == repr(m)
    _same_state(m, m2)
    np.testing.assert_array_equal(m2(x), m(x))
    np.testing.assert_array_equal(m2.flat_buffers, m.flat_buffers)
    if make is fancy:
        assert np.any(m.flat_buffers != 0)  # trained buffers, not their initial values, were restored


def test_roundtrip_cnn(tmp_path):
    conv, pool, gap, bn, flat = nn.Conv2d, nn.MaxPool2d, nn.AdaptiveAvgPool2d, nn.BatchNorm2d, nn.Flatten
    m = nn.Sequential(conv(2, 4, 3, padding=1), bn(4), nn.ReLU(), pool(2),
                      nn.Residual(nn.Sequential(conv(4, 4, (3, 1), padding=(1, 0)), bn(4))),
                      conv(4, 3, 3, stride=2, bias=False), gap(1), flat())
    m.initialize(3)
    x = np.random.default_rng(0).standard_normal((2, 2, 12, 12)).astype(np.float32)
    m.forward(x, training=True, rng=np.random.default_rng(0))  # running statistics move off their init
    assert np.any(m.flat_buffers[m.flat_buffers != 1] != 0)
    m2 = load_model(save_model(m, tmp_path / "cnn"))
    assert get_architecture(m2) == get_architecture(m)
    np.testing.assert_array_equal(m2(x), m(x))


def test_roundtrip_float64_and_metadata(tmp_path):
    m = mlp().astype(np.float64)
    path = save_model(m, str(tmp_path / "m64"))
    meta = json.loads(open(os.path.join(path, "metadata.json")).read())
    assert meta["format_version"] == 1 and meta["class"] == "Sequential" and meta["dtype"] == "float64"
    assert meta["parameters"] == [["0.weight", [16, 6]], ["0.bias", [16]], ["2.weight", [3, 16]], ["2.bias", [3]]]
    assert meta["architecture"]["children"][0][1] == {"class": "Linear", "children": [],
                                                      "config": {"in_features": 6, "out_features": 16, "bias": True}}
    with np.load(os.path.join(path, "weights.npz")) as z:
        assert sorted(z.files) == sorted(m.state_dict())
    m2 = load_model(path)
    assert m2.dtype == np.float64
    np.testing.assert_array_equal(m2(X6.astype(np.float64)), m(X6.astype(np.float64)))


def test_architecture_as_data_roundtrip():
    m = fancy()
    spec = get_architecture(m)
    json.dumps(spec)  # plain data
    m2 = build_model(spec)
    assert get_architecture(m2) == spec
    assert m2.parameter_layout().names() == m.parameter_layout().names()


def _rewrite(path, meta_edit=None, arrays_edit=None):
    """Edit a saved model *consistently* (checksums recomputed), to reach the checks behind them."""
    mpath, wpath = os.path.join(path, "metadata.json"), os.path.join(path, "weights.npz")
    meta = _format.load_json(open(mpath, "rb").read(), "meta")
    if arrays_edit:
        with np.load(wpath) as z:
            arrays = {k: z[k] for k in z.files}
        arrays_edit(arrays)
        data = _format.npz_bytes(arrays)
        open(wpath, "wb").write(data)
        meta["weights"].update(bytes=len(data), sha256=_format.sha256(data))
    if meta_edit:
        meta_edit(meta)
    open(mpath, "wb").write(_format.dump_json(meta))


def test_strict_load_lists_every_problem(tmp_path):
    path = save_model(mlp(), tmp_path / "m")

    def edit(a):
        del a["0.bias"], a["2.weight"]
        a["extra.weight"] = np.zeros(2, np.float32)
        a["0.weight"] = np.zeros((16, 7), np.float32)
    _rewrite(path, arrays_edit=edit)
    with pytest.raises(ModelFormatError) as e:
        load_model(path)
    msg = str(e.value)
    for s in ("missing keys ['0.bias', '2.weight']", "unexpected keys ['extra.weight']",
              "0.weight: model (16, 6), saved (16, 7)"):
        assert s in msg


def test_load_weights_into_other_model(tmp_path):
    path = save_model(mlp(0), tmp_path / "m")
    target = mlp(5)
    load_weights(target, path)
    _same_state(target, mlp(0))
    other = nn.Sequential(nn.Linear(6, 9), nn.ReLU(), nn.Linear(9, 3), nn.ReLU(), nn.Linear(3, 3))
    with pytest.raises(ValueError) as e:
        load_weights(other, path)
    msg = str(e.value)
    assert "missing keys ['4.weight', '4.bias']" in msg
    assert "0.weight: model (9, 6), saved (16, 6)" in msg and "2.weight: model (3, 9), saved (3, 16)" in msg
    target64 = mlp(7).astype(np.float64)
    load_weights(target64, path)  # cast to the model's dtype
    np.testing.assert_array_equal(target64.flat_parameters, mlp(0).flat_parameters.astype(np.float64))


def test_unknown_class_and_bad_config(tmp_path):
    path = save_model(mlp(), tmp_path / "m")
    _rewrite(path, meta_edit=lambda m: m["architecture"]["children"][1][1].update({"class": "NoSuchLayer"}))
    with pytest.raises(ModelFormatError, match="unknown module class 'NoSuchLayer'"):
        load_model(path)
    path = save_model(mlp(), tmp_path / "m2")
    _rewrite(path, meta_edit=lambda m: m["architecture"]["children"][0][1]["config"].update({"in_features": -1}))
    with pytest.raises(ModelFormatError, match="Linear.from_config failed"):
        load_model(path)
    path = save_model(mlp(), tmp_path / "m3")
    _rewrite(path, meta_edit=lambda m: m.update({"format_version": 99}))
    with pytest.raises(ModelFormatError, match="newer sparkdl"):
        load_model(path)


def test_unknown_class_must_never_import(tmp_path):
    path = save_model(mlp(), tmp_path / "m")
    _rewrite(path, meta_edit=lambda m: m["architecture"].update({"class": "os.system"}))
    with pytest.raises(ModelFormatError, match="unknown module class"):
        load_model(path)


@pytest.mark.parametrize("fname", ["metadata.json", "weights.npz"])
def test_random_corruptions_raise_only_model_format_error(tmp_path, fname):
    m = mlp()
    path = save_model(m, tmp_path / "m")
    target = os.path.join(path, fname)
    good = open(target, "rb").read()
    rng = np.random.default_rng(1234)
    raised = 0
    for trial in range(50):
        data = bytearray(good)
        kind = trial % 3
        if kind == 0:  # truncate
            data = data[:int(rng.integers(0, len(data)))]
        else:  # flip 1 or 3 bytes
            for _ in range(1 if kind == 1 else 3):
                data[int(rng.integers(len(data)))] ^= int(rng.integers(1, 256))
        open(target, "wb").write(bytes(data))
        try:
            m2 = load_model(path)
        except ModelFormatError:
            raised += 1
        else:  # only harmless whitespace changes in the JSON may load, and then the model is identical
            assert fname == "metadata.json"
            _same_state(m, m2)
    assert raised >= 45
    os.remove(target)
    with pytest.raises(ModelFormatError, match="missing|not a sparkdl model"):
        load_model(path)


def test_missing_and_foreign_paths(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "nothing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ModelFormatError, match="not a sparkdl model directory"):
        load_model(tmp_path / "plain")
    with pytest.raises(TypeError, match="path must be"):
        save_model(mlp(), 123)


def test_overwrite_semantics(tmp_path):
    path = str(tmp_path / "sub" / "m")
    save_model(mlp(0), path)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_model(mlp(1), path)
    _same_state(load_model(path), mlp(0))
    save_model(mlp(1), path, overwrite=True)
    _same_state(load_model(path), mlp(1))
    assert os.listdir(tmp_path / "sub") == ["m"]  # no temp or old directories left behind
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("user data")
    with pytest.raises(FileExistsError, match="not a sparkdl artefact"):
        save_model(mlp(), foreign, overwrite=True)
    assert (foreign / "keep.txt").read_text() == "user data"


def test_failed_write_leaves_target_untouched(tmp_path, monkeypatch):
    path = str(tmp_path / "m")
    save_model(mlp(0), path)
    real = model_io.npz_bytes

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(model_io, "npz_bytes", boom)
    with pytest.raises(OSError, match="disk full"):
        save_model(mlp(1), path, overwrite=True)
    with pytest.raises(OSError, match="disk full"):
        save_model(mlp(1), tmp_path / "new")
    monkeypatch.setattr(model_io, "npz_bytes", real)
    _same_state(load_model(path), mlp(0))
    assert sorted(os.listdir(tmp_path)) == ["m"]


class NotJsonLayer(Module):
    def get_config(self):
        return {"fn": print}


def test_unserialisable_config_fails_before_writing(tmp_path):
    with pytest.raises(TypeError, match="JSON-serialisable"):
        save_model(nn.Sequential(NotJsonLayer()), tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_pyarrow_filesystem_and_uri(tmp_path):
    pafs = pytest.importorskip("pyarrow.fs")
    m = fancy()
    path = save_model(m, str(tmp_path / "arrow"), filesystem=pafs.LocalFileSystem())
    _same_state(load_model(path, filesystem=pafs.LocalFileSystem()), m)
    _same_state(load_model("file://" + str(tmp_path / "arrow")), m)
    with pytest.raises(FileExistsError):
        save_model(m, str(tmp_path / "arrow"), filesystem=pafs.LocalFileSystem())
    save_model(mlp(), str(tmp_path / "arrow"), overwrite=True, filesystem=pafs.LocalFileSystem())
    _same_state(load_model(tmp_path / "arrow"), mlp())
