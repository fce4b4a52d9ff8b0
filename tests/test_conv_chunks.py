"""sparkdl.nn.conv_chunks.run_chunks: chunks dealt to the calling thread's threads give the in-order loop's bits."""
import threading

import numpy as np
import pytest

import sparkdl
from sparkdl.nn import conv_chunks
from sparkdl.nn.conv_chunks import run_chunks


@pytest.fixture
def threads():
    previous = sparkdl.get_num_threads()
    yield sparkdl.set_num_threads
    sparkdl.set_num_threads(previous)


def _partials(n, seed=0):
    # Values of very different magnitudes: float32 sums of them depend on the order of the additions.
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 5, 3)) * 10.0 ** rng.integers(-6, 7, (n, 5, 3))).astype(np.float32)


def _run(parts, log=None):
    def body(i, ws, out):
        ws.append(i)  # the work buffers are the thread's own: only its chunks appear in them
        if log is not None:
            log.append((i, threading.get_ident(), sparkdl.get_num_threads(), id(ws)))
        out[...] = parts[i]
    return run_chunks(range(len(parts)), body, list, partial=((5, 3), np.float32))


@pytest.mark.parametrize("n", [1, 3, 4, 9, 17, 40])
def test_partials_sum_in_chunk_order_at_one_and_two_threads(threads, n):
    parts = _partials(n)
    expected = parts[0].copy()
    for p in parts[1:]:
        expected += p  # the in-order loop, written out
    for t in (1, 2):
        threads(t)
        np.testing.assert_array_equal(_run(parts), expected)
    assert not np.array_equal(parts[::-1].sum(axis=0, dtype=np.float32), expected) or n < 9  # order matters


def test_chunks_are_dealt_in_contiguous_ranges_on_one_thread_kernels_each(threads, monkeypatch):
    monkeypatch.setattr(conv_chunks, "WAVE_CHUNKS_PER_THREAD", 3)  # waves of 6 chunks
    threads(2)
    log = []
    _run(_partials(14), log)
    assert sorted(i for i, *_ in log) == list(range(14))
    by_chunk = {i: (thread, numba_threads) for i, thread, numba_threads, _ in log}
    waves = [range(0, 6), range(6, 12), range(12, 14)]
    for wave in waves:
        first, second = list(wave)[:len(wave) // 2], list(wave)[len(wave) // 2:]
        assert {by_chunk[i][0] for i in first} == {threading.get_ident()}  # the caller runs the first range
        assert len({by_chunk[i][0] for i in second}) == 1 and by_chunk[second[0]][0] != threading.get_ident()
    assert {n for _, n in by_chunk.values()} == {1}  # kernels inside a dealt chunk run on one thread
    assert sparkdl.get_num_threads() == 2  # and the caller's count is restored
    assert len({ws for *_, ws in log}) == 2  # one workspace per thread, reused across waves


def test_few_chunks_run_in_order_on_the_callers_threads(threads):
    threads(2)
    log = []
    _run(_partials(3), log)  # fewer than MIN_CHUNKS_PER_THREAD per thread
    assert [i for i, *_ in log] == [0, 1, 2]
    assert {(thread, n) for _, thread, n, _ in log} == {(threading.get_ident(), 2)}


def test_no_chunks_sum_to_zeros_and_an_error_in_a_chunk_propagates(threads):
    assert np.array_equal(run_chunks([], None, list, partial=((2, 2), np.float64)), np.zeros((2, 2)))
    threads(2)

    def body(i, ws, out):
        if i == 5:
            raise ValueError("chunk 5")
    with pytest.raises(ValueError, match="chunk 5"):
        run_chunks(range(8), body, list)
    assert sparkdl.get_num_threads() == 2
