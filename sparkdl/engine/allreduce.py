"""Block partitioning of the flat vector and the per-block reduce/update — pure functions, no Spark.

The gradient vector of P elements is cut into K contiguous blocks ``[bounds[k], bounds[k+1])`` (sizes
differ by at most one). Splitting is slicing; :func:`merge_blocks` is the inverse. The reduce side of the
AllReduce sums block k over partitions (:func:`sum_block`), divides by the *global* normalizer (the sum of
every partition's loss normalizer, e.g. sample count: global-mean semantics), then the optimizer updates
weight shard k with shard k's state (:func:`update_shard`).
"""
from __future__ import annotations

import numpy as np

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
    """Sum gradient block contributions ``(block, loss_sum, normalizer)`` in float32 (fp16 blocks are
    widened first). Returns ``(grad_sum, loss_sum, normalizer_sum)``; zeros when nothing arrived
    (every partition was empty for this iteration)."""
    acc = np.zeros(size, dtype=np.float32)
    loss_sum = norm_sum = 0.0
    for block, loss_part, norm_part in parts:
        acc += block  # float16 blocks are promoted to float32 by the addition
        loss_sum += loss_part
        norm_sum += norm_part
    return acc, loss_sum, norm_sum


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
