"""How the convolution drivers cut a batch into chunks of samples, and run the chunks on the calling thread's threads.

Every driver (im2col, Winograd, pointwise) works one chunk of samples at a time: its work buffers (im2col
columns or Winograd-transformed tiles, and the GEMM's output) are sized to stay in a core's L2 cache between the
numba kernels and the GEMM (:func:`chunk_samples`), the same for every thread count.

:func:`run_chunks` runs a driver's chunks. On one thread, or with fewer than :data:`MIN_CHUNKS_PER_THREAD` chunks
per thread, in order, each kernel and GEMM of a chunk using all of the calling thread's numba threads (a chunk
that holds one large sample still spreads across them). With more chunks the chunks are dealt to the threads in
contiguous ranges, each thread running whole chunks with one-thread kernels in work buffers of its own: one
synchronisation per call (per wave, below) instead of two or three per chunk. Thin layers needed it: ResNet-20's
16-channel 3x3 convolutions at 32x32 are 128 one-sample Winograd chunks at batch 128, whose kernels and GEMMs are
too small to split, and they ran at 1.0x their one-thread speed on two threads (1.7-1.85x dealt).

A chunk's results do not depend on which thread computes it. Outputs are written per sample; a per-chunk partial
sum (a weight gradient) goes to a slot of its own, and the calling thread adds the slots in chunk order, wave by
wave (:data:`WAVE_CHUNKS_PER_THREAD` chunks per thread, bounding the slots' memory) -- the additions the in-order
loop makes, so the result is bitwise the same on every thread count (tested).
"""
from __future__ import annotations

import numpy as np

from sparkdl.config import get_num_threads, set_thread_local_threads
from sparkdl.nn.gemm import _parts
from sparkdl.threadpool import executor

__all__ = ["chunk_samples", "chunks", "run_chunks", "MIN_CHUNKS_PER_THREAD", "WAVE_CHUNKS_PER_THREAD"]

#: Bytes of work buffers (im2col columns + GEMM output) per chunk, by default: a chunk stays in a core's L2 cache
#: (1-2 MB on the machines measured) between the kernels and the GEMMs (which run on one BLAS thread). 512 KB
#: measured best for LeNet-5 and the small CNN (1 MB was 10-40% slower on the im2col layers); the Winograd driver
#: passes its own size. The same for every thread count: the weight gradient sums chunk by chunk, so a chunk size
#: that followed the thread count would make the bits depend on it.
_CHUNK_BYTES = 1 << 19

#: A weight matrix (or Winograd-transformed filter bank) larger than this does not stay in cache between chunks:
#: it is read from memory once per chunk, so such a layer's chunks hold at least ``_MIN_CHUNK_COLUMNS`` GEMM
#: columns (output positions of the chunk's samples) to amortise that read and BLAS's packing of it. Layers
#: with smaller weights (LeNet-5, the small CNN) keep the L2-sized chunks above, bit for bit. Measured (im2col
#: forward + backward, float32, 1 thread, the two settings interleaved, medians of 7, on a loaded shared
#: machine; floor vs L2-sized chunks): VGG-11 512 ch at 4x4 batch 32 408 vs 731 ms; ResNet-18 at 32x32 input
#: 256 -> 512 stride 2 at 2x2 41 vs 51 ms, 128 ch at 4x4 96 vs 96 ms, 256 ch at 2x2 70 vs 61 ms (the one loss).
_STREAMED_WEIGHT_BYTES = 1 << 19

#: Minimum GEMM columns per chunk for a layer whose weights exceed ``_STREAMED_WEIGHT_BYTES``.
_MIN_CHUNK_COLUMNS = 256

#: :func:`run_chunks` deals chunks to threads from this many chunks per thread (fewer: imbalance, at most 1.5x
#: the even share at 2 per thread, outweighs one barrier per kernel).
MIN_CHUNKS_PER_THREAD = 2

#: Chunks per thread in one wave of a loop with partial sums: the slots hold ``threads`` times this many partials,
#: fewer if they would take more than ``_SLOT_BYTES`` (one per thread at least).
WAVE_CHUNKS_PER_THREAD = 4
_SLOT_BYTES = 32 << 20


