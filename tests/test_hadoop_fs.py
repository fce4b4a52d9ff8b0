"""Model files, checkpoints and run outputs on Hadoop file systems, through the bridge's HadoopFiles.

The test session (tests/conftest.py) maps two URI schemes that no Python library knows to Hadoop's local file
systems in its Hadoop configuration: ``sdltest://`` (``RawLocalFileSystem``) and ``sdlcrc://`` (``LocalFileSystem``,
which writes ``.crc`` side files and verifies them on read). Everything written through them lands on the local
disk, so the tests compare it byte for byte with what the local code path writes, and the bridge's counters show
that the bytes went through Hadoop's ``FileSystem`` API.
"""
import hashlib
import os
import shutil
import uuid

import numpy as np
import pyarrow
import pyarrow.fs as pafs
import pytest

from sparkdl import cli, io, nn
from sparkdl.jvm import BridgeMissingError
from sparkdl.jvm import hadoop as jvm
from sparkdl.io import FileSystemUnavailableError, model_io
from tests.test_engine_checkpoint import _read_scalars

pytestmark = pytest.mark.usefixtures("spark")


def _uri(path, scheme="sdltest"):
    return f"{scheme}://{path}"


def _model(seed=0):
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.BatchNorm1d(16), nn.Linear(16, 3)).initialize(seed)


def _files(root):
    """``{relative path: bytes}`` of every file under ``root``."""
    out = {}
    for base, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(base, name), "rb") as f:
                out[os.path.relpath(os.path.join(base, name), root)] = f.read()
    return out


def _counters(spark):
    return jvm.hadoop_counters(spark.sparkContext)


def test_model_round_trip_is_bitwise_and_goes_through_hadoop(spark, tmp_path):
    m = _model()
    local = io.save_model(m, tmp_path / "local")
    before = _counters(spark)
    assert io.save_model(m, _uri(tmp_path / "remote")) == _uri(tmp_path / "remote")
    loaded = io.load_model(_uri(tmp_path / "remote"))
    after = _counters(spark)
    assert _files(tmp_path / "remote") == _files(local)  # no temp file left, every byte as the local path writes
    assert sorted(_files(local)) == ["metadata.json", "weights.npz"]
    with pytest.raises(pyarrow.ArrowInvalid, match="Unrecognized filesystem"):  # no Python library knows it
        pafs.FileSystem.from_uri(_uri(tmp_path / "remote"))
    weights = len(_files(local)["weights.npz"]) + len(_files(local)["metadata.json"])
    assert after["files_written"] - before["files_written"] == 2
    assert after["bytes_written"] - before["bytes_written"] == weights
    assert after["files_read"] - before["files_read"] == 2 and after["bytes_read"] - before["bytes_read"] == weights
    for (name, a), (_, b) in zip(loaded.state_dict().items(), m.state_dict().items()):
        assert a.tobytes() == b.tobytes(), name
    again = io.load_weights(_model(1), _uri(tmp_path / "remote"))
    assert again.flat_parameters.tobytes() == m.flat_parameters.tobytes()


def test_refuses_to_overwrite_unless_asked(tmp_path):
    uri = _uri(tmp_path / "m")
    io.save_model(_model(0), uri)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        io.save_model(_model(1), uri)
    assert io.load_model(uri).flat_parameters.tobytes() == _model(0).flat_parameters.tobytes()
    io.save_model(_model(1), uri, overwrite=True)
    assert io.load_model(uri).flat_parameters.tobytes() == _model(1).flat_parameters.tobytes()
    assert sorted(os.listdir(tmp_path)) == ["m"]
    (tmp_path / "thesis").mkdir()
    (tmp_path / "thesis" / "ch1.tex").write_text("mine")
    with pytest.raises(FileExistsError, match="not a sparkdl artefact"):
        io.save_model(_model(1), _uri(tmp_path / "thesis"), overwrite=True)
    assert (tmp_path / "thesis" / "ch1.tex").read_text() == "mine"


