"""Errors raised inside training tasks reach the caller as themselves (type, message, partition, iteration),
without the engine replaying them; transient failures still are replayed."""
import logging

import numpy as np
import pytest

from sparkdl import nn
from sparkdl.engine import DataBlocks, DistributedTrainer, MaxEpoch, MaxIteration, TrainingDivergedError
from sparkdl.engine.task_errors import TaskError, original_error, task_context
from sparkdl.optim import SGD


class FailsOnLargeInput(nn.Module):
    """Identity in evaluation; in training raises on a batch holding a row whose first feature is > 100."""

    def forward(self, x, *, training=False, rng=None):
        if training and (x[:, 0] > 100).any():
            raise ArithmeticError(f"cannot handle a first feature of {x[:, 0].max():.0f}")
        return x.copy(), None

    def backward(self, cache, grad_y, grad_params):
        return grad_y


def _data(n=40, d=4):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int64)


def _trainer(model, **kw):
    kw.setdefault("end_trigger", MaxIteration(3))
    return DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=0.1), batch_size=40, progress=False, **kw)


def _no_replay(caplog):
    return not [r for r in caplog.records if "replaying" in r.getMessage()]


def test_layer_error_in_stage_one_is_raised_as_itself(spark, caplog):
    x, y = _data()
    x[30, 0] = 500.0  # from_numpy: rows 20..39 are partition 1, row 30 is its row 10
    data = DataBlocks.from_numpy(spark.sparkContext, x, y, 2)
    model = nn.Sequential(FailsOnLargeInput(), nn.Linear(4, 2)).initialize(0)
    with caplog.at_level(logging.WARNING, logger="sparkdl.engine"):
        with pytest.raises(ArithmeticError) as info:
            _trainer(model).fit(data)
    msg = str(info.value)
    assert "cannot handle a first feature of 500" in msg
    assert "data partition 1" in msg and "epoch 1, iteration 1" in msg
    assert "rows = [0, 1, 2" in msg  # batch 40 of 40 rows: all 20 rows of the partition, in order
    assert "test_engine_errors.py" in "".join(getattr(info.value, "__notes__", [""]))  # executor traceback
    assert _no_replay(caplog)
    data.unpersist()


def test_bad_label_in_a_task_names_partition_and_row(spark, caplog):
    x, y = _data()
    y[25] = 7  # no num_classes given: only the loss in the task can see it
    data = DataBlocks.from_numpy(spark.sparkContext, x, y, 2)
    with caplog.at_level(logging.WARNING, logger="sparkdl.engine"):
        with pytest.raises(ValueError) as info:
            _trainer(nn.Sequential(nn.Linear(4, 2)).initialize(0)).fit(data)
    msg = str(info.value)
    assert "CrossEntropyLoss: target[5] = 7 is not a class index in [0, 1]" in msg
    assert "data partition 1, epoch 1, iteration 1" in msg
    assert _no_replay(caplog)
    data.unpersist()


def test_divergence_names_the_partition(spark):
    x, y = _data()
    x[20:] = 3e38  # partition 1 only: its logits overflow
    data = DataBlocks.from_numpy(spark.sparkContext, x, y, 2)
    with pytest.raises(TrainingDivergedError, match=r"data partition 1, epoch 1, iteration 1"):
        _trainer(nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2)).initialize(0)).fit(data)
    data.unpersist()


def _fail_every_attempt(stage, partition, epoch, iteration, attempt):
    from sparkdl.engine.tasks import FaultInjected
    if stage == "gradient" and partition == 0 and iteration == 1:
        raise FaultInjected("simulated lost executor")


def test_transient_failures_are_replayed_up_to_max_recoveries(spark, caplog):
    x, y = _data()
    data = DataBlocks.from_numpy(spark.sparkContext, x, y, 2)
    trainer = _trainer(nn.Sequential(nn.Linear(4, 2)).initialize(0), max_recoveries=2, end_trigger=MaxEpoch(3))
    trainer._fault_hook = _fail_every_attempt
    with caplog.at_level(logging.WARNING, logger="sparkdl.engine"):
        with pytest.raises(Exception) as info:
            trainer.fit(data)
    assert not isinstance(info.value, TaskError) and original_error(info.value) is None
    assert len([r for r in caplog.records if "replaying" in r.getMessage()]) == 2
    data.unpersist()


def test_report_round_trip_without_spark():
    with pytest.raises(TaskError) as info:
        with task_context("gradient", 3, 0, 4, rows=np.arange(20)):
            raise KeyError("weight")
    wrapped = RuntimeError("Job aborted due to stage failure: ... " + str(info.value) + "\n\tat org.apache...")
    err = original_error(wrapped)
    assert type(err) is KeyError
    assert "weight" in str(err) and "data partition 3, epoch 1, iteration 5" in str(err)
    assert "rows = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]" in str(err)
    assert original_error(RuntimeError("Lost executor 1")) is None


def test_unshippable_model_named_before_touching_the_data():
    import threading

    class Holder:
        def __init__(self):
            self.cache = {"lock": threading.Lock()}

    model = nn.Sequential(nn.Linear(4, 2))
    model.helper = Holder()
    with pytest.raises(TypeError, match=r"DistributedTrainer.fit: model.helper.cache\['lock'\] holds a _thread.lock"):
        _trainer(model).fit(object())  # never looked at: the check comes first
