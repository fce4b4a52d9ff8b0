"""External tensor data are read only from the directory the caller names, and only inside it."""
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import sparkdl.onnx as sonnx  # noqa: E402
from sparkdl.onnx import OnnxImportError  # noqa: E402

W = np.array([1.5, -2.0, 0.25, 4.0], np.float32)


def _model_bytes(location, offset=0, length=W.nbytes):
    """y = x + w with ``w`` stored externally at ``location``."""
    w = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        w.external_data.add(key=k, value=v)
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "w.bin").write_bytes(b"\0" * 8 + W.tobytes())
    (tmp_path / "outside.bin").write_bytes(W.tobytes())
    return d


def test_data_inside_the_named_directory_are_read(model_dir):
    net = sonnx.load(_model_bytes("w.bin", offset=8), external_data_dir=model_dir)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(net.forward(x)[0], x + W)


def test_without_the_directory_the_model_is_refused_and_the_message_says_how(model_dir, monkeypatch):
    monkeypatch.chdir(model_dir)  # onnx itself would read w.bin from here
    with pytest.raises(OnnxImportError, match=r"initializer 'w' keeps its data in an external file.*"
                                              r"external_data_dir=DIR.*external_data=False"):
        sonnx.load(_model_bytes("w.bin", offset=8))


@pytest.mark.parametrize("location, message", [
    ("../outside.bin", "not a plain relative path"),
    ("sub/../../outside.bin", "not a plain relative path"),
    ("/etc/hostname", "not a plain relative path"),
    ("missing.bin", "not found in external_data_dir"),
])
def test_locations_outside_or_missing_are_refused(model_dir, location, message):
    with pytest.raises(OnnxImportError, match=message):
        sonnx.load(_model_bytes(location), external_data_dir=model_dir)


def test_a_symlink_leading_outside_is_refused(model_dir):
    os.symlink(model_dir.parent / "outside.bin", model_dir / "link.bin")
    with pytest.raises(OnnxImportError, match="leads outside external_data_dir"):
        sonnx.load(_model_bytes("link.bin"), external_data_dir=model_dir)


def test_a_range_past_the_end_of_the_file_is_refused(model_dir):
    with pytest.raises(OnnxImportError, match=r"bytes 16\.\.32 of 'w.bin', which has 24"):
        sonnx.load(_model_bytes("w.bin", offset=16, length=16), external_data_dir=model_dir)


def test_external_bytes_count_against_max_file_bytes(model_dir):
    data = _model_bytes("w.bin", offset=8)
    with pytest.raises(OnnxImportError, match="over the limit of"):
        sonnx.load(data, external_data_dir=model_dir, max_file_bytes=len(data) + W.nbytes - 1)
    sonnx.load(data, external_data_dir=model_dir, max_file_bytes=len(data) + W.nbytes)


def test_the_dynamo_exporters_default_file_pair_imports(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).eval()
    x = torch.randn(5, 8)
    path = tmp_path / "net.onnx"
    torch.onnx.export(net, (x,), str(path), dynamo=True, external_data=True)
    assert any(p.name != "net.onnx" for p in tmp_path.iterdir()), "the exporter wrote no external data file"
    with pytest.raises(OnnxImportError, match="external_data_dir"):
        sonnx.load(path)
    ours = sonnx.load(path, external_data_dir=tmp_path)
    with torch.no_grad():
        expected = net(x).numpy()
    np.testing.assert_allclose(ours.forward(x.numpy())[0], expected, rtol=1e-5, atol=1e-6)
