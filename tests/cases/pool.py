"""Registry cases for MaxPool2d, AvgPool2d and AdaptiveAvgPool2d."""
import torch

from sparkdl import nn
from tests.cases import LayerCase


def _case(id, name, args, input_shape, out_shape):
    return LayerCase(id, lambda: getattr(nn, name)(**args), input_shape, out_shape,
                     lambda: getattr(torch.nn, name)(**args))


CASES = [
    _case("maxpool-2", "MaxPool2d", dict(kernel_size=2), (2, 3, 6, 6), (2, 3, 3, 3)),
    _case("maxpool-2-odd-size", "MaxPool2d", dict(kernel_size=2), (1, 2, 5, 7), (1, 2, 2, 3)),
    _case("maxpool-3-s2-p1-odd", "MaxPool2d", dict(kernel_size=3, stride=2, padding=1), (1, 2, 7, 5), (1, 2, 4, 3)),
    _case("maxpool-ceil", "MaxPool2d", dict(kernel_size=2, ceil_mode=True), (2, 2, 5, 5), (2, 2, 3, 3)),
    _case("maxpool-rect-overlap", "MaxPool2d", dict(kernel_size=(2, 3), stride=(1, 2)), (2, 2, 5, 7), (2, 2, 4, 3)),
    _case("avgpool-2", "AvgPool2d", dict(kernel_size=2), (2, 3, 6, 6), (2, 3, 3, 3)),
    _case("avgpool-3-s2-p1", "AvgPool2d", dict(kernel_size=3, stride=2, padding=1), (1, 2, 7, 5), (1, 2, 4, 3)),
    _case("avgpool-exclude-pad", "AvgPool2d", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
          (1, 2, 7, 5), (1, 2, 4, 3)),
    _case("avgpool-ceil-pad", "AvgPool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
          (2, 1, 6, 6), (2, 1, 4, 4)),
    _case("avgpool-rect", "AvgPool2d", dict(kernel_size=(3, 2), stride=(2, 1)), (1, 2, 7, 4), (1, 2, 3, 3)),
    _case("adaptive-global", "AdaptiveAvgPool2d", dict(output_size=1), (2, 3, 5, 5), (2, 3, 1, 1)),
    _case("adaptive-3x2-odd", "AdaptiveAvgPool2d", dict(output_size=(3, 2)), (2, 2, 7, 5), (2, 2, 3, 2)),
    _case("adaptive-none", "AdaptiveAvgPool2d", dict(output_size=(None, 2)), (1, 2, 4, 5), (1, 2, 4, 2)),
    _case("adaptive-larger-than-input", "AdaptiveAvgPool2d", dict(output_size=4), (1, 1, 3, 3), (1, 1, 4, 4)),
]
