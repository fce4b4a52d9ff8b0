"""Conv1d, MaxPool1d, AvgPool1d, ConvTranspose2d, Upsample: argument and input errors, the adjoint identity,
several im2col chunks (the registry in tests/cases/conv_v2.py covers gradients, parity and persistence)."""
import numpy as np
import pytest
import torch

from sparkdl import nn
from sparkdl.nn import conv_chunks as conv_module


def test_conv_transpose_is_the_adjoint_of_conv2d():
    """<conv(x), y> == <x, conv_transpose(y)> with the same weight: the defining identity."""
    args = dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), dilation=(1, 2), groups=2)
    conv = nn.Conv2d(4, 6, bias=False, **args).astype(np.float64).initialize(0)
    convt = nn.ConvTranspose2d(6, 4, bias=False, **args).astype(np.float64)
    convt.weight[...] = conv.weight
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 7, 6))
    y = rng.standard_normal((2, 6) + conv.output_size(7, 6))
    convt.output_padding = tuple((size + 2 * p - d * (k - 1) - 1) % s for size, p, d, k, s in
                                 zip((7, 6), args["padding"], args["dilation"], args["kernel_size"], args["stride"]))
    assert convt.output_size(*y.shape[2:]) == (7, 6)
    np.testing.assert_allclose(np.sum(conv(x) * y), np.sum(x * convt(y)), rtol=1e-12)


@pytest.mark.parametrize("layer,shape", [
    (nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1), (5, 3, 4, 5)),
    (nn.Conv1d(3, 4, 3, stride=2, padding=1), (5, 3, 9))])
