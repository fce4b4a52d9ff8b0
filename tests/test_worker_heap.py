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


def test_retain_freed_memory_stops_page_faults_on_repeated_large_batches():
    # Page faults (minor: fresh zeroed pages) per "batch" of a forward pass's allocation pattern: a 20 MiB layer
    # output, the next layer's 20 MiB output (freeing its input), then two 4 MiB ones; 10 batches.
    code = textwrap.dedent("""
        import resource, sys
        import numpy as np
        from sparkdl.allocator import retain_freed_memory
        if sys.argv[1] == "retain":
            assert retain_freed_memory()
        def faults():
            return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        def touch(n):
            a = np.empty(n, np.float32)
            a[::1024] = 1.0  # every page
            return a
        counts = []
        for _ in range(10):
            before = faults()
            h = touch(5 << 20)
            for n in (5 << 20, 1 << 20, 1 << 20):
                h2 = touch(n)
                del h
                h = h2
            del h
            counts.append(faults() - before)
        print(*counts)
    """)
    # (With glibc's default this machine faulted in ~1,500 pages every batch; that depends on the environment
    # -- allocator, transparent huge pages -- so only the setting's own effect is asserted.)
    out = subprocess.run([sys.executable, "-c", code, "retain"], capture_output=True, text=True, check=True)
    counts = list(map(int, out.stdout.split()))
    assert counts[0] > 0 and sum(counts[2:]) <= counts[0] // 10, counts  # warmed up: blocks reused, no new pages


def test_retain_freed_memory_keeps_a_batch_that_grew_the_heap_by_more_than_512_mib():
    # 24 blocks of 30 MiB (below the 32 MiB mmap threshold: served from the heap) grow the heap by 720 MiB; freed
    # from the top down they become one free top chunk. A 512 MiB trim threshold gave 138,000 of the 184,000 pages
    # back every batch (BERT-mini's forward grew the heap by 560 MiB and faulted 70,000 pages per call in some
    # processes). C malloc through ctypes: numpy's small allocations could pin the top of the heap.
    code = textwrap.dedent("""
        import ctypes, resource
        from sparkdl.allocator import retain_freed_memory
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
        libc.free.argtypes = (ctypes.c_void_p,)
        libc.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
        assert retain_freed_memory()
        counts = []
        for _ in range(3):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            blocks = [libc.malloc(30 << 20) for _ in range(24)]
            for b in blocks:
                libc.memset(b, 1, 30 << 20)
            for b in reversed(blocks):
                libc.free(b)
            counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        print(*counts)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    counts = list(map(int, out.stdout.split()))
    assert counts[0] > 300 and max(counts[1:]) <= counts[0] // 100, counts  # (720 MiB: >= 360 huge pages)


def test_retained_memory_blocks_nest_and_the_last_one_restores_the_defaults():
    # Faults per 20 MiB allocation (allocated, every page touched, freed; 5 times) inside the outer block after an
    # inner block ended, and after the outer block ended (glibc's 128 KiB defaults: mapped afresh each time).
    code = textwrap.dedent("""
        import resource
        import numpy as np
        from sparkdl.allocator import retained_memory
        def faults_per_alloc():
            for _ in range(2):
                np.empty(5 << 20, np.float32)[::1024] = 1.0
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            for _ in range(5):
                np.empty(5 << 20, np.float32)[::1024] = 1.0
            return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5
        with retained_memory() as outer:
            with retained_memory() as inner:
                pass
            kept = faults_per_alloc()
        print(outer, inner, kept, faults_per_alloc())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[:2] == ["True", "True"]
    kept, restored = float(out[2]), float(out[3])
    # After the outer block every allocation maps fresh pages (5,120 small pages, or ~10 huge ones where transparent
    # huge pages back it, as seen under load); inside it, after the inner block ended, the freed block was reused.
    assert restored >= 5
    assert kept < restored
