"""PyTorch definitions of the mobile CNNs of the model zoo, written after torchvision's (whose wheel is not
usable here): MobileNetV2 (inverted residuals, ReLU6), MobileNetV3-small (Hardswish, squeeze-excitation with
Hardsigmoid) and an EfficientNet-style MBConv block (SiLU, squeeze-excitation with Sigmoid).

Module and parameter names are torchvision's (``features.1.conv.0.0.weight``), so state_dict keys match.
"""
from __future__ import annotations

from functools import partial

import torch
from torch import nn

__all__ = ["MobileNetV2", "MobileNetV3Small", "SqueezeExcitation", "MBConv", "make_divisible", "randomize_bn"]


def make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    """torchvision's ``_make_divisible``: round channels to a multiple of ``divisor``, never below 90%."""
    min_value = divisor if min_value is None else min_value
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class ConvNormActivation(nn.Sequential):
    """Conv2d (no bias) - BatchNorm2d - activation, ``padding = (k - 1) // 2``."""

    def __init__(self, cin, cout, kernel_size=3, stride=1, groups=1, activation=nn.ReLU6, norm=nn.BatchNorm2d):
        layers = [nn.Conv2d(cin, cout, kernel_size, stride, (kernel_size - 1) // 2, groups=groups, bias=False),
                  norm(cout)]
        if activation is not None:
            layers.append(activation())
        super().__init__(*layers)


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expansion (unless t == 1), 3x3 depthwise, linear 1x1 projection, residual add."""

    def __init__(self, inp, oup, stride, expand_ratio):
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = [ConvNormActivation(inp, hidden, kernel_size=1)] if expand_ratio != 1 else []
        layers += [ConvNormActivation(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's ``mobilenet_v2`` (width 1.0 by default, dropout 0.2, its weight initialisation);
    ``setting`` replaces the table of blocks (torchvision's ``inverted_residual_setting``)."""

    SETTING = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
               [6, 320, 1, 1]]  # t (expansion), c (channels), n (blocks), s (first stride)

    def __init__(self, num_classes=1000, width_mult=1.0, dropout=0.2, setting=None, in_channels=3):
        super().__init__()
        cin = make_divisible(32 * width_mult)
        self.last_channel = make_divisible(1280 * max(1.0, width_mult))
        features = [ConvNormActivation(in_channels, cin, stride=2)]
        for t, c, n, s in setting or self.SETTING:
            cout = make_divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(ConvNormActivation(cin, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(self.last_channel, num_classes))
        _init(self)

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class SqueezeExcitation(nn.Module):
    """torchvision's ``SqueezeExcitation``: ``x * scale_activation(fc2(activation(fc1(avgpool(x)))))``, the
    fully connected layers as 1x1 convolutions on (N, C, 1, 1): a broadcasting Mul of two activations."""

    def __init__(self, channels, squeeze, activation=nn.ReLU, scale_activation=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)
        self.activation, self.scale_activation = activation(), scale_activation()

    def forward(self, x):
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


#: MobileNetV3's BatchNorm (torchvision: eps 0.001, momentum 0.01 in every block).
V3_NORM = partial(nn.BatchNorm2d, eps=1e-3, momentum=0.01)


class InvertedResidualV3(nn.Module):
    """MobileNetV3 block: expansion, depthwise k x k, optional squeeze-excitation (Hardsigmoid), projection."""

    def __init__(self, cin, k, exp, cout, use_se, act, stride):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        layers = [ConvNormActivation(cin, exp, 1, activation=act, norm=V3_NORM)] if exp != cin else []
        layers.append(ConvNormActivation(exp, exp, k, stride, groups=exp, activation=act, norm=V3_NORM))
        if use_se:
            layers.append(SqueezeExcitation(exp, make_divisible(exp // 4), scale_activation=nn.Hardsigmoid))
        layers.append(ConvNormActivation(exp, cout, 1, activation=None, norm=V3_NORM))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res_connect else y


class MobileNetV3Small(nn.Module):
    """torchvision's ``mobilenet_v3_small`` (width 1.0, BatchNorm eps 1e-3 and momentum 0.01, dropout 0.2); ``setting`` replaces
    the table of blocks (the last convolution widens to 6x the last block's channels, 576 in the full net)."""

    # input channels, kernel, expanded channels, output channels, SE, activation (HS: Hardswish), stride
    SETTING = [(16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
               (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
               (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1), (48, 5, 288, 96, True, "HS", 2),
               (96, 5, 576, 96, True, "HS", 1), (96, 5, 576, 96, True, "HS", 1)]

    def __init__(self, num_classes=1000, dropout=0.2, setting=None, in_channels=3):
        super().__init__()
        features = [ConvNormActivation(in_channels, 16, 3, 2, activation=nn.Hardswish, norm=V3_NORM)]
        for cin, k, exp, cout, se, act, s in setting or self.SETTING:
            features.append(InvertedResidualV3(cin, k, exp, cout, se, nn.Hardswish if act == "HS" else nn.ReLU, s))
        last = 6 * cout  # 576 for the full table
        features.append(ConvNormActivation(cout, last, 1, activation=nn.Hardswish, norm=V3_NORM))
        self.features = nn.Sequential(*features)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(last, 1024), nn.Hardswish(), nn.Dropout(dropout),
                                        nn.Linear(1024, num_classes))
        _init(self)

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class MBConv(nn.Module):
    """EfficientNet's MBConv block (SiLU, squeeze-excitation with SiLU/Sigmoid, residual), stochastic depth
    omitted (identity in eval)."""

    def __init__(self, cin, cout, expand=4, kernel=3, stride=1):
        super().__init__()
        exp = cin * expand
        silu = partial(nn.SiLU)
        self.use_res_connect = stride == 1 and cin == cout
        self.block = nn.Sequential(ConvNormActivation(cin, exp, 1, activation=silu),
                                   ConvNormActivation(exp, exp, kernel, stride, groups=exp, activation=silu),
                                   SqueezeExcitation(exp, max(1, cin // 4), activation=silu),
                                   ConvNormActivation(exp, cout, 1, activation=None))

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res_connect else y


def _init(model):
    """torchvision's initialisation of the MobileNets."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)


def randomize_bn(model, seed=0):
    """Non-trivial BatchNorm affine parameters and running statistics (a wrong mapping then shows)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.normal_(0, 0.2, generator=g)
                m.running_mean.normal_(0, 0.2, generator=g)
                m.running_var.uniform_(0.5, 2.0, generator=g)
    return model
