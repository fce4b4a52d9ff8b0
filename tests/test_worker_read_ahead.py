"""sparkdl.engine.worker.read_ahead: a Python worker's input batches read by a background thread."""
import threading
import time
import traceback

import pytest

from sparkdl.engine.worker import read_ahead


class Source:
    """An iterator that records which thread read each item and how many items were read."""

    def __init__(self, n, fail_at=None):
        self.n, self.fail_at = n, fail_at
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


def test_pysparks_own_reader_thread_is_not_doubled(monkeypatch):
    monkeypatch.setenv("SPARK_PIPELINED_UDF", "1")
    src = Source(5)
    assert list(read_ahead(src)) == list(range(5))
    assert src.threads == {threading.current_thread().name}


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


def test_an_error_of_the_input_reaches_the_caller_at_its_item_with_its_traceback():
    src = Source(10, fail_at=3)
    it = read_ahead(src)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="bad batch 3") as info:
        next(it)
    assert "__next__" in "".join(traceback.format_tb(info.value.__traceback__))
    with pytest.raises(StopIteration):
        next(it)


class Boom(BaseException):
    pass


def _drain_in_thread(it, timeout=5.0):
    """Iterate ``it`` in a helper thread: the test fails, instead of hanging, if the caller is never answered."""
    got = {}

    def run():
        try:
            got["items"] = list(it)
        except BaseException as e:  # noqa: B036
            got["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "read_ahead never answered the caller"
    return got


def test_a_base_exception_of_the_input_reaches_the_caller():
    class Raising:
        def __iter__(self):
            return self

        def __next__(self):
            raise Boom("stop")
    got = _drain_in_thread(read_ahead(Raising()))
    assert isinstance(got.get("error"), Boom)


def test_an_input_that_cannot_be_iterated_fails_in_the_caller():
    with pytest.raises(TypeError):
        next(read_ahead(42))


def test_closing_early_ends_the_thread():
    src = Source(1000)
    before = {t.ident for t in threading.enumerate()}
    it = read_ahead(src)
    assert next(it) == 0
    it.close()
    assert _wait_for(lambda: not [t for t in threading.enumerate()
                                  if t.name == "sparkdl-read-ahead" and t.ident not in before])
    assert src.read <= 2
