"""Token-id sequence columns (``array<int>`` / ``array<long>`` of any length) in the Spark ML stages.

A network whose first layer is :class:`sparkdl.nn.SequenceLengths` reads token ids: its ``featuresCol`` is
then an integer array column of variable length (feature kind ``'tokens'``). Each row becomes one row of an
``(n, T)`` float32 block, padded with the layer's ``padding_value`` (default -1) or truncated to ``T``
tokens; ``SequenceLengths`` turns the padding back into per-row lengths inside the network, so padded steps
contribute nothing. ``T`` is the ``maxLength`` Param, or by default the longest training row. In
``transform`` each Arrow batch is padded to its own longest row (at most ``T``) unless ``maxLength`` is set.

Validated before training, as Spark SQL like every other check (``token_checks`` in
:mod:`sparkdl.ml.validation`): null rows or ids, negative ids, and ids >= the vocabulary size --
``num_embeddings`` of the network's first ``Embedding``/``EmbeddingBag`` -- each reported with its count and
an example row.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql.types import IntegralType

__all__ = ["token_input", "token_kind", "decode_tokens"]


def _leaves(network):
    return [m for _, m in network.named_modules() if not m.children()]


def token_input(network) -> tuple[int, int | None] | None:
    """``(padding_value, vocabulary size or None)`` if ``network`` reads token ids (its first layer is
    ``SequenceLengths``), else None. The vocabulary size is ``num_embeddings`` of its first Embedding(Bag)."""
    from sparkdl.nn import Embedding, EmbeddingBag, SequenceLengths
    if network is None:
        return None
    leaves = _leaves(network)
    if not leaves or not isinstance(leaves[0], SequenceLengths):
        return None
    vocab = next((m.num_embeddings for m in leaves if isinstance(m, (Embedding, EmbeddingBag))), None)
    return leaves[0].padding_value, vocab


def token_kind(schema, stage: str, kind: str, cols) -> str:
    """``'tokens'`` for the integer array column of a token network; TypeError for any other column."""
    dtype = schema[cols[0]].dataType
    if kind != "array" or len(cols) != 1 or not isinstance(dtype.elementType, IntegralType):
        raise TypeError(f"{stage}: the network starts with SequenceLengths (it reads token ids), so featuresCol "
                        f"must be an array<int> or array<long> column of token ids, got "
                        f"{dtype.simpleString() if len(cols) == 1 else f'featuresCols {list(cols)}'}; map tokens "
                        "to ids first (e.g. with CountVectorizer's vocabulary)")
    return "tokens"


def decode_tokens(arr: pa.ListArray, length: int, padding_value: int, vocab_size: int | None,
                  per_batch: bool) -> tuple[np.ndarray, np.ndarray]:
    """One batch of token-id lists as ``(x, valid)``: x float32 (n, T') padded with ``padding_value``,
    T' = ``length`` (or the batch's longest row, at most ``length``, when ``per_batch``); longer rows are
    truncated to their first T' ids. Rows that are null, hold nulls, or hold ids outside
    ``[0, vocab_size)`` are invalid (NaN)."""
    n = len(arr)
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)
    offsets = arr.offsets.to_numpy()
    values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    lengths = np.diff(offsets)
    per_row = np.repeat(np.arange(n), lengths)
    flat = values.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    bad = (flat < 0) | (flat >= vocab_size) if vocab_size is not None else flat < 0  # nulls are -1 here
    valid &= np.bincount(per_row[bad], minlength=n) == 0
    t = length
    if per_batch and n:
        t = int(max(1, min(length, lengths[valid].max() if valid.any() else 1)))
    x = np.full((n, t), padding_value, np.float32)
    take = np.minimum(lengths, t)
    mask = np.arange(t) < take[:, None]
    idx = (offsets[:-1] - offsets[0])[:, None] + np.arange(t)
    x[mask] = flat[idx[mask]]
    x[~valid] = np.nan
    return x, valid
