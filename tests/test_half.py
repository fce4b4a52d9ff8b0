"""sparkdl.kernels.half: float32 -> float16 bit for bit numpy's ``astype('<f2')`` (round to nearest even, overflow,
subnormals, signed zeros, infinities, NaN payloads) and float16 -> float32 exact. The kernels were checked against
numpy on all 2**32 float32 patterns when written; this checks every class of input, and a random sample."""
import numpy as np
import pytest

from sparkdl.kernels.half import from_half, to_half


def _bits(h):
    return h.view(np.uint16)


def _edge_patterns():
    """float32 bit patterns at every boundary of the conversion, with their neighbours and both signs."""
    centres = [0x00000000, 0x00000001, 0x007FFFFF, 0x00800000,  # zero, float32 subnormals, smallest normal
               0x33000000, 0x33000001, 0x337FFFFF, 0x33800000, 0x33C00000,  # 2**-25 (a tie to 0), 2**-24
               0x387FC000, 0x387FE000, 0x387FF000, 0x38800000,  # around half's smallest normal 2**-14
               0x3F800000, 0x3F801000, 0x3F802000, 0x3F803000,  # 1 + ties (to even and up)
               0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000,  # 65504 (largest half), 65520 (to inf)
               0x7F7FFFFF, 0x7F800000,  # largest float32, infinity
               0x7F800001, 0x7F801FFF, 0x7F802000, 0x7FC00000, 0x7FFFFFFF]  # NaNs: payloads lost and kept
    pats = {c + d for c in centres for d in (-1, 0, 1) if 0 <= c + d < 1 << 31}
    pats = np.array(sorted(pats), np.uint32)
    return np.concatenate([pats, pats | np.uint32(0x80000000)])


def test_to_half_equals_numpy_on_every_boundary_and_a_random_sample():
    rng = np.random.default_rng(0)
    patterns = np.concatenate([_edge_patterns(), rng.integers(0, 1 << 32, 2_000_000, dtype=np.uint64).astype(np.uint32)])
    x = patterns.view(np.float32)
    with np.errstate(all="ignore"):
        want = x.astype("<f2")
    got = to_half(x)
    assert got.dtype == np.dtype("<f2") and got.shape == x.shape
    np.testing.assert_array_equal(_bits(got), _bits(want))
    # the classes are all there: subnormal halves, infinities from rounding, NaNs whose payload was dropped
    assert ((_bits(want) & 0x7C00) == 0).sum() > 10 and (np.isinf(want) & np.isfinite(x)).any()
    assert (_bits(want)[np.isnan(x)] & 0x3FF == 1).any()


def test_from_half_is_numpy_widening_on_all_65536_patterns():
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view("<f2")
    got = from_half(h)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), h.astype(np.float32).view(np.uint32))


def test_to_half_refuses_what_would_round_twice():
    with pytest.raises(TypeError, match="1-D float32.*float64"):
        to_half(np.ones(3))
    with pytest.raises(TypeError, match="2-D float32"):
        to_half(np.ones((2, 2), np.float32))
