"""Registry cases for Conv2d: each configuration is checked for shape, float64 gradients and PyTorch parity."""
import torch

from sparkdl import nn
from tests.cases import LayerCase


def _case(id, args, input_shape, out_shape, **kw):
    return LayerCase(id, lambda: nn.Conv2d(**args), input_shape, out_shape, lambda: torch.nn.Conv2d(**args), **kw)


CASES = [
    _case("conv-3x3", dict(in_channels=2, out_channels=3, kernel_size=3), (2, 2, 5, 5), (2, 3, 3, 3)),
    _case("conv-batch1-odd-pad1", dict(in_channels=3, out_channels=4, kernel_size=3, padding=1),
          (1, 3, 5, 7), (1, 4, 5, 7)),
    _case("conv-stride2-pad1", dict(in_channels=2, out_channels=3, kernel_size=3, stride=2, padding=1),
          (2, 2, 7, 6), (2, 3, 4, 3)),
    _case("conv-dilation2", dict(in_channels=2, out_channels=2, kernel_size=3, dilation=2, padding=2),
          (2, 2, 6, 5), (2, 2, 6, 5)),
    _case("conv-groups2", dict(in_channels=4, out_channels=6, kernel_size=3, padding=1, groups=2),
          (2, 4, 4, 4), (2, 6, 4, 4)),
    _case("conv-depthwise-x2", dict(in_channels=3, out_channels=6, kernel_size=3, groups=3),
          (2, 3, 5, 5), (2, 6, 3, 3)),
    _case("conv-depthwise-nobias", dict(in_channels=3, out_channels=3, kernel_size=3, padding=1, groups=3,
                                        bias=False), (1, 3, 4, 5), (1, 3, 4, 5)),
    _case("conv-rect-nobias", dict(in_channels=2, out_channels=3, kernel_size=(2, 3), stride=(1, 2),
                                   padding=(0, 1), bias=False), (2, 2, 5, 6), (2, 3, 4, 3)),
    _case("conv-1x1", dict(in_channels=3, out_channels=2, kernel_size=1), (2, 3, 4, 3), (2, 2, 4, 3)),
    _case("conv-5x5-pad2-1ch", dict(in_channels=1, out_channels=2, kernel_size=5, padding=2),
          (2, 1, 6, 7), (2, 2, 6, 7)),
    # >= 8 input channels, 3x3, stride 1: the Winograd F(2x2, 3x3) path (odd sizes leave partial tiles)
    _case("conv-winograd-pad1", dict(in_channels=8, out_channels=4, kernel_size=3, padding=1),
          (2, 8, 5, 6), (2, 4, 5, 6)),
    _case("conv-winograd-odd-pad0", dict(in_channels=8, out_channels=3, kernel_size=3), (1, 8, 7, 4), (1, 3, 5, 2)),
    _case("conv-winograd-pad2-nobias", dict(in_channels=8, out_channels=2, kernel_size=3, padding=2, bias=False),
          (1, 8, 3, 5), (1, 2, 5, 7)),
    # pad 0 on a narrow input: the exact (non-wide) stride-1 column layout
    _case("conv-5x5-narrow", dict(in_channels=1, out_channels=2, kernel_size=5), (1, 1, 7, 9), (1, 2, 3, 5)),
    _case("conv-stride2-dilation2-groups2", dict(in_channels=2, out_channels=4, kernel_size=(3, 2), stride=2,
                                                 padding=(2, 1), dilation=2, groups=2),
          (2, 2, 7, 6), (2, 4, 4, 3)),
]
