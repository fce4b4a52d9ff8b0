"""Run by tests/test_engine_recovery.py in its own process (needs its own Spark master):
train on local-cluster[2,1,1024] (executors are separate JVMs) — clean with the JVM reduce, clean with the
Python reduce, and with the JVM reduce and an executor JVM killed mid-training, once with one AllReduce block
(reduced on the driver) and once with two (reduced in executor tasks) — and print whether the final weights are
bit-identical, as JSON."""
import json
import os
import signal
import sys

import numpy as np

from sparkdl import nn
from sparkdl.engine import DataBlocks, DistributedTrainer, MaxEpoch, get_or_create_session
from sparkdl.optim import Adam

MARKER = sys.argv[1]


def kill_executor_once(stage, partition, epoch, iteration, attempt):
    """On iteration 6, stage 1, partition 0: SIGKILL this task's executor JVM (worker -> daemon -> JVM)."""
    if iteration == 6 and stage == "gradient" and partition == 0 and not os.path.exists(MARKER):
        open(MARKER, "w").close()
        daemon = os.getppid()
        with open(f"/proc/{daemon}/stat") as f:
            jvm = int(f.read().rsplit(")", 1)[1].split()[1])
        os.kill(jvm, signal.SIGKILL)


def train(sc, hook, jvm_reduce=None, num_blocks=None):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((240, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    data = DataBlocks.from_numpy(sc, x, y, 4)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).initialize(3)
    trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), Adam(lr=0.01), batch_size=40,
                                 end_trigger=MaxEpoch(2), progress=False, snapshot_interval=4, jvm_reduce=jvm_reduce,
                                 num_blocks=num_blocks)
    trainer._fault_hook = hook  # the test hook is a private attribute, not an option
    trainer.fit(data)
    data.unpersist()
    return model.flat_parameters.copy()


if __name__ == "__main__":
    spark = get_or_create_session("local-cluster[2,1,1024]", conf={"spark.ui.enabled": "false",
                                                                   "spark.task.maxFailures": "4"})
    sc = spark.sparkContext
    clean = train(sc, None)
    python_reduce = train(sc, None, jvm_reduce=False)
    faulty = train(sc, kill_executor_once)
    killed = os.path.exists(MARKER)
    if killed:
        os.unlink(MARKER)
    # two blocks: JVM reduce tasks on the executors; the weights' broadcast is serialized-only (off local mode)
    # and read back from its pieces at the end; the killed executor takes its cached optimizer states along
    # (equal to the one-block run: the executor reduce and the recovery are both right)
    blocks_faulty = train(sc, kill_executor_once, num_blocks=2)
    print(json.dumps({"killed": killed and os.path.exists(MARKER), "identical": bool(np.array_equal(clean, faulty)),
                      "executor_reduce_killed_identical": bool(np.array_equal(clean, blocks_faulty)),
                      "python_reduce_identical": bool(np.array_equal(clean, python_reduce)),
                      "max_abs_diff": float(np.max(np.abs(clean - faulty)))}))
    spark.stop()
