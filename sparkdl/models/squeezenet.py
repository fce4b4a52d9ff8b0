"""SqueezeNet 1.1: Fire modules (1x1 squeeze, then 1x1 and 3x3 expands joined along channels), torchvision's
state_dict names (``features.3.squeeze.weight``, ``features.3.expand3x3.bias``, ``classifier.1.weight``)."""
from __future__ import annotations

from sparkdl import nn
from sparkdl.models._blocks import chain, check_int, check_probability

__all__ = ["squeezenet1_1"]


def _fire(cin: int, squeeze: int, e1: int, e3: int) -> nn.Graph:
    """``cat([relu(expand1x1(s)), relu(expand3x3(s))], 1)`` with ``s = relu(squeeze(x))``."""
    return nn.Graph("x", [
        ("squeeze", nn.Conv2d(cin, squeeze, 1), "x"), ("squeeze_activation", nn.ReLU(), "squeeze"),
        ("expand1x1", nn.Conv2d(squeeze, e1, 1), "squeeze_activation"),
        ("expand1x1_activation", nn.ReLU(), "expand1x1"),
        ("expand3x3", nn.Conv2d(squeeze, e3, 3, padding=1), "squeeze_activation"),
        ("expand3x3_activation", nn.ReLU(), "expand3x3"),
        ("cat", nn.Concatenate(dim=1), ["expand1x1_activation", "expand3x3_activation"])], "cat")


def squeezenet1_1(num_classes: int = 1000, in_channels: int = 3, dropout: float = 0.5) -> nn.Graph:
    """SqueezeNet 1.1: a 3x3/2 convolution, eight Fire modules between three 3x3/2 max pools (``ceil_mode``), and
    a convolutional classifier (dropout, 1x1 convolution to ``num_classes``, ReLU, global average pooling).

    Parameters
    ----------
    num_classes : int, default 1000
    in_channels : int, default 3
    dropout : float, default 0.5

    Shapes
    ------
    - input: (N, C_in, H, W) float32 images, any H, W >= 17
    - output: (N, num_classes) (non-negative: the classifier ends in ReLU, as torchvision's)

    1,235,496 parameters with the defaults (torchvision's ``squeezenet1_1``).

    Raises
    ------
    TypeError, ValueError
        A non-positive ``num_classes`` or ``in_channels``; ``dropout`` outside [0, 1).

    References
    ----------
    Iandola et al., 2016, "SqueezeNet: AlexNet-level accuracy with 50x fewer parameters and <0.5MB model size";
    ``torchvision.models.squeezenet1_1``.
    """
    b = "squeezenet1_1"
    num_classes, in_channels = check_int(b, "num_classes", num_classes), check_int(b, "in_channels", in_channels)
    dropout = check_probability(b, "dropout", dropout)

    def pool():
        return nn.MaxPool2d(3, 2, ceil_mode=True)

    features = nn.Sequential(
        nn.Conv2d(in_channels, 64, 3, 2), nn.ReLU(), pool(), _fire(64, 16, 64, 64), _fire(128, 16, 64, 64), pool(),
        _fire(128, 32, 128, 128), _fire(256, 32, 128, 128), pool(), _fire(256, 48, 192, 192),
        _fire(384, 48, 192, 192), _fire(384, 64, 256, 256), _fire(512, 64, 256, 256))
    classifier = nn.Sequential(nn.Dropout(dropout), nn.Conv2d(512, num_classes, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
    return chain([("features", features), ("classifier", classifier), ("flatten", nn.Flatten())])
