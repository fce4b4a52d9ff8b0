"""Engine checkpoints, resume, TensorBoard summaries and divergence handling (Spark local[2,3])."""
import os
import re

import numpy as np
import pytest

from sparkdl import nn
from sparkdl.engine import DataBlocks, DistributedTrainer, MaxIteration, SeveralIteration, TrainingDivergedError
from sparkdl.io import list_checkpoints, load_checkpoint
from sparkdl.metrics import Top1Accuracy
from sparkdl.optim import Adam, SGD
from sparkdl.optim.schedules import StepLR


def _setup(spark, n=60):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 5)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    return DataBlocks.from_numpy(spark.sparkContext, x, y, 2), x, y


def _model():
    return nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 2)).initialize(4)


def _trainer(model, iters, ckpt=None, **kw):
    opt = Adam(lr=0.05, schedule=StepLR(step_size=2, gamma=0.5, step_by="iteration"))
    return DistributedTrainer(model, nn.CrossEntropyLoss(), opt, batch_size=16, end_trigger=MaxIteration(iters),
                              progress=False, checkpoint_dir=ckpt, checkpoint_trigger=SeveralIteration(3), **kw)


def test_resume_equals_uninterrupted_run(spark, tmp_path):
    data, _, _ = _setup(spark)
    straight = _model()
    _trainer(straight, 8).fit(data)
    first = _model()
    _trainer(first, 6, str(tmp_path)).fit(data)  # checkpoints at iterations 3 and 6, then "crashes"
    assert list_checkpoints(str(tmp_path)) == [3, 6]
    resumed = _model()  # fresh weights: everything must come from the checkpoint
    summary = _trainer(resumed, 8, str(tmp_path)).fit(data, resume=True)
    assert [r["iteration"] for r in summary.iterations] == [7, 8]
    np.testing.assert_array_equal(resumed.flat_parameters, straight.flat_parameters)
    ckpt = load_checkpoint(str(tmp_path))
    assert ckpt.iteration == 6 and ckpt.epoch == 1  # 60 samples / 16 = 4 iterations per epoch


def test_resume_keeps_counting_samples_seen(spark, tmp_path):
    data, _, _ = _setup(spark)
    _trainer(_model(), 6, str(tmp_path)).fit(data)
    assert load_checkpoint(str(tmp_path)).samples_seen == 16 * 3 + 12 + 16 * 2  # 60 samples, batches of 16
    trainer = _trainer(_model(), 9, str(tmp_path))
    trainer.fit(data, resume=True)  # checkpoints again at iteration 9
    ckpt = load_checkpoint(str(tmp_path))
    assert ckpt.iteration == 9 and ckpt.samples_seen == trainer.samples_seen == 2 * 60 + 16
    with pytest.raises(ValueError, match=r"written by a run with \{'seed': 0, 'batch_size': 16\}, this run has "
                                         r"\{'seed': 1, 'batch_size': 16\}"):
        _trainer(_model(), 12, str(tmp_path), seed=1).fit(data, resume=True)


def test_resume_without_checkpoint_is_clear_error(spark, tmp_path):
    data, _, _ = _setup(spark)
    with pytest.raises(FileNotFoundError):
        _trainer(_model(), 2, str(tmp_path / "none")).fit(data, resume=True)


def test_divergence_keeps_last_good_checkpoint(spark, tmp_path):
    data, _, _ = _setup(spark)
    model = _model()
    bad = DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=1e36), batch_size=16, end_trigger=MaxIteration(9),
                             progress=False, checkpoint_dir=str(tmp_path), checkpoint_trigger=SeveralIteration(1))
    with pytest.raises(TrainingDivergedError, match=r"iteration (\d+)") as err:
        bad.fit(data)
    diverged = int(re.search(r"iteration (\d+)", str(err.value)).group(1))
    assert diverged >= 2  # the first step only makes the weights huge; the next loss overflows
    assert np.isfinite(model.flat_parameters).all()  # the model keeps the last good weights
    latest = load_checkpoint(str(tmp_path))
    assert latest.iteration == diverged - 1
    np.testing.assert_array_equal(latest.model.flat_parameters, model.flat_parameters)


def test_tensorboard_and_validation_summary(spark, tmp_path):
    data, x, y = _setup(spark)
    model = _model()
    trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), Adam(lr=0.05), batch_size=16,
                                 end_trigger=MaxIteration(8), progress=False, log_dir=str(tmp_path / "tb"),
                                 validation_trigger=SeveralIteration(4), validation_metrics=[Top1Accuracy()])
    summary = trainer.fit(data, data)
    assert [v["iteration"] for v in summary.validations] == [4, 8]
    assert summary.validations[-1]["Top1Accuracy"] == pytest.approx(np.mean(np.argmax(model(x), 1) == y))
    assert all(r["lr"] == 0.05 and r["samples"] in (16, 12) for r in summary.iterations)
    scalars = _read_scalars(tmp_path / "tb")
    assert [step for step, _ in scalars["train/loss"]] == list(range(1, 9))
    assert [step for step, _ in scalars["validation/Top1Accuracy"]] == [4, 8]
    assert scalars["train/loss"][-1][1] == pytest.approx(summary.loss[-1], rel=1e-6)


def _read_scalars(log_dir):
    """Parse TensorBoard event files (TFRecord framing: u64 length, u32 crc, payload, u32 crc)."""
    import struct

    from tensorboardX.proto import event_pb2
    out = {}
    for name in sorted(os.listdir(log_dir)):
        with open(os.path.join(log_dir, name), "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
            pos += 16 + length
            for v in event.summary.value:
                out.setdefault(v.tag, []).append((event.step, v.simple_value))
    return out
