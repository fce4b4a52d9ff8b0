"""The fixed summation order over partition ids (sparkdl.step.tree_sum): definition, pre-summed nodes, reference."""
import numpy as np
import pytest

from sparkdl import nn
from sparkdl.step import gradient_sum, grouped_gradient_sum, sum_reduction
from sparkdl.step.tree_sum import TreeSum, maximal_nodes, tree_sum


def _recursive(values: dict, lo: int, level: int):
    """The definition, written independently: left + right over aligned halves, absent children skipped."""
    if level == 0:
        return values.get(lo)
    half = 1 << (level - 1)
    a, b = _recursive(values, lo, level - 1), _recursive(values, lo + half, level - 1)
    if a is None or b is None:
        return b if a is None else a
    return a + b


def _values(n, present, seed):
    rng = np.random.default_rng(seed)
    # values of very different magnitudes: float32 addition is far from associative on them
    return {p: (rng.standard_normal(5) * 10.0 ** rng.integers(-6, 7, 5)).astype(np.float32) for p in present}


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 13, 100])
def test_leaves_follow_the_recursive_definition(n):
    rng = np.random.default_rng(n)
    present = sorted(rng.choice(n, max(1, n * 2 // 3), replace=False).tolist())
    values = _values(n, present, n)
    expected = np.float32(0) + _recursive(values, 0, max(1, n - 1).bit_length())
    np.testing.assert_array_equal(tree_sum((p, values[p]) for p in present), expected)


def test_four_leaves_pair_up_and_three_chain():
    a, b, c, d = (np.float32(x) for x in (1e8, 1.0, -1e8, 1.0))
    assert tree_sum([(0, [a]), (1, [b]), (2, [c]), (3, [d])])[0] == (a + b) + (c + d) == 0.0
    assert tree_sum([(0, [a]), (2, [c]), (3, [d])])[0] == a + (c + d) == 0.0
    assert ((a + b) + c) + d == 1.0  # the sequential order, which the tree replaces
    np.testing.assert_array_equal(tree_sum([], size=2), [0, 0])


@pytest.mark.parametrize("groups", [1, 2, 3, 5, 16])
def test_any_grouping_into_tasks_gives_the_same_bits(groups):
    n = 37
    rng = np.random.default_rng(groups)
    present = [p for p in range(n) if rng.random() < 0.8]
    values = _values(n, present, 7)
    empty = {3, 4, 20}  # partitions without data: anyone's
    direct = tree_sum((p, values[p]) for p in present if p not in empty)
    owner = rng.integers(0, groups, n)  # any partition -> task map, not contiguous
    records = []
    for t in range(groups):
        own = [p for p in range(n) if owner[p] == t and p not in empty]
        for lo, level in maximal_nodes(own, lambda p: p in empty, n):
            task = TreeSum(lambda x, y: x + y)
            for p in own:
                if lo <= p < lo + (1 << level) and p in values:
                    task.push(p, 0, values[p].copy())
            records += task.nodes()
    records.sort(key=lambda r: r[0])
    final = TreeSum(lambda x, y: x + y)
    for lo, level, value in records:
        final.push(lo, level, value)
    np.testing.assert_array_equal(np.float32(0) + final.result(), direct)


def test_maximal_nodes():
    assert maximal_nodes(range(8), lambda p: False, 8) == [(0, 3)]
    assert maximal_nodes([0, 1, 2, 5, 6], lambda p: False, 8) == [(0, 1), (2, 0), (5, 0), (6, 0)]
    assert maximal_nodes([0, 1, 2, 5, 6], lambda p: p in (3, 4, 7), 8) == [(0, 3)]
    assert maximal_nodes([4, 5, 6], lambda p: False, 7) == [(4, 2)]  # id 7 does not exist
    assert maximal_nodes([], lambda p: False, 7) == []


def test_push_refuses_misaligned_or_overlapping_nodes():
    tree = TreeSum(lambda x, y: x + y)
    with pytest.raises(ValueError, match="not aligned"):
        tree.push(2, 2, 1.0)
    tree.push(4, 2, 1.0)
    with pytest.raises(ValueError, match="does not follow"):
        tree.push(6, 0, 1.0)


def test_reference_groups_sum_in_tree_order():
    model = nn.Sequential(nn.Linear(3, 2)).initialize(0)
    loss = sum_reduction(nn.MSELoss())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((10, 3)).astype(np.float32) * 100
    y = rng.standard_normal((10, 2)).astype(np.float32)
    sizes = [3, 0, 4, 2, 1]
    parts, lo = {}, 0
    for g, s in enumerate(sizes):
        if s:
            grad = model.zeros_like_parameters()
            value, _ = gradient_sum(model, loss, x[lo:lo + s], y[lo:lo + s], None, grad)
            parts[g] = (grad, value)
        lo += s
    out = model.zeros_like_parameters()
    total, _ = grouped_gradient_sum(model, loss, x, y, None, sizes, out)
    # tree over [0, 8): ([0] + ([2] + [3])) + [4]; group 1 is empty
    expected = np.float32(0) + ((parts[0][0] + (parts[2][0] + parts[3][0])) + parts[4][0])
    np.testing.assert_array_equal(out, expected)
    assert not np.array_equal(out, np.float32(0) + parts[0][0] + parts[2][0] + parts[3][0] + parts[4][0])
    assert total == 0.0 + ((parts[0][1] + (parts[2][1] + parts[3][1])) + parts[4][1])
