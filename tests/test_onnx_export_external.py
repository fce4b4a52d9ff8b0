"""ONNX export with the weights in a data file beside the model (ONNX external data): written above a size
threshold or on request, read back by sparkdl (given the directory) and onnxruntime, refused where protobuf's
2 GiB limit would be crossed; a second export replaces both files."""
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import sparkdl.onnx as sonnx  # noqa: E402
from sparkdl import models  # noqa: E402
from sparkdl.onnx import export  # noqa: E402


def _mlp(seed):
    return models.mlp(in_features=64, hidden=(512, 256), num_classes=10).initialize(seed)  # ~0.6 MB of weights


def _x():
    return np.random.default_rng(0).standard_normal((5, 64)).astype(np.float32)


def test_external_data_round_trip_through_sparkdl_and_onnxruntime(tmp_path):
    net = _mlp(0)
    path = str(tmp_path / "mlp.onnx")
    assert sonnx.save(net, path, (64,), external_data=True) == path
    data = tmp_path / "mlp.onnx.data"
    assert data.stat().st_size >= 4 * (64 * 512 + 512 * 256)  # the weights are in the data file ...
    assert os.path.getsize(path) < 20_000  # ... not in the model file
    assert sorted(os.listdir(tmp_path)) == ["mlp.onnx", "mlp.onnx.data"]  # no temporary left behind
    with pytest.raises(sonnx.OnnxImportError, match="external_data_dir"):
        sonnx.load(path)  # sparkdl opens no other file unless told which directory to trust
    back = sonnx.load(path, external_data_dir=tmp_path)
    np.testing.assert_array_equal(back(_x()), net(_x()))
    ort = pytest.importorskip("onnxruntime")
    out = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"input": _x()})[0]
    np.testing.assert_allclose(out, net(_x()), rtol=1e-5, atol=1e-6)


def test_the_threshold_decides_by_default(tmp_path, monkeypatch):
    net = _mlp(0)
    sonnx.save(net, str(tmp_path / "small.onnx"), (64,))
    assert not (tmp_path / "small.onnx.data").exists()  # 0.6 MB: below the default 1 GiB
    monkeypatch.setattr(export, "EXTERNAL_DATA_BYTES", 100_000)
    sonnx.save(net, str(tmp_path / "large.onnx"), (64,))
    assert (tmp_path / "large.onnx.data").exists()
    np.testing.assert_array_equal(sonnx.load(str(tmp_path / "large.onnx"), external_data_dir=tmp_path)(_x()),
                                  net(_x()))


def test_a_second_export_replaces_model_and_data(tmp_path):
    path = str(tmp_path / "m.onnx")
    sonnx.save(_mlp(0), path, (64,), external_data=True)
    second = _mlp(1)
    sonnx.save(second, path, (64,), external_data=True)
    np.testing.assert_array_equal(sonnx.load(path, external_data_dir=tmp_path)(_x()), second(_x()))


def test_weights_over_protobufs_limit_are_refused_before_anything_is_written(tmp_path, monkeypatch):
    net = _mlp(0)
    monkeypatch.setattr(export, "MAX_PROTO_BYTES", (1 << 20) + 400_000)  # the margin for the graph is 1 MiB
    with pytest.raises(ValueError, match="external_data=True"):
        sonnx.save(net, str(tmp_path / "inline.onnx"), (64,), external_data=False)
    sonnx.save(net, str(tmp_path / "ok.onnx"), (64,))  # the default moves them out instead
    monkeypatch.setattr(export, "MAX_PROTO_BYTES", 100_000)
    with pytest.raises(ValueError, match=r"'3\.weight' holds 524288 bytes"):  # one tensor over the limit
        sonnx.save(net, str(tmp_path / "big.onnx"), (64,), external_data=True)
    assert sorted(os.listdir(tmp_path)) == ["ok.onnx", "ok.onnx.data"]
