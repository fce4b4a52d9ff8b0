"""The Python worker's heap is frozen once, so pyspark's per-task gc.collect() stays cheap."""
import subprocess
import sys
import textwrap


def test_freeze_worker_heap_freezes_once_and_collections_get_cheap():
    # A fresh interpreter: the freeze is per process and must not leak into the test process.
    code = textwrap.dedent("""
        import gc, time
        from sparkdl import models
        from sparkdl.engine.worker import freeze_worker_heap
        net = models.mlp(in_features=8, hidden=(4,), num_classes=2).initialize(0)
        assert gc.get_freeze_count() == 0
        t = time.perf_counter(); gc.collect(); before = time.perf_counter() - t
        freeze_worker_heap()
        frozen = gc.get_freeze_count()
        garbage = [[i] for i in range(1000)]  # objects made after the freeze stay collectable
        freeze_worker_heap()  # a second task: nothing more is frozen
        t = time.perf_counter(); gc.collect(); after = time.perf_counter() - t
        print(frozen, gc.get_freeze_count(), before, after)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    frozen, frozen_again, before, after = int(out[0]), int(out[1]), float(out[2]), float(out[3])
    assert frozen > 50_000  # numpy, numba, sparkdl and the network are all in the permanent generation
    assert frozen_again == frozen
    assert after < before / 5
