"""sparkdl.engine.worker.read_ahead: a Python worker's input batches read by a background thread."""
import threading
import time
import traceback

import pytest

from sparkdl.engine.worker import read_ahead


class Source:
    """An iterator that records which thread read each item and how many items were read."""

    def __init__(self, n, fail_at=None, delay=0.0):
        self.n, self.fail_at, self.delay = n, fail_at, delay
        self.read = 0
        self.threads = set()
        self.exhausted = threading.Event()

    def __iter__(self):
        return self

    def __next__(self):
        self.threads.add(threading.current_thread().name)
        if self.read == self.fail_at:
            raise ValueError(f"bad batch {self.read}")
        if self.read == self.n:
            self.exhausted.set()
            raise StopIteration
        time.sleep(self.delay)
        self.read += 1
        return self.read - 1


def _wait_for(predicate, timeout=5.0):
    end = time.monotonic() + timeout
    while not predicate() and time.monotonic() < end:
        time.sleep(0.005)
    return predicate()


def test_items_arrive_in_order_and_are_read_by_another_thread():
    src = Source(50)
    assert list(read_ahead(src)) == list(range(50))
    assert src.threads == {"sparkdl-read-ahead"}


def test_empty_input():
    src = Source(0)
    assert list(read_ahead(src)) == []
    assert src.exhausted.is_set()


def test_at_most_one_item_is_read_ahead():
    src = Source(10)
    it = read_ahead(src)
    assert next(it) == 0
    # the thread reads item 1 while the caller works on item 0, and nothing beyond
    assert _wait_for(lambda: src.read == 2)
    time.sleep(0.1)
    assert src.read == 2
    assert next(it) == 1
    assert _wait_for(lambda: src.read == 3)
    time.sleep(0.1)
    assert src.read == 3


def test_the_next_read_overlaps_the_callers_work():
    src = Source(6, delay=0.05)
    start = time.perf_counter()
    for _ in read_ahead(src):
        time.sleep(0.05)  # the caller's work on one item takes as long as reading one
    elapsed = time.perf_counter() - start
    assert elapsed < 0.6 * (6 * 0.05 * 2), elapsed  # serial would take 0.6 s; overlapped ~0.35 s


def test_an_error_of_the_input_reaches_the_caller_at_its_item_with_its_traceback():
    src = Source(10, fail_at=3)
    it = read_ahead(src)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="bad batch 3") as info:
        next(it)
    assert "__next__" in "".join(traceback.format_tb(info.value.__traceback__))
    with pytest.raises(StopIteration):
        next(it)


def test_closing_early_ends_the_thread():
    src = Source(1000)
    before = {t.ident for t in threading.enumerate()}
    it = read_ahead(src)
    assert next(it) == 0
    it.close()
    assert _wait_for(lambda: not [t for t in threading.enumerate()
                                  if t.name == "sparkdl-read-ahead" and t.ident not in before])
    assert src.read <= 2
