"""An ONNX file is untrusted input: it opens no other file, and its size and computed constants are capped.

Each crafted file puts a tensor with ``data_location = EXTERNAL`` in one place a tensor can appear, naming a
file that exists in the working directory (as ``.ssh/id_rsa`` would in a notebook started in ``$HOME``).
"""
import os
import time

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import sparkdl.onnx as sonnx  # noqa: E402
from sparkdl.onnx import OnnxImportError  # noqa: E402

SECRET = np.array([0x5EC12E7, 7, 11, 13], np.int64)


@pytest.fixture
def secret_cwd(tmp_path, monkeypatch):
    """A working directory holding ``secret.bin`` (int64 data an external tensor could name)."""
    (tmp_path / "secret.bin").write_bytes(SECRET.tobytes())
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _external(name="leak", dtype=np.int64, shape=(4,)):
    t = numpy_helper.from_array(np.zeros(shape, dtype), name)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "secret.bin"), ("offset", "0"), ("length", str(SECRET.nbytes))):
        t.external_data.add(key=k, value=v)
    return t


def _model(nodes, initializer=(), sparse_initializer=(), functions=(), opset=17):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=list(initializer),
                              sparse_initializer=list(sparse_initializer))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], functions=list(functions))
    return model.SerializeToString()


def _assert_refused(data, where):
    with pytest.raises(OnnxImportError, match="keeps its data in an external file") as info:
        sonnx.load(data)
    assert where in str(info.value)
    assert "secret" not in str(info.value).replace("secret.bin", "")
    return str(info.value)


def test_onnx_itself_would_read_the_named_file(secret_cwd):
    """The threat is real: onnx's own reader opens ``location`` relative to the working directory."""
    np.testing.assert_array_equal(numpy_helper.to_array(_external()), SECRET)


def test_external_initializer_refused(secret_cwd):
    add = helper.make_node("Add", ["x", "w"], ["y"])
    _assert_refused(_model([add], initializer=[_external("w", np.float32, (4,))]), "initializer 'w'")


def test_external_constant_node_value_refused(secret_cwd):
    const = helper.make_node("Constant", [], ["shape"], value=_external(), name="c")
    reshape = helper.make_node("Reshape", ["x", "shape"], ["y"])
    _assert_refused(_model([const, reshape]), "node 'c' (Constant), attribute 'value'")


def test_external_constant_of_shape_value_refused(secret_cwd):
    shape = helper.make_node("Shape", ["x"], ["s"])
    cos = helper.make_node("ConstantOfShape", ["s"], ["z"], value=_external(shape=(1,)), name="cos")
    add = helper.make_node("Add", ["x", "z"], ["y"])
    _assert_refused(_model([shape, cos, add]), "node 'cos' (ConstantOfShape), attribute 'value'")


def test_external_tensor_in_a_subgraph_refused(secret_cwd):
    inner = helper.make_graph([helper.make_node("Constant", [], ["o"], value=_external(), name="inner")], "then",
                              [], [helper.make_tensor_value_info("o", TensorProto.INT64, [4])])
    cond = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(True)))
    if_node = helper.make_node("If", ["c"], ["y"], then_branch=inner, else_branch=inner, name="branch")
    message = _assert_refused(_model([cond, if_node]), "subgraph 'then'")
    assert "node 'inner' (Constant)" in message


def test_external_tensors_list_and_sparse_attribute_refused(secret_cwd):
    node = helper.make_node("Identity", ["x"], ["y"], name="odd")
    node.attribute.append(helper.make_attribute("many", [_external()]))
    _assert_refused(_model([node]), "node 'odd' (Identity), attribute 'many'")
    sparse = helper.make_sparse_tensor(_external("v", np.float32, (2,)),
                                       numpy_helper.from_array(np.array([0, 3], np.int64), "i"), [4])
    node = helper.make_node("Constant", [], ["s"], sparse_value=sparse, name="sp")
    _assert_refused(_model([node, helper.make_node("Identity", ["x"], ["y"])]), "attribute 'sparse_value' (values)")


def test_external_sparse_initializer_refused(secret_cwd):
    sparse = helper.make_sparse_tensor(_external("v", np.float32, (2,)),
                                       numpy_helper.from_array(np.array([0, 3], np.int64), "i"), [4])
    _assert_refused(_model([helper.make_node("Identity", ["x"], ["y"])], sparse_initializer=[sparse]),
                    "sparse initializer 'v'")


def test_external_tensor_in_a_local_function_refused(secret_cwd):
    body = [helper.make_node("Constant", [], ["o"], value=_external(), name="fc")]
    fn = helper.make_function("custom", "leaky", [], ["o"], body, [helper.make_opsetid("", 17)])
    _assert_refused(_model([helper.make_node("Identity", ["x"], ["y"])], functions=[fn]), "function 'leaky'")


