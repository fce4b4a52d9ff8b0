"""PyTorch definitions of the model zoo, for tests and bench/zoo.py (torchvision's wheel is not usable here).

PLACEHOLDER with three models (ResNet-18 in torchvision's layout, a CIFAR ResNet-20, MobileNetV2 from
tests/zoo_cnn.py) so that bench/zoo.py can be developed; the full zoo replaces this file.

``TORCH_ZOO[name]()`` builds the network (seeded by the caller); ``SHAPES[name]`` describes its input, as
bench/zoo.py reads it:

* ``input``: ``"image"`` (one float32 (N, C, H, W) input), ``"tokens"`` (int64 (N, T) ids in ``[0, vocab)``,
  plus an int64 (N, T) 1/0 padding mask when ``mask`` is true) or ``"ids"`` (one int64 (N,) input per entry of
  ``cardinalities``, ids in ``[0, cardinality)``);
* images: ``channels`` and ``size`` (the resolution the network is made for: 224 ImageNet, 32 CIFAR);
* tokens: ``vocab``, ``seq`` (T), ``mask``; ids: ``cardinalities``.
"""
from __future__ import annotations

import torch
from torch import nn

from tests.zoo_cnn import MobileNetV2

__all__ = ["TORCH_ZOO", "SHAPES", "ResNet", "BasicBlock", "resnet18", "resnet20", "mobilenet_v2"]


class BasicBlock(nn.Module):
    """torchvision's ``BasicBlock``: two 3x3 conv-BN, ReLU, projection shortcut ``downsample`` when shapes
    change."""

    expansion = 1

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class ResNet(nn.Module):
    """ResNet with basic blocks: torchvision's ImageNet layout (7x7 stride-2 stem and max pooling, widths 64..512)
    or, with ``cifar=True``, the CIFAR layout of He et al. (3x3 stem, widths 16/32/64, no pooling)."""

    def __init__(self, blocks, num_classes=1000, cifar=False):
        super().__init__()
        widths = (16, 32, 64) if cifar else (64, 128, 256, 512)
        self.inplanes = widths[0]
        if cifar:
            self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        else:
            self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.Identity() if cifar else nn.MaxPool2d(3, 2, 1)
        for i, (w, n) in enumerate(zip(widths, blocks)):
            setattr(self, f"layer{i + 1}", self._layer(w, n, 1 if i == 0 else 2))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[-1], num_classes)
        self.depth = len(widths)

    def _layer(self, width, n, stride):
        layers = [BasicBlock(self.inplanes, width, stride)] + [BasicBlock(width, width) for _ in range(n - 1)]
        self.inplanes = width
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(self.depth):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(num_classes=1000):
    return ResNet([2, 2, 2, 2], num_classes)


def resnet20(num_classes=10):
    return ResNet([3, 3, 3], num_classes, cifar=True)


def mobilenet_v2(num_classes=1000):
    return MobileNetV2(num_classes)


TORCH_ZOO = {"resnet18": resnet18, "resnet20": resnet20, "mobilenet_v2": mobilenet_v2}

_IMAGENET = {"input": "image", "channels": 3, "size": 224}
SHAPES = {"resnet18": _IMAGENET, "resnet20": {"input": "image", "channels": 3, "size": 32},
          "mobilenet_v2": _IMAGENET}
