"""SiLU, Softplus, PReLU, LayerNorm, GroupNorm: argument and input errors, and values at the extremes
(the registry in tests/cases/norm_act_v2.py covers gradients, PyTorch parity and persistence)."""
import numpy as np
import pytest
import torch

from sparkdl import nn


def test_softplus_and_silu_at_extremes_match_torch():
    x = np.array([-100, -30, -5, -1e-3, 0, 1e-3, 5, 19.9, 20.1, 30, 100], np.float32)
    for ours, theirs in ((nn.Softplus(), torch.nn.Softplus()), (nn.Softplus(0.5, 5.0), torch.nn.Softplus(0.5, 5.0)),
                         (nn.SiLU(), torch.nn.SiLU())):
        y, cache = ours.forward(x)
        xt = torch.from_numpy(x.copy()).requires_grad_(True)
        yt = theirs(xt)
        yt.sum().backward()
        assert np.all(np.isfinite(y))
        np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-6, atol=1e-30)
        np.testing.assert_allclose(ours.backward(cache, np.ones_like(x), np.zeros(0, np.float32)), xt.grad.numpy(),
                                   rtol=1e-6, atol=1e-30)


def test_prelu_slope_gradient_by_hand():
    m = nn.PReLU(2, init=0.5)
    x = np.array([[[1.0, -2.0], [-3.0, 4.0]]], np.float32)  # (N=1, C=2, L=2)
    y, cache = m.forward(x)
    np.testing.assert_array_equal(y, [[[1.0, -1.0], [-1.5, 4.0]]])
    g = np.zeros(2, np.float32)
    gx = m.backward(cache, np.array([[[1.0, 10.0], [100.0, 1.0]]], np.float32), g)
    np.testing.assert_array_equal(gx, [[[1.0, 5.0], [50.0, 1.0]]])
    np.testing.assert_array_equal(g, [-20.0, -300.0])  # sum of grad_y * x over the negative inputs


@pytest.mark.parametrize("make,exc,match", [
    (lambda: nn.Softplus(beta=0), ValueError, "Softplus: beta must be non-zero"),
    (lambda: nn.Softplus(threshold="20"), TypeError, "Softplus: threshold must be a real number"),
    (lambda: nn.PReLU(0), ValueError, "PReLU: num_parameters must be >= 1, got 0"),
    (lambda: nn.PReLU(2.0), TypeError, "PReLU: num_parameters must be an int"),
    (lambda: nn.PReLU(init=None), TypeError, "PReLU: init must be a real number"),
    (lambda: nn.LayerNorm(0), ValueError, "LayerNorm: normalized_shape must be >= 1, got 0"),
    (lambda: nn.LayerNorm([]), ValueError, "LayerNorm: normalized_shape must have at least one axis"),
    (lambda: nn.LayerNorm(4, eps=-1), ValueError, "LayerNorm: eps must be >= 0"),
    (lambda: nn.LayerNorm(4, bias=1), TypeError, "LayerNorm: bias must be a bool"),
    (lambda: nn.GroupNorm(3, 4), ValueError, "GroupNorm: num_channels must be divisible by num_groups, got "
                                             "num_channels=4, num_groups=3"),
    (lambda: nn.GroupNorm(2, 4, affine="yes"), TypeError, "GroupNorm: affine must be a bool"),
    (lambda: nn.GroupNorm(2, 4, eps="x"), TypeError, "GroupNorm: eps must be a real number"),
])
def test_constructor_errors(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


@pytest.mark.parametrize("layer,shape,match", [
    (nn.PReLU(3), (2, 4, 5), r"PReLU: num_parameters=3 slopes need an input \(N, C, \*\) with C == 3 on axis 1, "
                             r"got shape \(2, 4, 5\)"),
    (nn.PReLU(3), (3,), r"PReLU: num_parameters=3"),
    (nn.LayerNorm([3, 4]), (2, 4, 3), r"LayerNorm: expected input with trailing shape \(3, 4\) \(normalized_shape\)"),
    (nn.LayerNorm([3, 4]), (4,), r"LayerNorm: expected an input with at least 2 axes, got 1-D with shape \(4,\)"),
    (nn.GroupNorm(2, 4), (2, 6, 3), r"GroupNorm: expected input.shape\[1\] == 4, got shape \(2, 6, 3\)"),
    (nn.GroupNorm(2, 4), (4,), r"GroupNorm: expected an input with at least 2 axes, got 1-D"),
])
def test_input_errors(layer, shape, match):
    with pytest.raises(ValueError, match=match):
        layer.forward(np.zeros(shape, np.float32))


def test_layernorm_normalizes_rows_and_groupnorm_equals_layernorm_over_channels():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((4, 6, 5)) * 3 + 2).astype(np.float64)
    ln = nn.LayerNorm([6, 5], elementwise_affine=False).astype(np.float64)
    y = ln(x)
    np.testing.assert_allclose(y.mean(axis=(1, 2)), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=(1, 2)), 1 / (1 + 1e-5 / x.var(axis=(1, 2))), rtol=1e-12)
    gn = nn.GroupNorm(1, 6, affine=False).astype(np.float64)  # one group == LayerNorm over (C, *)
    np.testing.assert_allclose(gn(x), y, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layer,shape", [(nn.PReLU(2), (0, 2, 3)), (nn.LayerNorm(4), (0, 3, 4)),
                                         (nn.GroupNorm(2, 4), (0, 4, 3)), (nn.Softplus(), (0, 5))])
def test_empty_batch(layer, shape):
    y, cache = layer.forward(np.zeros(shape, np.float32))
    gp = np.full(layer.num_parameters(), np.nan, np.float32)
    assert y.shape == shape and layer.backward(cache, y, gp).shape == shape
    np.testing.assert_array_equal(gp, 0)  # no samples: zero parameter gradients
