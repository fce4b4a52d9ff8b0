"""The engine's pure pieces: batch plan, block split/merge, shard update, re-sharding (no Spark)."""
import numpy as np
import pytest

from sparkdl.engine.allreduce import block_bounds, merge_blocks, split_blocks, sum_block
from sparkdl.engine.checkpointing import reshard_states
from sparkdl.engine.plan import batch_sizes, epoch_permutation, global_batch, local_schedule
from sparkdl.optim import Adam


@pytest.mark.parametrize("n", [1, 2, 3, 17, 1000, 4097])
def test_epoch_permutation_is_a_bijection(n):
    pi = epoch_permutation(7, 2, n, np.arange(n))
    assert sorted(pi.tolist()) == list(range(n))


def test_permutation_depends_on_seed_and_epoch():
    a = epoch_permutation(1, 0, 500, np.arange(500))
    assert not np.array_equal(a, epoch_permutation(1, 1, 500, np.arange(500)))
    assert not np.array_equal(a, epoch_permutation(2, 0, 500, np.arange(500)))
    np.testing.assert_array_equal(a, epoch_permutation(1, 0, 500, np.arange(500)))
    np.testing.assert_array_equal(epoch_permutation(1, 0, 50, np.arange(50), shuffle=False), np.arange(50))


@pytest.mark.parametrize("sizes,batch", [([5, 0, 3, 10], 4), ([100], 7), ([0, 0, 3], 8), ([13, 13, 13], 13),
                                         ([1, 2, 3, 4, 5, 6, 7, 8], 5)])
def test_local_schedules_partition_every_global_batch(sizes, batch):
    n = sum(sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    iters = len(batch_sizes(n, batch))
    for epoch in range(2):
        plans = [local_schedule(3, epoch, n, offsets[p], sizes[p], batch) for p in range(len(sizes))]
        seen = []
        for i in range(iters):
            ids = np.concatenate([offsets[p] + rows[starts[i]:starts[i + 1]] for p, (rows, starts) in enumerate(plans)])
            assert len(ids) == batch_sizes(n, batch)[i]
            assert sorted(ids.tolist()) == sorted(global_batch(3, epoch, n, batch, i).tolist())
            seen.extend(ids.tolist())
        assert sorted(seen) == list(range(n))  # every sample exactly once per epoch


def test_batch_sizes_and_errors():
    np.testing.assert_array_equal(batch_sizes(10, 4), [4, 4, 2])
    with pytest.raises(ValueError, match="batch_size"):
        batch_sizes(10, 0)
    with pytest.raises(ValueError, match="empty"):
        batch_sizes(0, 4)


def test_blocks_round_trip():
    v = np.arange(11, dtype=np.float32)
    b = block_bounds(11, 3)
    assert b[0] == 0 and b[-1] == 11 and np.all(np.diff(b) >= 3)
    blocks = split_blocks(v, b)
    assert all(blk.base is v for blk in blocks)  # views, not copies
    np.testing.assert_array_equal(merge_blocks(enumerate(blocks), b), v)
    with pytest.raises(RuntimeError, match=r"\[1\]"):
        merge_blocks([(0, blocks[0]), (2, blocks[2])], b)


def test_sum_block_widens_fp16_and_handles_nothing():
    parts = [(1, np.full(3, 0.25, np.float32), 0.5, 3.0), (0, np.full(3, 0.5, np.float16), 1.0, 2.0)]
    g, loss, norm = sum_block(parts, 3)
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g, [0.75, 0.75, 0.75])
    assert (loss, norm) == (1.5, 5.0)
    g, loss, norm = sum_block([], 4)
    np.testing.assert_array_equal(g, np.zeros(4))
    assert (loss, norm) == (0.0, 0.0)


def test_reshard_states_equals_whole_vector_state():
    opt = Adam(lr=0.1)
    rng = np.random.default_rng(0)
    p = rng.standard_normal(10).astype(np.float32)
    whole = opt.init_state(0, 10)
    for _ in range(3):
        opt.update(p.copy(), rng.standard_normal(10).astype(np.float32), whole)
    old = block_bounds(10, 3)
    by_range = {(int(old[k]), int(old[k + 1])): {key: (v[old[k]:old[k + 1]].copy() if isinstance(v, np.ndarray) else v)
                                                 for key, v in whole.items()} for k in range(3)}
    new = block_bounds(10, 4)
    states = reshard_states(by_range, new)
    for k, s in enumerate(states):
        assert s["step"] == 3
        for key in ("exp_avg", "exp_avg_sq"):
            if key in whole:
                np.testing.assert_array_equal(s[key], whole[key][new[k]:new[k + 1]])


def test_a_group_task_plans_each_partition_once_per_epoch(monkeypatch):
    """One task computes many co-located partitions per iteration: their epoch plans stay cached."""
    from types import SimpleNamespace

    from sparkdl.engine import tasks
    calls = []

    def counting(*args, **kw):
        calls.append(args[1])  # the epoch
        return local_schedule(*args, **kw)
    monkeypatch.setattr(tasks, "local_schedule", counting)
    monkeypatch.setattr(tasks, "_SCHEDULES", {})
    sizes = [7] * 100
    fit = SimpleNamespace(offsets=np.concatenate([[0], np.cumsum(sizes)]), seed=3, batch_size=64, shuffle=True)
    for epoch in (0, 1):
        for iteration in range(3):
            rows = [tasks._local_rows(fit, epoch, iteration, p) for p in range(100)]
            assert sum(len(r) for r in rows) == 64
    assert calls == [0] * 100 + [1] * 100
    assert {k[1] for k in tasks._SCHEDULES} == {0, 1}  # older epochs are dropped, these two kept
