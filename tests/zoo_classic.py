"""PyTorch definitions of the classic CNNs of the model zoo, written after torchvision's (whose wheel is not usable
here): ResNet-18/34/50 (ImageNet layout), a CIFAR ResNet-20 (option B shortcuts), VGG-11 with BatchNorm and
SqueezeNet 1.1.

Module and parameter names are torchvision's (``layer1.0.downsample.1.running_var``, ``features.3.expand3x3.weight``),
so state_dict keys match sparkdl.models' builders.
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["BasicBlock", "Bottleneck", "ResNet", "resnet18", "resnet34", "resnet50", "resnet20", "VGG", "vgg11_bn",
           "Fire", "SqueezeNet", "squeezenet1_1"]


def _conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride, 1, bias=False)


def _downsample(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride=1):
        super().__init__()
        self.conv1, self.bn1 = _conv3x3(cin, planes, stride), nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=False)
        self.conv2, self.bn2 = _conv3x3(planes, planes), nn.BatchNorm2d(planes)
        self.downsample = _downsample(cin, planes, stride) if stride != 1 or cin != planes else None

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + (x if self.downsample is None else self.downsample(x)))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride=1):
        super().__init__()
        out = planes * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = _conv3x3(planes, planes, stride), nn.BatchNorm2d(planes)  # torchvision v1.5: stride here
        self.conv3, self.bn3 = nn.Conv2d(planes, out, 1, bias=False), nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=False)
        self.downsample = _downsample(cin, out, stride) if stride != 1 or cin != out else None

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    """torchvision's ``ResNet`` (ImageNet stem: 7x7/2 conv, 3x3/2 max pool) or, with ``cifar=True``, He et al.'s
    CIFAR network (3x3 stem, no pool, stages of ``widths``), both ending in global average pooling and ``fc``."""

    def __init__(self, block, layers, num_classes=1000, in_channels=3, widths=(64, 128, 256, 512), cifar=False):
        super().__init__()
        self.inplanes = widths[0]
        if cifar:
            self.conv1 = nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False)
        else:
            self.conv1 = nn.Conv2d(in_channels, widths[0], 7, 2, 3, bias=False)
        self.bn1, self.relu = nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=False)
        self.maxpool = nn.Identity() if cifar else nn.MaxPool2d(3, 2, 1)
        for i, (n, w) in enumerate(zip(layers, widths)):
            setattr(self, f"layer{i + 1}", self._stage(block, w, n, 1 if i == 0 else 2))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[len(layers) - 1] * block.expansion, num_classes)
        self.num_stages = len(layers)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _stage(self, block, planes, n, stride):
        blocks = []
        for i in range(n):
            blocks.append(block(self.inplanes, planes, stride if i == 0 else 1))
            self.inplanes = planes * block.expansion
        return nn.Sequential(*blocks)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(self.num_stages):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(num_classes=1000, in_channels=3):
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes, in_channels)


def resnet34(num_classes=1000, in_channels=3):
    return ResNet(BasicBlock, [3, 4, 6, 3], num_classes, in_channels)


def resnet50(num_classes=1000, in_channels=3):
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes, in_channels)


def resnet20(num_classes=10, in_channels=3):
    """CIFAR ResNet-20 with option-B shortcuts (1x1 convolution + BatchNorm where the shape changes)."""
    return ResNet(BasicBlock, [3, 3, 3], num_classes, in_channels, widths=(16, 32, 64), cifar=True)


class VGG(nn.Module):
    """torchvision's ``VGG``; ``hidden`` (4096) and ``pool_size`` (7) shrink the classifier for small inputs."""

    def __init__(self, cfg, num_classes=1000, in_channels=3, hidden=4096, pool_size=7, dropout=0.5):
        super().__init__()
        layers, c = [], in_channels
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=False)]
                c = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(pool_size)
        self.classifier = nn.Sequential(nn.Linear(c * pool_size * pool_size, hidden), nn.ReLU(False),
                                        nn.Dropout(dropout), nn.Linear(hidden, hidden), nn.ReLU(False),
                                        nn.Dropout(dropout), nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def vgg11_bn(num_classes=1000, in_channels=3, hidden=4096, pool_size=7, dropout=0.5):
    return VGG([64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"], num_classes, in_channels, hidden,
               pool_size, dropout)


class Fire(nn.Module):
    def __init__(self, cin, squeeze, e1, e3):
        super().__init__()
        self.squeeze, self.squeeze_activation = nn.Conv2d(cin, squeeze, 1), nn.ReLU(False)
        self.expand1x1, self.expand1x1_activation = nn.Conv2d(squeeze, e1, 1), nn.ReLU(False)
        self.expand3x3, self.expand3x3_activation = nn.Conv2d(squeeze, e3, 3, padding=1), nn.ReLU(False)

    def forward(self, x):
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)),
                          self.expand3x3_activation(self.expand3x3(x))], 1)


class SqueezeNet(nn.Module):
    """torchvision's ``squeezenet1_1``."""

    def __init__(self, num_classes=1000, in_channels=3, dropout=0.5):
        super().__init__()
        pool = (lambda: nn.MaxPool2d(3, 2, ceil_mode=True))
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 64, 3, 2), nn.ReLU(False), pool(), Fire(64, 16, 64, 64), Fire(128, 16, 64, 64),
            pool(), Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), pool(), Fire(256, 48, 192, 192),
            Fire(384, 48, 192, 192), Fire(384, 64, 256, 256), Fire(512, 64, 256, 256))
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Conv2d(512, num_classes, 1), nn.ReLU(False),
                                        nn.AdaptiveAvgPool2d(1))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


def squeezenet1_1(num_classes=1000, in_channels=3, dropout=0.5):
    return SqueezeNet(num_classes, in_channels, dropout)
