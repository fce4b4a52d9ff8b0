"""The Python worker's heap is frozen once, so pyspark's per-task gc.collect() stays cheap."""
import subprocess
import sys
import textwrap


def test_freeze_worker_heap_freezes_once_and_later_garbage_is_still_collected():
    # A fresh interpreter: the freeze is per process and must not leak into the test process.
    code = textwrap.dedent("""
        import gc
        from sparkdl import models
        from sparkdl.engine.worker import freeze_worker_heap
        net = models.mlp(in_features=8, hidden=(4,), num_classes=2).initialize(0)
        assert gc.get_freeze_count() == 0
        freeze_worker_heap()
        frozen = gc.get_freeze_count()
        freeze_worker_heap()  # a second task: nothing more is frozen
        cycle = []
        cycle.append(cycle)  # garbage made after the freeze, reachable only from itself
        del cycle
        print(frozen, gc.get_freeze_count(), gc.collect())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    frozen, frozen_again, collected = int(out[0]), int(out[1]), int(out[2])
    assert frozen > 50_000  # numpy, numba, sparkdl and the network are all in the permanent generation
    assert frozen_again == frozen
    assert collected >= 1  # the cycle made after the freeze was collected: only the snapshot is exempt
