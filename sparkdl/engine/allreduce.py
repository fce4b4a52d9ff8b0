"""Block partitioning of the flat vector and the per-block reduce/update — pure functions, no Spark.

The gradient vector of P elements is cut into K contiguous blocks ``[bounds[k], bounds[k+1])`` (sizes
differ by at most one). Splitting is slicing; :func:`merge_blocks` is the inverse. The reduce side of the
AllReduce sums block k over partitions (:func:`sum_block`, in the fixed tree order of
:mod:`sparkdl.step.tree_sum`), divides by the *global* normalizer (the sum of
every partition's loss normalizer, e.g. sample count: global-mean semantics), then the optimizer updates
weight shard k with shard k's state (:func:`update_shard`).
"""
from __future__ import annotations

import numpy as np

from sparkdl.step.tree_sum import TreeSum

__all__ = ["block_bounds", "split_blocks", "merge_blocks", "sum_block", "mean_gradient", "update_shard"]


def block_bounds(num_elements: int, num_blocks: int) -> np.ndarray:
    """Boundaries of ``num_blocks`` near-equal contiguous blocks: int64 array of length K+1.

    Raises
    ------
    ValueError
        If ``num_blocks < 1``.
    """
    if num_blocks < 1:
        raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
    return np.linspace(0, num_elements, num_blocks + 1).round().astype(np.int64)


def split_blocks(vector: np.ndarray, bounds: np.ndarray) -> list[np.ndarray]:
    """Views ``vector[bounds[k]:bounds[k+1]]`` (no copies)."""
    return [vector[bounds[k]:bounds[k + 1]] for k in range(len(bounds) - 1)]


def merge_blocks(blocks, bounds: np.ndarray, dtype=np.float32) -> np.ndarray:
    """Inverse of :func:`split_blocks`: ``blocks`` is an iterable of ``(k, block)``."""
    out = np.empty(int(bounds[-1]), dtype=dtype)
    seen = set()
    for k, block in blocks:
        out[bounds[k]:bounds[k + 1]] = block
        seen.add(k)
    if len(seen) != len(bounds) - 1:
        missing = sorted(set(range(len(bounds) - 1)) - seen)
        raise RuntimeError(f"merge_blocks: blocks {missing} are missing")
    return out


def sum_block(parts, size: int) -> tuple[np.ndarray, float, float]:
    """Sum gradient block contributions ``(p, block, loss_sum, normalizer)`` of partitions ``p`` in float32
    (fp16 blocks are widened first), the loss sums and normalizers in float64, all in the binary-tree order
    over partition ids of :mod:`sparkdl.step.tree_sum` (the order the reference and the JVM reduce use), whatever
    order ``parts`` come in. Returns ``(grad_sum, loss_sum, normalizer_sum)``; zeros when nothing arrived
    (every partition was empty for this iteration)."""
    tree = TreeSum(lambda a, b: (np.add(a[0], b[0], out=a[0]), a[1] + b[1], a[2] + b[2]))
    for p, block, loss_part, norm_part in sorted(parts, key=lambda part: part[0]):
        tree.push(int(p), 0, (np.array(block, dtype=np.float32, copy=True), loss_part, norm_part))
    root = tree.result()
    acc = np.zeros(size, dtype=np.float32)
    if root is None:
        return acc, 0.0, 0.0
    acc += root[0]
    return acc, 0.0 + root[1], 0.0 + root[2]


def mean_gradient(grad_sum: np.ndarray, normalizer: float) -> np.ndarray:
    """``grad_sum / normalizer`` in float32 (zeros when the normalizer is 0)."""
    if normalizer > 0:
        return grad_sum / np.float32(normalizer)
    return np.zeros_like(grad_sum)


def update_shard(optimizer, weights: np.ndarray, grad_sum: np.ndarray, normalizer: float, state: dict,
                 lo: int, lr: float, grad_sq_norm: float | None = None, tensor_norms: dict | None = None) -> np.ndarray:
    """New weight shard from the current shard ``weights`` (not modified), the summed gradient and the
    global normalizer; ``state`` is updated in place. ``grad_sq_norm`` is the global squared norm of the
    mean gradient (sum over shards of ``optimizer.partial_sq_norm``), needed with ``clip_norm``;
    ``tensor_norms`` the combined per-tensor norms (``sparkdl.optim.combine_tensor_norms`` of every shard's
    ``optimizer.partial_tensor_norms``), needed by optimizers with ``needs_tensor_norms`` (LARS, LAMB)."""
    new = np.array(weights, dtype=np.float32, copy=True)
    extra = {} if tensor_norms is None else {"tensor_norms": tensor_norms}
    optimizer.update(new, mean_gradient(grad_sum, normalizer), state, lo=lo, lr=lr, grad_sq_norm=grad_sq_norm,
                     **extra)
    return new