def test_a_failed_write_leaves_the_previous_files_intact(spark, tmp_path, monkeypatch):
    uri = _uri(tmp_path / "m")
    io.save_model(_model(0), uri)
    saved = _files(tmp_path)

    def crash_after_weights(storage, dirpath, model):
        storage.write_bytes(storage.join(dirpath, model_io.WEIGHTS), b"partial")
        raise OSError("connection reset")
    monkeypatch.setattr(model_io, "write_model_files", crash_after_weights)
    with pytest.raises(OSError, match="connection reset"):
        io.save_model(_model(1), uri, overwrite=True)
    assert _files(tmp_path) == saved  # the temp directory is gone, the model as it was

    # one file, failing inside the bridge after its bytes were streamed: the checksum does not match
    files = jvm.HadoopFiles.of(spark.sparkContext)
    target = _uri(tmp_path / "m" / "weights.npz")
    src = tmp_path / "upload"
    src.write_bytes(b"new weights")
    with pytest.raises(OSError, match="checksum mismatch"):
        files.upload(target, str(src), hashlib.sha256(b"other").hexdigest(), True)
    with pytest.raises(FileExistsError, match="already exists"):
        files.upload(target, str(src), hashlib.sha256(b"new weights").hexdigest(), False)
    assert _files(tmp_path / "m") == {k[2:]: v for k, v in saved.items()}
    files.upload(target, str(src), hashlib.sha256(b"new weights").hexdigest(), True)
    assert (tmp_path / "m" / "weights.npz").read_bytes() == b"new weights"
    assert sorted(os.listdir(tmp_path / "m")) == ["metadata.json", "weights.npz"]


def test_checkpoints_and_their_pointer(tmp_path):
    root = _uri(tmp_path / "ck")
    for it in (1, 2, 3):
        io.save_checkpoint(root, _model(it), iteration=it, keep_last=2, optimizer_state={"x": np.arange(it)},
                           rng=np.random.default_rng(it))
        io.save_checkpoint(tmp_path / "local", _model(it), iteration=it, keep_last=2,
                           optimizer_state={"x": np.arange(it)}, rng=np.random.default_rng(it))
    assert io.list_checkpoints(root) == [2, 3]
    assert (tmp_path / "ck" / "latest").read_text() == "ckpt-3\n"
    local, remote = _files(tmp_path / "local"), _files(tmp_path / "ck")
    assert sorted(remote) == sorted(local)
    docs = [k for k in local if k.endswith("checkpoint.json")]
    assert all(local[k] == remote[k] for k in local if k not in docs)  # checkpoint.json: its sparkdl version only
    ck = io.load_checkpoint(root)
    assert ck.iteration == 3 and ck.optimizer_state["x"].tolist() == [0, 1, 2]
    assert ck.model.flat_parameters.tobytes() == _model(3).flat_parameters.tobytes()
    assert ck.rng.random() == np.random.default_rng(3).random()
    assert io.load_checkpoint(root, 2).iteration == 2


def test_replace_is_atomic_where_the_file_system_renames_with_overwrite(spark, tmp_path):
    """ViewFs (Hadoop's mount-table file system, here over the local disk) has a FileContext, whose rename with
    OVERWRITE replaces ``latest`` in one step; RawLocalFileSystem under ``sdltest://`` has none (rename aside)."""
    mount = f"sdl{uuid.uuid4().hex[:8]}"  # a new mount table: a FileSystem Hadoop has not cached yet
    spark.sparkContext._jsc.hadoopConfiguration().set(f"fs.viewfs.mounttable.{mount}.link./data",
                                                       "file://" + str(tmp_path))
    for scheme_root, atomic in ((f"viewfs://{mount}/data/ck", 1), (_uri(tmp_path / "plain"), 0)):
        for it in (1, 2):
            before = _counters(spark)["atomic_replaces"]
            io.save_checkpoint(scheme_root, _model(it), iteration=it, keep_last=1)
            assert _counters(spark)["atomic_replaces"] - before == atomic
    for folder in ("ck", "plain"):
        assert (tmp_path / folder / "latest").read_text() == "ckpt-2\n"
        assert sorted(n for n in os.listdir(tmp_path / folder) if not n.endswith(".crc")) == ["ckpt-2", "latest"]
        assert io.load_checkpoint(tmp_path / folder).model.flat_parameters.tobytes() == \
            _model(2).flat_parameters.tobytes()