def test_several_chunks_match_pytorch(monkeypatch, layer, shape):
    monkeypatch.setattr(conv_module, "_CHUNK_BYTES", 1)  # one sample per chunk
    layer.initialize(3)
    tm = getattr(torch.nn, type(layer).__name__)(**{k: v for k, v in layer.get_config().items()})
    tm.load_state_dict({k: torch.from_numpy(v) for k, v in layer.state_dict().items()})
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    y, cache = layer.forward(x)
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    yt = tm(xt)
    gy = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
    yt.backward(torch.from_numpy(gy))
    gp = layer.zeros_like_parameters()
    gx = layer.backward(cache, gy, gp)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.parameter_layout().views(gp)["weight"], tm.weight.grad.numpy(),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make,exc,match", [
    (lambda: nn.Conv1d(3, 4, (3, 3)), ValueError, r"Conv1d: kernel_size must be an int or a 1-tuple, got \(3, 3\)"),
    (lambda: nn.Conv1d(3, 4, 3, padding=-1), ValueError, "Conv1d: padding must be >= 0, got -1"),
    (lambda: nn.Conv1d(3, 4, 3, groups=2), ValueError, "Conv1d: in_channels must be divisible by groups"),
    (lambda: nn.Conv1d(3, 4, 3, bias=None), TypeError, "Conv1d: bias must be a bool"),
    (lambda: nn.MaxPool1d(2, padding=2), ValueError, "MaxPool1d: padding must be at most half of kernel_size"),
    (lambda: nn.AvgPool1d(2, count_include_pad=1), TypeError, "AvgPool1d: count_include_pad must be a bool"),
    (lambda: nn.MaxPool1d(0), ValueError, "MaxPool1d: kernel_size must be >= 1, got 0"),
    (lambda: nn.ConvTranspose2d(2, 2, 3, stride=2, output_padding=2), ValueError,
     "ConvTranspose2d: output_padding must be smaller than either stride or dilation"),
    (lambda: nn.ConvTranspose2d(2, 3, 3, groups=2), ValueError, "ConvTranspose2d: out_channels must be divisible"),
    (lambda: nn.Upsample(), ValueError, "Upsample: give exactly one of size and scale_factor"),
    (lambda: nn.Upsample(size=4, scale_factor=2), ValueError, "Upsample: give exactly one of size and scale_factor"),
    (lambda: nn.Upsample(scale_factor=2, mode="bicubic"), ValueError,
     r"Upsample: mode must be one of \['nearest', 'bilinear'\], got 'bicubic'"),
    (lambda: nn.Upsample(scale_factor=2, align_corners=True), ValueError,
     "Upsample: align_corners can only be set with mode='bilinear'"),
    (lambda: nn.Upsample(scale_factor=-1), ValueError, "Upsample: scale_factor must be > 0, got -1"),
    (lambda: nn.Upsample(size=(2, 0)), ValueError, "Upsample: size must be >= 1, got 0"),
    (lambda: nn.Upsample(size=(2, 2, 2)), ValueError, "Upsample: size must be a number or a pair"),
])
def test_constructor_errors(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


@pytest.mark.parametrize("layer,shape,match", [
    (nn.Conv1d(2, 3, 5), (1, 2, 4), r"Conv1d: input length 4 with padding 0 is shorter than the dilated kernel \(5\)"),
    (nn.Conv1d(2, 3, 5), (1, 3, 8), r"Conv1d: expected input.shape\[1\] == 2, got shape \(1, 3, 8\)"),
    (nn.Conv1d(2, 3, 5), (2, 8), r"Conv1d: expected 3-D input, got 2-D"),
    (nn.MaxPool1d(4), (1, 2, 3), r"MaxPool1d: input length 3 is too small for kernel_size=4"),
    (nn.AvgPool1d(2), (2, 3, 4, 4), r"AvgPool1d: expected 3-D input, got 4-D"),
    (nn.ConvTranspose2d(2, 3, 2, padding=1), (1, 2, 1, 1), r"ConvTranspose2d: input spatial size \(1, 1\) gives "
                                                           r"output size \(0, 0\)"),
    (nn.ConvTranspose2d(2, 3, 2), (1, 3, 4, 4), r"ConvTranspose2d: expected input.shape\[1\] == 2"),
    (nn.Upsample(scale_factor=0.2), (1, 1, 3, 3), r"Upsample: input spatial size \(3, 3\) with scale_factor=\(0.2, "
                                                  r"0.2\) gives output size \(0, 0\)"),
    (nn.Upsample(scale_factor=2), (1, 3, 3), r"Upsample: expected 4-D input, got 3-D"),
])
def test_input_errors(layer, shape, match):
    with pytest.raises(ValueError, match=match):
        layer.forward(np.zeros(shape, np.float32))


def test_upsample_nearest_by_hand():
    x = np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3)
    y = nn.Upsample(size=(3, 2))(x)  # rows floor(i * 2/3) = 0, 0, 1; columns floor(j * 3/2) = 0, 1
    np.testing.assert_array_equal(y[0, 0], [[0, 1], [0, 1], [3, 4]])
    yb = nn.Upsample(size=(3, 5), mode="bilinear", align_corners=True)(x)
    np.testing.assert_allclose(yb[0, 0], [[0, 0.5, 1, 1.5, 2], [1.5, 2, 2.5, 3, 3.5], [3, 3.5, 4, 4.5, 5]])


@pytest.mark.parametrize("layer,shape,out", [
    (nn.Conv1d(2, 3, 3), (0, 2, 5), (0, 3, 3)), (nn.ConvTranspose2d(2, 3, 3, stride=2), (0, 2, 3, 3), (0, 3, 7, 7)),
    (nn.Upsample(scale_factor=2, mode="bilinear"), (0, 2, 3, 3), (0, 2, 6, 6)), (nn.MaxPool1d(2), (0, 2, 4), (0, 2, 2))])
def test_empty_batch(layer, shape, out):
    y, cache = layer.forward(np.zeros(shape, np.float32))
    gp = np.full(layer.num_parameters(), np.nan, np.float32)
    assert y.shape == out and layer.backward(cache, y, gp).shape == shape
    np.testing.assert_array_equal(gp, 0)
