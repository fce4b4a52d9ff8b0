"""The dropout mask rule (sparkdl.nn.dropout_masks): one seed per call, element (r, j) kept iff
u(seed, r * row_size + j) >= p, r counted in the whole batch. Expected masks come from a plain-numpy SplitMix64
written here, not from the kernel."""
import numpy as np
import pytest

from sparkdl import nn
from sparkdl.nn.dropout_masks import current_row_offset, dropout_mask, row_offset


def _splitmix_uniform(seed, counters):
    """Plain-numpy reference: the counter-th SplitMix64 output of ``seed``, top 24 bits / 2**24."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + (counters.astype(np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return (z >> np.uint64(40)).astype(np.float64) / 2.0 ** 24


def _expected(seed, shape, p, batch_axis=0, offset=0):
    """Scaled keep mask by the documented rule, element by element from its (row, position in row)."""
    idx = np.indices(shape)
    row = idx[batch_axis] + offset
    others = [s for k, s in enumerate(shape) if k != batch_axis]
    within = np.ravel_multi_index([i for k, i in enumerate(idx) if k != batch_axis], others)
    counters = row * int(np.prod(others)) + within
    return np.where(_splitmix_uniform(seed, counters) >= p, 1.0 / (1.0 - p), 0.0)


def _seed(state_seed):
    return np.random.default_rng(state_seed).integers(0, 2 ** 64, dtype=np.uint64)


def test_reference_uniform_is_splitmix64():
    # SplitMix64 seeded with 0: first outputs 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4 (Vigna's splitmix64.c)
    u = _splitmix_uniform(0, np.arange(2))
    np.testing.assert_array_equal(u, [0xE220A8 / 2 ** 24, 0x6E789E / 2 ** 24])


@pytest.mark.parametrize("shape,batch_axis", [((7, 5), 0), ((3, 6, 4), 0), ((4, 6, 5), 1), ((2, 3, 4, 5), 0),
                                              ((9,), 0)])
def test_mask_follows_the_documented_rule(shape, batch_axis):
    p = 0.3
    mask = dropout_mask(np.random.default_rng(11), shape, p, np.float64, batch_axis)
    np.testing.assert_array_equal(mask, _expected(_seed(11), shape, p, batch_axis))
    m32 = dropout_mask(np.random.default_rng(11), shape, p, np.float32, batch_axis)
    assert m32.dtype == np.float32
    np.testing.assert_array_equal(m32, mask.astype(np.float32))


@pytest.mark.parametrize("batch_axis", [0, 1])
def test_a_part_with_its_row_offset_draws_its_rows_of_the_whole_mask(batch_axis):
    whole_shape = (10, 3, 4) if batch_axis == 0 else (3, 10, 4)
    whole = dropout_mask(np.random.default_rng(2), whole_shape, 0.4, np.float32, batch_axis)
    for lo, hi in ((0, 4), (4, 7), (7, 10)):
        part_shape = list(whole_shape)
        part_shape[batch_axis] = hi - lo
        with row_offset(lo):
            part = dropout_mask(np.random.default_rng(2), tuple(part_shape), 0.4, np.float32, batch_axis)
        np.testing.assert_array_equal(part, np.take(whole, np.arange(lo, hi), axis=batch_axis))  # bitwise
        expect = _expected(_seed(2), tuple(part_shape), 0.4, batch_axis, lo).astype(np.float32)
        np.testing.assert_array_equal(part, expect)
    assert current_row_offset() == 0  # restored after the block


def test_row_offset_nests_is_per_thread_and_validates():
    import threading
    seen = []
    with row_offset(5):
        with row_offset(9):
            assert current_row_offset() == 9
        assert current_row_offset() == 5
        t = threading.Thread(target=lambda: seen.append(current_row_offset()))
        t.start()
        t.join()
    assert seen == [0] and current_row_offset() == 0
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="row_offset: lo must be an integer >= 0"):
            with row_offset(bad):
                pass


def test_one_draw_per_call_whatever_the_shape():
    for shape in ((2, 3), (50, 40, 3), ()):
        rng, ref = np.random.default_rng(4), np.random.default_rng(4)
        dropout_mask(rng, shape, 0.5, np.float32)
        ref.integers(0, 2 ** 64, dtype=np.uint64)
        assert rng.bit_generator.state == ref.bit_generator.state
    rng = np.random.default_rng(4)
    np.testing.assert_array_equal(dropout_mask(rng, (3, 2), 1.0, np.float32), 0)  # p = 1: all dropped, one draw
    assert rng.bit_generator.state == ref.bit_generator.state


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_neighbouring_counters_and_seeds_are_independent(p):
    """Keep fraction 1 - p, and neighbours (next element, next row, next call's seed) agree as often as
    independent draws do, p**2 + (1-p)**2, each within 5 sigma."""
    rng = np.random.default_rng(3)
    a = dropout_mask(rng, (400, 250), p, np.float32) != 0
    b = dropout_mask(rng, (400, 250), p, np.float32) != 0
    assert abs(a.mean() - (1 - p)) < 5 * np.sqrt(p * (1 - p) / a.size)
    agree = p ** 2 + (1 - p) ** 2
    for x, y in ((a[:, :-1], a[:, 1:]), (a[:-1], a[1:]), (a, b)):
        assert abs((x == y).mean() - agree) < 5 * np.sqrt(agree * (1 - agree) / x.size)


def test_dropout_layer_uses_the_rule_and_its_batch_axis():
    x = np.random.default_rng(0).standard_normal((4, 6, 5)).astype(np.float32)
    layer = nn.Dropout(0.25)
    for axis in (0, 1, 2):
        y, mask = layer.forward(x, training=True, rng=np.random.default_rng(8), batch_axis=axis)
        np.testing.assert_array_equal(mask, _expected(_seed(8), x.shape, 0.25, axis).astype(np.float32))
        np.testing.assert_array_equal(y, x * mask)
    for bad in (3, -1, 1.0):
        with pytest.raises(ValueError, match=r"Dropout: batch_axis must be an axis of the input, 0 <= batch_axis < 3"):
            layer.forward(x, training=True, rng=np.random.default_rng(8), batch_axis=bad)


def test_attention_and_recurrent_masks_have_the_sample_as_row():
    """MultiheadAttention: probabilities (N, H, L, L), row n; LSTM between layers: (T, N, H) in either layout."""
    x = np.random.default_rng(0).standard_normal((3, 4, 8)).astype(np.float32)
    mha = nn.MultiheadAttention(8, 2, dropout=0.3, batch_first=True).initialize(0)
    keep = mha.forward(x, training=True, rng=np.random.default_rng(6))[1][3]
    np.testing.assert_array_equal(keep, _expected(_seed(6), (3, 2, 4, 4), 0.3).astype(np.float32))
    for batch_first in (True, False):
        lstm = nn.LSTM(8, 5, num_layers=2, dropout=0.4, batch_first=batch_first).initialize(0)
        (_, _), (caches, _, (t, n, _)) = lstm.forward(x, training=True, rng=np.random.default_rng(6))
        mask = caches[0][2]
        assert mask.shape == (t, n, 5)
        np.testing.assert_array_equal(mask, _expected(_seed(6), (t, n, 5), 0.4, batch_axis=1).astype(np.float32))


@pytest.mark.parametrize("batch_first", [True, False])
def test_transformer_layer_rows_run_alone_with_their_offset_give_the_whole_batch_rows(batch_first):
    """Every dropout of the layer keys its mask on the sample, also for (L, N, E) inputs."""
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.3, batch_first=batch_first).initialize(0)
    x = np.random.default_rng(0).standard_normal((6, 4, 8)).astype(np.float32)
    x = x if batch_first else np.ascontiguousarray(x.transpose(1, 0, 2))
    rows = (slice(2, 5),) if batch_first else (slice(None), slice(2, 5))
    whole = layer.forward(x, training=True, rng=np.random.default_rng(1))[0]
    with row_offset(2):
        part = layer.forward(np.ascontiguousarray(x[rows]), training=True, rng=np.random.default_rng(1))[0]
    np.testing.assert_allclose(part, whole[rows], rtol=1e-5, atol=1e-6)
    other = layer.forward(x, training=True, rng=np.random.default_rng(2))[0]
    assert np.abs(other - whole).max() > 0.1  # the masks matter