def test_a_checksumming_file_system_verifies_what_it_reads(tmp_path):
    uri = _uri(tmp_path / "m", "sdlcrc")
    io.save_model(_model(), uri)
    assert sorted(os.listdir(tmp_path / "m")) == [".metadata.json.crc", ".weights.npz.crc", "metadata.json",
                                                   "weights.npz"]  # Hadoop's LocalFileSystem wrote them
    assert io.load_model(uri).flat_parameters.tobytes() == _model().flat_parameters.tobytes()
    data = bytearray((tmp_path / "m" / "weights.npz").read_bytes())
    data[len(data) // 2] ^= 1
    (tmp_path / "m" / "weights.npz").write_bytes(bytes(data))
    with pytest.raises(OSError, match="(?i)checksum"):
        io.load_model(uri)


def test_without_a_session_or_bridge_a_uri_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(OSError, match=r"sdlnone:///x/m: No FileSystem for scheme \"sdlnone\".*spark.hadoop.fs"):
        io.load_model("sdlnone:///x/m")
    monkeypatch.setattr(jvm, "active_context", lambda: None)
    with pytest.raises(FileSystemUnavailableError, match="hdfs://nn/m: .*no classic Spark session runs"):
        io.save_model(_model(), "hdfs://nn/m")

    def missing(sc):
        raise BridgeMissingError("the jar is not on the class path")
    monkeypatch.setattr(jvm, "active_context", lambda: object())
    monkeypatch.setattr(jvm.HadoopFiles, "of", missing)
    with pytest.raises(FileSystemUnavailableError, match="s3a://b/m: .*needs sparkdl's JVM bridge: the jar"):
        io.load_model("s3a://b/m")
    io.save_model(_model(), "file://" + str(tmp_path / "m"))  # file:// stays local, needs nothing
    assert io.load_model(tmp_path / "m").flat_parameters.tobytes() == _model().flat_parameters.tobytes()


def _train(output, *extra):
    return cli.main(["train", "--model", "mlp", "--limit", "256", "--epochs", "2", "--batch-size", "128",
                     "--partitions", "2", "--warmup-epochs", "0", "--no-progress", "--output", output, *extra])


def test_a_training_run_on_hadoop_writes_every_output_and_resumes_bitwise(spark, tmp_path, mnist_cached):
    before = _counters(spark)
    assert _train(_uri(tmp_path / "run")) == 0
    assert _counters(spark)["files_written"] > before["files_written"]
    run = _files(tmp_path / "run")
    assert {"run.json", "model/weights.npz", "model/metadata.json", "checkpoints/latest", "checkpoints/ckpt-2/state.npz",
            "checkpoints/ckpt-4/state.npz", "checkpoints/ckpt-4/model/weights.npz"} <= set(run)
    assert not [k for k in run if ".tmp-" in k or ".old-" in k]
    assert run["checkpoints/latest"] == b"ckpt-4\n"
    assert run["model/weights.npz"] == run["checkpoints/ckpt-4/model/weights.npz"]  # the same trained weights
    scalars = _read_scalars(tmp_path / "run" / "tensorboard")  # the event files, copied up
    assert [step for step, _ in scalars["train/loss"]] == [1, 2, 3, 4]
    assert [step for step, _ in scalars["validation/Top1Accuracy"]] == [2, 4]

    assert _train(_uri(tmp_path / "run")) == 2  # a second run into the same directory refuses
    assert _files(tmp_path / "run") == run

    shutil.rmtree(tmp_path / "run" / "checkpoints" / "ckpt-4")  # as if stopped after epoch 1
    (tmp_path / "run" / "checkpoints" / "latest").write_text("ckpt-2\n")
    assert _train(_uri(tmp_path / "run"), "--resume") == 0
    again = _files(tmp_path / "run")
    for name in ("model/weights.npz", "checkpoints/ckpt-4/state.npz", "checkpoints/latest"):
        assert again[name] == run[name], name  # the continuation equals the uninterrupted run
    assert cli.main(["evaluate", "--model", _uri(tmp_path / "run" / "checkpoints")]) == 2  # checked there: no model
