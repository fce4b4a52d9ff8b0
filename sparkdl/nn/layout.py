"""The one place that maps parameter and buffer names to slices of a flat vector.

A model's learned parameters live in one contiguous 1-D array (float32 by default), and so do its
persistent buffers (e.g. BatchNorm running statistics). Names are dotted paths in depth-first order —
a module's own tensors first, then each child in registration order — exactly like PyTorch's
``named_parameters()``/``state_dict()`` keys. Depth-first order makes every sub-module's tensors a
contiguous slice, so a layer can be handed a slice of the model's flat vector (or of a flat gradient)
without copying.

The optimizer (shards ``[lo, hi)``), the distributed AllReduce (blocks) and persistence (archives keyed
by name) all use :class:`Layout`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np

__all__ = ["Entry", "Layout"]


@dataclass(frozen=True)
class Entry:
    """One named tensor inside a flat vector: ``flat[offset:offset + size].reshape(shape)``."""

    name: str
    offset: int
    shape: tuple

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def stop(self) -> int:
        return self.offset + self.size


class Layout:
    """Ordered mapping ``name -> (offset, shape)`` over a flat vector.

    Parameters
    ----------
    named_shapes : iterable of (str, tuple)
        Names and shapes in flat order. Names must be unique.

    Raises
    ------
    ValueError
        If a name repeats.
    """

    def __init__(self, named_shapes: Iterable[tuple[str, tuple]]):
        entries, offset = [], 0
        for name, shape in named_shapes:
            entry = Entry(name, offset, tuple(int(s) for s in shape))
            entries.append(entry)
            offset = entry.stop
        self._entries = {e.name: e for e in entries}
        if len(self._entries) != len(entries):
            names = [e.name for e in entries]
            dup = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"Layout: duplicate tensor names {dup}")
        self.size = offset

    @classmethod
    def of(cls, named_arrays: Iterable[tuple[str, np.ndarray]]) -> "Layout":
        """Layout of named arrays, in the given order."""
        return cls((name, np.shape(a)) for name, a in named_arrays)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __getitem__(self, name: str) -> Entry:
        return self._entries[name]

    def names(self) -> list[str]:
        return list(self._entries)

    def views(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Named views (no copies) into ``flat``, which must have ``self.size`` elements."""
        if flat.ndim != 1 or flat.shape[0] != self.size:
            raise ValueError(f"Layout.views: expected a 1-D vector of {self.size} elements, got shape {flat.shape}")
        return {e.name: flat[e.offset:e.stop].reshape(e.shape) for e in self}

    def pack(self, arrays: dict[str, np.ndarray], dtype=np.float32) -> np.ndarray:
        """Concatenate named arrays into a new flat vector (the inverse of :meth:`views`)."""
        flat = np.empty(self.size, dtype=dtype)
        for e in self:
            flat[e.offset:e.stop] = np.asarray(arrays[e.name]).reshape(-1)
        return flat

    def overlapping(self, lo: int, hi: int) -> list[Entry]:
        """Entries that intersect the shard ``[lo, hi)`` of the flat vector."""
        return [e for e in self if e.offset < hi and e.stop > lo]

    def __repr__(self) -> str:
        return f"Layout({len(self)} tensors, {self.size} elements)"