def chunk_samples(n: int, bytes_per_sample: int, columns_per_sample: int = 1, weight_bytes: int = 0,
                  chunk_bytes: int | None = None) -> int:
    """Samples per chunk of ``n``: as many as keep one chunk's work buffers (``bytes_per_sample`` each) within
    ``chunk_bytes`` (default ``_CHUNK_BYTES``); with weights over ``_STREAMED_WEIGHT_BYTES``, at least enough for
    ``_MIN_CHUNK_COLUMNS`` GEMM columns (``columns_per_sample`` each). Independent of the thread count (the weight
    gradient sums chunk by chunk, so the bits depend on it)."""
    nb = max(1, (_CHUNK_BYTES if chunk_bytes is None else chunk_bytes) // max(1, bytes_per_sample))
    if weight_bytes > _STREAMED_WEIGHT_BYTES:
        nb = max(nb, -(-_MIN_CHUNK_COLUMNS // max(1, columns_per_sample)))
    return int(max(1, min(n, nb)))


def chunks(n: int, nb: int, columns_per_sample: int):
    """``(n0, b, lc)`` of every chunk of at most ``nb`` of ``n`` samples: first sample, samples, GEMM columns."""
    for n0 in range(0, n, nb):
        b = min(nb, n - n0)
        yield n0, b, b * columns_per_sample


def run_chunks(items, body, workspace, partial=None):
    """Call ``body(item, ws, out)`` for every chunk ``item`` of ``items`` on the calling thread's numba threads.

    Parameters
    ----------
    items : iterable
        The chunks, e.g. :func:`chunks`' tuples; a body may write only its own chunk's samples of shared outputs.
    body : callable
        ``body(item, ws, out)``: computes one chunk in the work buffers ``ws``; with ``partial``, writes the chunk's
        partial sum into ``out`` (an array of that shape and dtype, overwritten), else ``out`` is None.
    workspace : callable
        ``workspace()`` returns one thread's work buffers (one per thread that runs chunks).
    partial : (shape, dtype), optional
        Shape and dtype of each chunk's partial sum.

    Returns
    -------
    ndarray or None
        With ``partial``, the sum of the chunks' partials in chunk order (the first one, then ``+=`` each next),
        bitwise the same for every thread count (zeros when there are no chunks); else None.
    """
    items = list(items)
    threads = get_num_threads()
    if threads < 2 or len(items) < MIN_CHUNKS_PER_THREAD * threads:
        ws, total, tmp = workspace(), None, None
        for item in items:
            if partial is None:
                body(item, ws, None)
            elif total is None:
                total = np.empty(*partial)
                body(item, ws, total)
            else:
                tmp = np.empty(*partial) if tmp is None else tmp
                body(item, ws, tmp)
                total += tmp
        return np.zeros(*partial) if total is None and partial is not None else total
    spaces = [None] * threads
    if partial is None:
        wave = len(items)
    else:
        partial_bytes = int(np.prod(partial[0])) * np.dtype(partial[1]).itemsize
        wave = max(threads, min(WAVE_CHUNKS_PER_THREAD * threads, _SLOT_BYTES // max(1, partial_bytes)))
    slots = None if partial is None else np.empty((min(wave, len(items)),) + tuple(partial[0]), partial[1])
    total = None
    for start in range(0, len(items), wave):
        batch = items[start:start + wave]

        def run(t, lo, hi):
            previous = set_thread_local_threads(1)
            try:
                if spaces[t] is None:
                    spaces[t] = workspace()
                for j in range(lo, hi):
                    body(batch[j], spaces[t], None if slots is None else slots[j])
            finally:
                set_thread_local_threads(previous)
        parts = _parts(len(batch), threads)  # non-empty ranges: the caller runs the first
        futures = [executor(threads - 1).submit(run, t, lo, hi) for t, (lo, hi) in enumerate(parts) if t]
        try:
            run(0, *parts[0])
        finally:
            for f in futures:
                f.result()
        if slots is not None:
            for j in range(len(batch)):
                if total is None:
                    total = slots[0].copy()
                else:
                    total += slots[j]
    return total
