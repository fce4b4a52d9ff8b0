"""Registry cases: Conv1d, MaxPool1d, AvgPool1d, ConvTranspose2d and Upsample."""
import torch

from sparkdl import nn
from tests.cases import LayerCase


def _case(id, name, args, input_shape, out_shape, **kw):
    return LayerCase(id, lambda: getattr(nn, name)(**args), input_shape, out_shape,
                     lambda: getattr(torch.nn, name)(**args), **kw)


def _conv1d(id, args, input_shape, out_shape):
    return _case(id, "Conv1d", args, input_shape, out_shape)


def _convt(id, args, input_shape, out_shape):
    return _case(id, "ConvTranspose2d", args, input_shape, out_shape)


CASES = [
    _conv1d("conv1d-3", dict(in_channels=2, out_channels=3, kernel_size=3), (2, 2, 7), (2, 3, 5)),
    _conv1d("conv1d-pad-stride", dict(in_channels=3, out_channels=4, kernel_size=3, stride=2, padding=1),
            (2, 3, 8), (2, 4, 4)),
    _conv1d("conv1d-dilation-groups", dict(in_channels=4, out_channels=6, kernel_size=2, dilation=3, groups=2,
                                           padding=2), (1, 4, 9), (1, 6, 10)),
    _conv1d("conv1d-depthwise-nobias", dict(in_channels=3, out_channels=3, kernel_size=5, padding=2, groups=3,
                                            bias=False), (2, 3, 6), (2, 3, 6)),
    _conv1d("conv1d-tuple-args", dict(in_channels=2, out_channels=2, kernel_size=(4,), stride=(3,)),
            (3, 2, 11), (3, 2, 3)),
    _case("maxpool1d-2", "MaxPool1d", dict(kernel_size=2), (2, 3, 7), (2, 3, 3)),
    _case("maxpool1d-3-s2-p1-ceil", "MaxPool1d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
          (2, 2, 8), (2, 2, 5)),
    _case("maxpool1d-overlap", "MaxPool1d", dict(kernel_size=3, stride=1), (1, 2, 6), (1, 2, 4)),
    _case("avgpool1d-2", "AvgPool1d", dict(kernel_size=2), (2, 3, 6), (2, 3, 3)),
    _case("avgpool1d-pad-exclude", "AvgPool1d", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
          (2, 2, 7), (2, 2, 4)),
    _case("avgpool1d-ceil-include-pad", "AvgPool1d", dict(kernel_size=4, stride=3, padding=2, ceil_mode=True),
          (1, 2, 9), (1, 2, 4)),
    _convt("convt-3", dict(in_channels=2, out_channels=3, kernel_size=3), (2, 2, 4, 3), (2, 3, 6, 5)),
    _convt("convt-stride2-pad1-outpad1", dict(in_channels=3, out_channels=2, kernel_size=3, stride=2, padding=1,
                                              output_padding=1), (2, 3, 3, 4), (2, 2, 6, 8)),
    _convt("convt-groups-dilation", dict(in_channels=4, out_channels=6, kernel_size=(2, 3), groups=2, dilation=2,
                                         padding=(1, 0)), (1, 4, 4, 3), (1, 6, 4, 7)),
    _convt("convt-stride-rect-nobias", dict(in_channels=2, out_channels=2, kernel_size=(3, 2), stride=(2, 3),
                                            bias=False), (2, 2, 3, 3), (2, 2, 7, 8)),
    # output_padding 1 >= stride 1 is allowed because dilation 2 > 1 (PyTorch's rule)
    _convt("convt-outpad-by-dilation", dict(in_channels=2, out_channels=3, kernel_size=2, dilation=2,
                                            output_padding=1), (1, 2, 3, 3), (1, 3, 6, 6)),
    _convt("convt-4x4-s2-p1", dict(in_channels=3, out_channels=2, kernel_size=4, stride=2, padding=1),
           (2, 3, 5, 4), (2, 2, 10, 8)),
    _case("upsample-nearest-x2", "Upsample", dict(scale_factor=2), (2, 3, 3, 4), (2, 3, 6, 8)),
    _case("upsample-nearest-size", "Upsample", dict(size=(5, 7)), (1, 2, 3, 4), (1, 2, 5, 7)),
    _case("upsample-nearest-frac", "Upsample", dict(scale_factor=(1.5, 2.7)), (1, 2, 4, 3), (1, 2, 6, 8)),
    _case("upsample-bilinear-x2", "Upsample", dict(scale_factor=2, mode="bilinear"), (2, 2, 3, 4), (2, 2, 6, 8)),
    _case("upsample-bilinear-size-corners", "Upsample", dict(size=(5, 7), mode="bilinear", align_corners=True),
          (1, 2, 3, 4), (1, 2, 5, 7)),
    _case("upsample-bilinear-frac", "Upsample", dict(scale_factor=(1.7, 2.5), mode="bilinear", align_corners=False),
          (1, 2, 4, 3), (1, 2, 6, 7)),
    _case("upsample-bilinear-down-to-1", "Upsample", dict(size=(1, 3), mode="bilinear", align_corners=True),
          (1, 1, 4, 5), (1, 1, 1, 3)),
]
