"""Which samples form each global mini-batch — pure functions, no Spark.

Every sample has a global id: its partition's offset plus its row in the partition (the order of the
data, independent of how it is partitioned). Each epoch visits the ids in the order of a seeded
pseudo-random permutation ``pi`` of ``[0, N)``; global batch ``i`` is the set of samples with
``pi(id) in [i * B, (i + 1) * B)``. The permutation is a Feistel network with cycle walking, so every
partition evaluates ``pi`` on its own ids only — no global shuffle, no driver round trip — and:

* each global batch has exactly ``B`` samples (the last one of an epoch may be smaller);
* every sample is used exactly once per epoch;
* a partition's share of a batch is proportional to its size in expectation; empty partitions and any
  combination of batch size, partition count and cores work;
* the batches do not depend on the partitioning: the same data in 1, 3 or 4 partitions (same order)
  gives the same global batches, hence the same training trajectory up to float summation order.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["iterations_per_epoch", "batch_sizes", "epoch_permutation", "local_schedule", "global_batch"]

_ROUNDS = 6
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def iterations_per_epoch(num_samples: int, batch_size: int) -> int:
    """``ceil(num_samples / batch_size)`` (the last batch may be smaller)."""
    return math.ceil(num_samples / batch_size)


def batch_sizes(num_samples: int, batch_size: int) -> np.ndarray:
    """Global batch size of each iteration of an epoch (all ``batch_size`` but maybe the last)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if num_samples < 1:
        raise ValueError("the training data is empty: every partition has 0 samples")
    n_it = iterations_per_epoch(num_samples, batch_size)
    sizes = np.full(n_it, batch_size, dtype=np.int64)
    sizes[-1] = num_samples - batch_size * (n_it - 1)
    return sizes


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer (uint64 arithmetic wraps)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def epoch_permutation(seed: int, epoch: int, num_samples: int, ids: np.ndarray, shuffle: bool = True) -> np.ndarray:
    """``pi(ids)``: positions of global sample ``ids`` in the epoch's visiting order.

    Parameters
    ----------
    seed, epoch : int
        The permutation is a deterministic function of these and ``num_samples``.
    num_samples : int
        N; ``pi`` is a bijection of ``[0, N)``.
    ids : ndarray of int
        Global ids in ``[0, N)``.
    shuffle : bool
        If False, ``pi`` is the identity (data order).
    """
    ids = np.asarray(ids, dtype=np.int64)
    if not shuffle or num_samples <= 1:
        return ids.copy()
    bits = max(2, math.ceil(math.log2(num_samples)))
    bits += bits % 2
    half = np.uint64(bits // 2)
    mask = np.uint64((1 << (bits // 2)) - 1)
    keys = np.random.SeedSequence([seed, epoch, 0xFE15]).generate_state(_ROUNDS, dtype=np.uint64)

    def encrypt(x):
        left, right = x >> half, x & mask
        for key in keys:
            left, right = right, left ^ (_mix(right ^ key) & mask)
        return (left << half) | right

    y = encrypt(ids.astype(np.uint64))
    bad = y >= np.uint64(num_samples)
    while bad.any():  # cycle walking: the domain is < 4N, so a few rounds at most on average
        y[bad] = encrypt(y[bad])
        bad = y >= np.uint64(num_samples)
    return y.astype(np.int64)


def local_schedule(seed: int, epoch: int, num_samples: int, offset: int, count: int, batch_size: int,
                   shuffle: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """One partition's epoch plan: its rows ordered by visiting position, and where each iteration starts.

    Returns
    -------
    rows : ndarray of int64, shape (count,)
        Row indices into the partition's block, in epoch order.
    starts : ndarray of int64, shape (I + 1,)
        Iteration ``i`` uses ``rows[starts[i]:starts[i + 1]]`` (possibly empty).
    """
    pos = epoch_permutation(seed, epoch, num_samples, np.arange(offset, offset + count), shuffle)
    order = np.argsort(pos, kind="stable")
    edges = np.arange(iterations_per_epoch(num_samples, batch_size) + 1, dtype=np.int64) * batch_size
    starts = np.searchsorted(pos[order], edges, side="left")
    return order.astype(np.int64), starts.astype(np.int64)


def global_batch(seed: int, epoch: int, num_samples: int, batch_size: int, iteration: int,
                 shuffle: bool = True) -> np.ndarray:
    """Global ids of batch ``iteration`` in visiting order (the single-process reference of the engine)."""
    pos = epoch_permutation(seed, epoch, num_samples, np.arange(num_samples), shuffle)
    order = np.argsort(pos, kind="stable")
    return order[iteration * batch_size:(iteration + 1) * batch_size]
