"""safetensors weights by PyTorch state_dict names: torch -> sparkdl -> torch round trips, strict reporting of
every missing/extra/mismatched key, and refusal of .pt/.pth pickles (never loaded)."""
import numpy as np
import pytest

from sparkdl import models, nn
from sparkdl.io import ModelFormatError, load_safetensors, save_safetensors

torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")


def _torch_lenet():
    t = torch.nn
    return t.Sequential(t.Conv2d(1, 6, 5, padding=2), t.ReLU(), t.MaxPool2d(2), t.Conv2d(6, 16, 5), t.ReLU(),
                        t.MaxPool2d(2), t.Flatten(), t.Linear(400, 120), t.ReLU(), t.Linear(120, 84), t.ReLU(),
                        t.Linear(84, 10))


def test_torch_state_dict_into_sparkdl_matches_outputs(tmp_path):
    torch.manual_seed(0)
    tm = _torch_lenet().eval()
    st_torch.save_file(tm.state_dict(), tmp_path / "w.safetensors")
    model = load_safetensors(models.lenet5(), tmp_path / "w.safetensors")
    x = np.random.default_rng(0).standard_normal((2, 1, 28, 28)).astype(np.float32)
    with torch.no_grad():
        expected = tm(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(x), expected, rtol=1e-5, atol=1e-5)


def test_sparkdl_to_torch_with_batchnorm_buffers(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).initialize(1)
    model.forward(np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32), training=True)
    save_safetensors(model, tmp_path / "w.safetensors")
    tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    tm.load_state_dict(st_torch.load_file(tmp_path / "w.safetensors"), strict=True)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(tm.state_dict()[k].numpy(), v)
    # and torch's int64 num_batches_tracked loads back into sparkdl's float buffer
    st_torch.save_file(tm.state_dict(), tmp_path / "t.safetensors")
    back = load_safetensors(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)), tmp_path / "t.safetensors")
    assert float(back.state_dict()["1.num_batches_tracked"]) == 1.0


def test_strict_reports_every_problem_and_copies_nothing(tmp_path):
    st_torch.save_file({"0.weight": torch.zeros(4, 3), "0.bias": torch.zeros(5), "extra.w": torch.zeros(1)},
                       tmp_path / "w.safetensors")
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)).initialize(0)
    before = model.flat_parameters.copy()
    with pytest.raises(ValueError) as err:
        load_safetensors(model, tmp_path / "w.safetensors")
    msg = str(err.value)
    assert "missing keys ['1.weight', '1.bias']" in msg and "unexpected keys ['extra.w']" in msg
    assert "0.bias: model (4,), file (5,)" in msg
    np.testing.assert_array_equal(model.flat_parameters, before)
    with pytest.raises(ValueError, match=r"shape mismatches") as err:  # non-strict still checks shapes
        load_safetensors(model, tmp_path / "w.safetensors", strict=False)
    assert "missing" not in str(err.value)


def test_non_strict_loads_the_common_keys(tmp_path):
    st_torch.save_file({"0.weight": torch.ones(4, 3), "other": torch.zeros(2)}, tmp_path / "w.safetensors")
    model = load_safetensors(nn.Sequential(nn.Linear(3, 4)).initialize(0), tmp_path / "w.safetensors", strict=False)
    np.testing.assert_array_equal(model.state_dict()["0.weight"], 1.0)


def test_pickles_are_refused_and_never_loaded(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    import pickle
    (tmp_path / "evil.pth").write_bytes(pickle.dumps(Evil()))
    torch.save(torch.nn.Linear(3, 4).state_dict(), tmp_path / "w.pt")
    for name in ("evil.pth", "w.pt"):
        with pytest.raises(ModelFormatError, match=r"looks like a PyTorch .pt/.pth file.*safetensors.*ONNX|onnx"):
            load_safetensors(nn.Linear(3, 4), tmp_path / name)
    assert not marker.exists()


def test_corrupted_and_missing_files(tmp_path):
    save_safetensors(nn.Linear(3, 4), tmp_path / "w.safetensors")
    data = (tmp_path / "w.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFormatError, match="not a readable safetensors file"):
        load_safetensors(nn.Linear(3, 4), tmp_path / "cut.safetensors")
    with pytest.raises(FileNotFoundError):
        load_safetensors(nn.Linear(3, 4), tmp_path / "nope.safetensors")


@pytest.mark.parametrize("missing", ["onnx", "safetensors.numpy"])
def test_missing_optional_package_names_the_extra(monkeypatch, tmp_path, missing):
    import sparkdl.onnx
    monkeypatch.setitem(__import__("sys").modules, missing, None)  # makes `import <missing>` fail
    call = (lambda: sparkdl.onnx.load(b"\x08\x08")) if missing == "onnx" else \
        (lambda: save_safetensors(nn.ReLU(), tmp_path / "w.safetensors"))
    with pytest.raises(ImportError, match=r"pip install 'sparkdl\[onnx\]'"):
        call()
