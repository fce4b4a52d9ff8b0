"""The fixed summation order of per-partition gradients: a binary tree over partition ids.

Float addition is not associative, so "the sum of the partitions' gradients" needs a defined order for a run to
be bit-reproducible. sparkdl defines it once, here, and the single-process reference
(:func:`sparkdl.step.train_step` with ``groups=``), the engine's Python reduce and its JVM reduce
(``jvm_bridge/.../TreeSum.java``) all follow it:

* a **node** ``(lo, level)`` covers the partition ids ``[lo, lo + 2**level)``, ``lo`` a multiple of ``2**level``;
  a leaf is ``(p, 0)``;
* the value of a node is its left child's value plus its right child's (left operand first); a child none of whose
  partitions contributed (no rows in this batch, an empty partition, ids past the last partition) is skipped, so a
  node with one contributing child has that child's value;
* the total starts from zero: ``0 + value(root)`` (the gradient sum; the loss sum likewise in float64).

Because every node's value depends only on its own leaves, a task holding all partitions of an aligned node can
send that node's value instead of its leaves (:func:`maximal_nodes`), and the result is bitwise the same however
partitions are grouped into tasks and executors. :class:`TreeSum` accepts leaves and pre-summed nodes alike, in
increasing ``lo`` order, keeping O(log N) values alive.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from sparkdl.kernels.half import from_half

__all__ = ["TreeSum", "tree_sum", "maximal_nodes", "node_end"]


def node_end(lo: int, level: int) -> int:
    """One past the last partition id of node ``(lo, level)``."""
    return lo + (1 << level)


def _parent_of(a: tuple, b: tuple) -> tuple:
    """The lowest common ancestor ``(lo, level)`` of two disjoint nodes, ``a`` before ``b``."""
    level = max(a[1], b[1])
    while (a[0] >> level) != (b[0] >> level):
        level += 1
    return (a[0] >> level) << level, level


class TreeSum:
    """Sum values in the tree order of the module docstring.

    Parameters
    ----------
    add : callable
        ``add(left, right)`` returns the sum (a new object, or ``left`` updated in place).

    Push disjoint aligned nodes with :meth:`push` in increasing ``lo``; :meth:`result` returns the root's
    value (None when nothing was pushed) — the caller adds it to its zero. :meth:`nodes` instead returns the
    values of the maximal nodes built so far, for a partial sum that is sent on (a task, a combine stage).
    """

    def __init__(self, add: Callable):
        self._add = add
        self._stack: list = []  # [(lo, level, value)], increasing lo, values of completed subtrees

    def push(self, lo: int, level: int, value) -> None:
        """Add node ``(lo, level)`` with ``value``; ``lo`` must be past every node pushed before."""
        if lo % (1 << level):
            raise ValueError(f"TreeSum.push: node lo={lo} is not aligned to level {level}")
        if self._stack and lo < node_end(*self._stack[-1][:2]):
            raise ValueError(f"TreeSum.push: node lo={lo} does not follow the previous node "
                             f"({self._stack[-1][0]}, level {self._stack[-1][1]})")
        self._merge(lo)
        self._stack.append((lo, level, value))

    def _merge(self, before: float) -> None:
        """Combine the two newest subtrees while their common ancestor ends at or before ``before`` (every leaf
        of it has been pushed or will never be)."""
        stack = self._stack
        while len(stack) >= 2:
            (alo, alev, a), (blo, blev, b) = stack[-2], stack[-1]
            lo, level = _parent_of((alo, alev), (blo, blev))
            if node_end(lo, level) > before:
                break
            stack[-2:] = [(lo, level, self._add(a, b))]

    def nodes(self) -> list:
        """The pushed values combined as far as the pushed nodes allow: ``[(lo, level, value)]``."""
        self._merge(float("inf"))
        return list(self._stack)

    def result(self):
        """The root's value (None if nothing was pushed)."""
        nodes = self.nodes()
        return nodes[0][2] if nodes else None


def tree_sum(parts, size: int | None = None, dtype=np.float32):
    """``0 + value(root)`` of leaves ``parts``: an iterable of ``(p, array)`` in increasing ``p`` (arrays of
    float16 are widened to ``dtype`` first). ``size``: the length of the zero when nothing is given."""
    tree = TreeSum(lambda a, b: np.add(a, b, out=a))
    for p, value in parts:
        half = isinstance(value, np.ndarray) and value.dtype == np.float16 and value.ndim == 1 and dtype == np.float32
        wide = from_half(value) if half else None  # exact, by table
        tree.push(int(p), 0, np.array(value, dtype=dtype, copy=True) if wide is None else wide)
    root = tree.result()
    if root is None:
        if size is None:
            raise ValueError("tree_sum: no parts and no size")
        return np.zeros(size, dtype)
    return np.zeros(root.shape, dtype) + root


def maximal_nodes(own, free: Callable[[int], bool], num_leaves: int) -> list[tuple[int, int]]:
    """The largest aligned nodes made of partitions in ``own`` (ids) or ``free`` (contribute nothing anywhere,
    e.g. empty partitions) that contain an ``own`` partition, as ``(lo, level)`` in increasing ``lo``.

    A task that holds ``own`` sends one pre-summed value per node; ``num_leaves`` (the number of partitions)
    bounds the tree: ids past it are free."""
    members = set(int(p) for p in own)
    top = max(1, int(num_leaves) - 1).bit_length()  # level of the root: 2**top >= num_leaves

    def holds(lo: int, level: int) -> bool:
        return all(p in members or p >= num_leaves or free(p) for p in range(lo, min(node_end(lo, level),
                                                                                       num_leaves)))
    out: list = []
    for p in sorted(members):
        if out and p < node_end(*out[-1]):
            continue
        level = 0
        while level < top and holds((p >> (level + 1)) << (level + 1), level + 1):
            level += 1
        out.append(((p >> level) << level, level))
    return out
