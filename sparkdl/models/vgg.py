"""VGG-11 with BatchNorm, torchvision's layout and state_dict names (``features.0.weight``, ``features.1.running_var``,
``classifier.6.bias``)."""
from __future__ import annotations

from sparkdl import nn
from sparkdl.models._blocks import chain, check_int, check_probability

__all__ = ["vgg11_bn"]

#: Configuration "A" of Simonyan & Zisserman: output channels of each 3x3 convolution, "M" a 2x2 max pool.
VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


def vgg11_bn(num_classes: int = 1000, in_channels: int = 3, hidden: int = 4096, pool_size: int = 7,
             dropout: float = 0.5) -> nn.Graph:
    """VGG-11 with BatchNorm: eight 3x3 convolutions (padding 1) each followed by BatchNorm2d and ReLU, five 2x2
    max pools, adaptive average pooling to ``pool_size`` x ``pool_size``, and the classifier Linear(hidden) -
    ReLU - Dropout - Linear(hidden) - ReLU - Dropout - Linear(num_classes).

    Parameters
    ----------
    num_classes : int, default 1000
    in_channels : int, default 3
    hidden : int, default 4096
        Width of the two hidden classifier layers (torchvision: 4096; smaller for small inputs).
    pool_size : int, default 7
        Output size of the adaptive average pooling (torchvision: 7; 1 for 32x32 inputs).
    dropout : float, default 0.5

    Shapes
    ------
    - input: (N, C_in, H, W) float32 images, any H, W >= 32
    - output: (N, num_classes) logits

    132,868,840 parameters with the defaults (torchvision's ``vgg11_bn``).

    Raises
    ------
    TypeError, ValueError
        A non-positive ``num_classes``, ``in_channels``, ``hidden`` or ``pool_size``; ``dropout`` outside [0, 1).

    References
    ----------
    Simonyan & Zisserman, 2015, "Very Deep Convolutional Networks for Large-Scale Image Recognition";
    Ioffe & Szegedy, 2015 (BatchNorm); ``torchvision.models.vgg11_bn``.
    """
    b = "vgg11_bn"
    num_classes, in_channels = check_int(b, "num_classes", num_classes), check_int(b, "in_channels", in_channels)
    hidden, pool_size = check_int(b, "hidden", hidden), check_int(b, "pool_size", pool_size)
    dropout = check_probability(b, "dropout", dropout)
    layers, c = [], in_channels
    for v in VGG11:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU()]
            c = v
    classifier = nn.Sequential(nn.Linear(c * pool_size * pool_size, hidden), nn.ReLU(), nn.Dropout(dropout),
                               nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, num_classes))
    return chain([("features", nn.Sequential(*layers)), ("avgpool", nn.AdaptiveAvgPool2d(pool_size)),
                  ("flatten", nn.Flatten()), ("classifier", classifier)])
