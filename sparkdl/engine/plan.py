"""Which samples each partition contributes to each global mini-batch — pure functions, no Spark.

A global mini-batch of ``batch_size`` samples is split across partitions in proportion to their sizes,
with no divisibility rule between batch size, partition count and cores. Every partition shuffles its own
samples each epoch (seeded by ``(seed, epoch, partition)``); its j-th shuffled sample gets the global
position key ``(j + 0.5) / n_p``; sorting all keys interleaves partitions proportionally, and iteration ``i``
takes global positions ``[i * batch_size, (i + 1) * batch_size)``. Hence each iteration's global batch has
exactly ``batch_size`` samples (the last one of an epoch may be smaller), every sample is used exactly once
per epoch, and empty partitions contribute nothing.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["batch_counts", "iterations_per_epoch", "local_permutation", "local_batch"]


def iterations_per_epoch(num_samples: int, batch_size: int) -> int:
    """``ceil(num_samples / batch_size)`` (the last batch may be smaller)."""
    return math.ceil(num_samples / batch_size)


def batch_counts(sizes, batch_size: int) -> np.ndarray:
    """Samples contributed by each partition to each iteration of an epoch.

    Parameters
    ----------
    sizes : sequence of int
        Number of samples in each partition (zeros allowed).
    batch_size : int
        Global mini-batch size B >= 1.

    Returns
    -------
    ndarray of int64, shape (I, P)
        ``counts[i, p]``; rows sum to B except possibly the last, columns sum to ``sizes``.

    Raises
    ------
    ValueError
        If ``batch_size < 1``, a size is negative, or all partitions are empty.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if (sizes < 0).any():
        raise ValueError(f"partition sizes must be >= 0, got {sizes.tolist()}")
    total = int(sizes.sum())
    if total == 0:
        raise ValueError("the training data is empty: every partition has 0 samples")
    parts = np.repeat(np.arange(sizes.size), sizes)
    j = np.concatenate([np.arange(n) for n in sizes if n > 0])
    keys = (j + 0.5) / np.repeat(sizes[sizes > 0], sizes[sizes > 0]).astype(np.float64)
    order = np.lexsort((parts, keys))  # by key, ties by partition
    iteration = np.arange(total) // batch_size
    counts = np.zeros((iterations_per_epoch(total, batch_size), sizes.size), dtype=np.int64)
    np.add.at(counts, (iteration, parts[order]), 1)
    return counts


def local_permutation(seed: int, epoch: int, partition: int, n: int, shuffle: bool = True) -> np.ndarray:
    """Order in which partition ``partition`` visits its ``n`` samples in ``epoch``."""
    if not shuffle:
        return np.arange(n)
    return np.random.default_rng([seed, epoch, partition, 0x5EED]).permutation(n)


def local_batch(counts: np.ndarray, perm: np.ndarray, iteration: int, partition: int) -> np.ndarray:
    """Indices (into the partition's block) of the partition's share of global batch ``iteration``."""
    start = int(counts[:iteration, partition].sum())
    return perm[start:start + int(counts[iteration, partition])]
