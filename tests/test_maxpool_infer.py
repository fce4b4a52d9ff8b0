"""MaxPool2d.infer (value-only kernel, no argmax indices) equals forward's output bit for bit, and PyTorch's."""
import numpy as np
import pytest

from sparkdl import nn


@pytest.mark.parametrize("kernel,stride,padding,ceil_mode,size", [
    (3, 2, 1, False, (112, 112)),   # ResNet's stem
    (3, 2, 0, True, (13, 13)),      # SqueezeNet, ceil_mode overhang
    (3, 1, 1, False, (7, 9)),
    ((2, 3), (1, 2), (1, 0), True, (6, 11)),
    (2, 2, 0, False, (8, 8)),       # the disjoint 2x2 path
    (5, 3, 2, True, (10, 17)),
    (3, 2, 0, True, (111, 111)),    # SqueezeNet's first pool: long interior rows
    (4, 2, 1, False, (3, 9)),       # windows taller than the plane, clipped at both ends
], ids=["stem", "ceil", "stride1", "rect", "2x2", "wide", "long", "tall_window"])
def test_infer_equals_forward_and_torch(kernel, stride, padding, ceil_mode, size):
    torch = pytest.importorskip("torch")
    layer = nn.MaxPool2d(kernel, stride=stride, padding=padding, ceil_mode=ceil_mode)
    x = np.random.default_rng(0).standard_normal((2, 3, *size)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    x[1, 0] = np.round(x[1, 0])  # ties, and zeros of both signs (the first of equal maxima wins)
    y = layer.infer(x)
    np.testing.assert_array_equal(y.view(np.uint32), layer.forward(x)[0].view(np.uint32))
    ref = torch.nn.functional.max_pool2d(torch.from_numpy(x), kernel, stride, padding, ceil_mode=ceil_mode).numpy()
    np.testing.assert_array_equal(y, ref)
    assert np.isnan(y[0, 1]).any()