def test_refusal_does_not_depend_on_whether_the_file_exists(tmp_path, monkeypatch):
    """Same message with and without the named file: the importer is no oracle for what exists."""
    const = helper.make_node("Constant", [], ["shape"], value=_external(), name="c")
    data = _model([const, helper.make_node("Reshape", ["x", "shape"], ["y"])])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OnnxImportError) as absent:
        sonnx.load(data)
    (tmp_path / "secret.bin").write_bytes(SECRET.tobytes())
    with pytest.raises(OnnxImportError) as present:
        sonnx.load(data)
    assert str(absent.value) == str(present.value)


def _shape_model(op, shape, extra_nodes=()):
    const = helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array(shape, np.int64)))
    if op == "ConstantOfShape":
        node = helper.make_node("ConstantOfShape", ["shape"], ["big"], name="huge")
    else:  # Expand of a constant
        one = helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.ones(1, np.float32)))
        node = helper.make_node("Expand", ["one", "shape"], ["big"], name="huge")
        extra_nodes = [one, *extra_nodes]
    red = helper.make_node("ReduceMean", ["big"], ["m"], keepdims=0)
    add = helper.make_node("Add", ["x", "m"], ["y"])
    return _model([const, *extra_nodes, node, red, add])


@pytest.mark.parametrize("op", ["ConstantOfShape", "Expand"])
def test_a_tiny_file_cannot_ask_for_terabytes(op):
    data = _shape_model(op, [10 ** 6, 10 ** 6])  # 10**12 elements from a file of a few hundred bytes
    assert len(data) < 500
    start = time.perf_counter()
    with pytest.raises(OnnxImportError, match=r"node 'huge' \(" + op + r"\).*1,000,000,000,000 elements.*limit"):
        sonnx.load(data)
    assert time.perf_counter() - start < 30  # refused before anything was allocated (not a timing benchmark)


def test_broadcasting_fold_is_capped_before_it_runs():
    a = numpy_helper.from_array(np.ones((100_000, 1), np.float32), "a")
    b = numpy_helper.from_array(np.ones((1, 100_000), np.float32), "b")
    nodes = [helper.make_node("Constant", [], ["ca"], value=a), helper.make_node("Constant", [], ["cb"], value=b),
             helper.make_node("Mul", ["ca", "cb"], ["big"], name="outer"),
             helper.make_node("ReduceMean", ["big"], ["m"], keepdims=0), helper.make_node("Add", ["x", "m"], ["y"])]
    with pytest.raises(OnnxImportError, match=r"node 'outer' \(Mul\).*10,000,000,000 elements"):
        sonnx.load(_model(nodes))


def test_folded_constants_within_the_cap_import_and_the_cap_is_an_argument():
    data = _shape_model("ConstantOfShape", [3, 4])  # ConstantOfShape 12 + ReduceMean 12 elements folded
    model = sonnx.load(data)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(model.forward(x)[0], x)  # mean of zeros added
    sonnx.load(data, max_folded_elements=24)
    with pytest.raises(OnnxImportError, match="max_folded_elements"):
        sonnx.load(data, max_folded_elements=23)


def test_file_size_cap(tmp_path):
    data = _shape_model("ConstantOfShape", [3, 4])
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    assert sonnx.load(path, max_file_bytes=len(data)) is not None
    for source in (path, data):
        with pytest.raises(OnnxImportError, match=f"{len(data):,} bytes, over the limit of {len(data) - 1:,}"):
            sonnx.load(source, max_file_bytes=len(data) - 1)


@pytest.mark.parametrize("kwargs", [{"max_file_bytes": 0}, {"max_folded_elements": -1},
                                    {"max_file_bytes": 1.5}, {"max_folded_elements": True}])
def test_invalid_limits(kwargs):
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=f"{name} must be an int"):
        sonnx.load(_shape_model("ConstantOfShape", [3, 4]), **kwargs)


def test_out_of_memory_during_import_is_an_import_error(monkeypatch):
    def exhausted(*args, **kwargs):
        raise MemoryError()
    monkeypatch.setattr(sonnx, "_build", exhausted)
    with pytest.raises(OnnxImportError, match="out of memory while importing"):
        sonnx.load(_shape_model("ConstantOfShape", [3, 4]))


def test_working_directory_unchanged_and_nothing_written(secret_cwd):
    before = sorted(os.listdir(secret_cwd))
    const = helper.make_node("Constant", [], ["shape"], value=_external(), name="c")
    with pytest.raises(OnnxImportError):
        sonnx.load(_model([const, helper.make_node("Reshape", ["x", "shape"], ["y"])]))
    assert sorted(os.listdir(secret_cwd)) == before
