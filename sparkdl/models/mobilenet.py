"""Mobile CNNs: MobileNetV2 (inverted residuals, ReLU6) and MobileNetV3-small (Hardswish, squeeze-excitation),
with torchvision's module paths as node names (``features.1.conv.0.0.weight``, ``features.4.block.2.fc1.bias``).

A squeeze-excitation block multiplies the (N, C, H, W) activation by an (N, C, 1, 1) scale: a broadcasting
ONNX ``Mul`` (:class:`~sparkdl.nn.OnnxOp`), which exports and imports as itself.
"""
from __future__ import annotations

from sparkdl import nn
from sparkdl.models._blocks import chain, check_int, check_probability, conv_bn

__all__ = ["mobilenet_v2", "mobilenet_v3_small", "make_divisible"]

#: MobileNetV2 blocks: expansion t, channels c, repeats n, first stride s (torchvision's default setting).
V2_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
              (6, 320, 1, 1))
#: MobileNetV3-small blocks: in, kernel, expanded, out, squeeze-excitation, activation (HS/RE), stride.
V3_SMALL_SETTING = ((16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
                    (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
                    (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1), (48, 5, 288, 96, True, "HS", 2),
                    (96, 5, 576, 96, True, "HS", 1), (96, 5, 576, 96, True, "HS", 1))
_V3_BN = {"eps": 1e-3, "momentum": 0.01}


def make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's ``_make_divisible``: ``v`` rounded to a multiple of ``divisor``, never below 90% of ``v``."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _residual(name: str, body: nn.Module, residual: bool) -> nn.Graph:
    nodes = [(name, body, "x")]
    if residual:
        nodes.append(("add", nn.Add(), [name, "x"]))
    return nn.Graph("x", nodes, nodes[-1][0])


def _inverted_residual(cin: int, cout: int, stride: int, t: int) -> nn.Graph:
    hidden = int(round(cin * t))
    layers = [conv_bn(cin, hidden, 1, activation=nn.ReLU6)] if t != 1 else []
    layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden, activation=nn.ReLU6),
               nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
    return _residual("conv", nn.Sequential(*layers), stride == 1 and cin == cout)


def _check_common(builder, num_classes, dropout, in_channels):
    return (check_int(builder, "num_classes", num_classes), check_probability(builder, "dropout", dropout),
            check_int(builder, "in_channels", in_channels))


def mobilenet_v2(num_classes: int = 1000, width_mult: float = 1.0, dropout: float = 0.2, in_channels: int = 3,
                 setting=None) -> nn.Graph:
    """MobileNetV2: a 3x3/2 stem, inverted residual blocks (1x1 expansion, 3x3 depthwise, linear 1x1
    projection, ReLU6), a 1x1 convolution to 1280 channels, global average pooling, dropout, ``classifier.1``.

    Parameters
    ----------
    num_classes : int, default 1000
    width_mult : float, default 1.0
        Channel multiplier (channels rounded to multiples of 8).
    dropout : float, default 0.2
    in_channels : int, default 3
    setting : sequence of (t, c, n, s), optional
        The block table (torchvision's ``inverted_residual_setting``); default :data:`V2_SETTING`.

    Shapes
    ------
    - input: (N, C_in, H, W) float32 images, any H, W >= 32
    - output: (N, num_classes) logits

    3,504,872 parameters with the defaults (torchvision's ``mobilenet_v2``).

    Raises
    ------
    TypeError, ValueError
        Non-positive ``num_classes``/``in_channels``/``width_mult``, ``dropout`` outside [0, 1).

    References
    ----------
    Sandler et al., 2018, "MobileNetV2: Inverted Residuals and Linear Bottlenecks";
    ``torchvision.models.mobilenet_v2``.
    """
    num_classes, dropout, in_channels = _check_common("mobilenet_v2", num_classes, dropout, in_channels)
    if isinstance(width_mult, bool) or not isinstance(width_mult, (int, float)) or not width_mult > 0:
        raise ValueError(f"mobilenet_v2: width_mult must be a positive number, got {width_mult!r}")
    cin = make_divisible(32 * width_mult)
    last = make_divisible(1280 * max(1.0, width_mult))
    features = [conv_bn(in_channels, cin, 3, 2, activation=nn.ReLU6)]
    for t, c, n, s in setting or V2_SETTING:
        cout = make_divisible(c * width_mult)
        for i in range(n):
            features.append(_inverted_residual(cin, cout, s if i == 0 else 1, t))
            cin = cout
    features.append(conv_bn(cin, last, 1, activation=nn.ReLU6))
    return chain([("features", nn.Sequential(*features)), ("avgpool", nn.AdaptiveAvgPool2d(1)),
                  ("flatten", nn.Flatten()),
                  ("classifier", nn.Sequential(nn.Dropout(dropout), nn.Linear(last, num_classes)))])


def _squeeze_excitation(channels: int) -> nn.Graph:
    """torchvision's ``SqueezeExcitation`` (ReLU, Hardsigmoid): ``x * hsig(fc2(relu(fc1(avgpool(x)))))``."""
    squeeze = make_divisible(channels // 4)
    return nn.Graph("x", [("avgpool", nn.AdaptiveAvgPool2d(1), "x"), ("fc1", nn.Conv2d(channels, squeeze, 1), "avgpool"),
                          ("activation", nn.ReLU(), "fc1"), ("fc2", nn.Conv2d(squeeze, channels, 1), "activation"),
                          ("scale_activation", nn.Hardsigmoid(), "fc2"),
                          ("mul", nn.OnnxOp("Mul", inputs=("x", "x")), ["scale_activation", "x"])], "mul")


def _inverted_residual_v3(cin, k, exp, cout, use_se, act, stride) -> nn.Graph:
    act = nn.Hardswish if act == "HS" else nn.ReLU
    layers = [conv_bn(cin, exp, 1, activation=act, **_V3_BN)] if exp != cin else []
    layers.append(conv_bn(exp, exp, k, stride, groups=exp, activation=act, **_V3_BN))
    if use_se:
        layers.append(_squeeze_excitation(exp))
    layers.append(conv_bn(exp, cout, 1, **_V3_BN))
    return _residual("block", nn.Sequential(*layers), stride == 1 and cin == cout)


def mobilenet_v3_small(num_classes: int = 1000, dropout: float = 0.2, in_channels: int = 3, setting=None) -> nn.Graph:
    """MobileNetV3-small: a 3x3/2 Hardswish stem, eleven inverted residual blocks (some with squeeze-excitation
    and Hardsigmoid gating), a 1x1 convolution to 576 channels, global average pooling, ``classifier``
    (Linear 1024, Hardswish, dropout, Linear). BatchNorm eps 0.001 and momentum 0.01 throughout, as torchvision's.

    Parameters
    ----------
    num_classes : int, default 1000
    dropout : float, default 0.2
    in_channels : int, default 3
    setting : sequence of (in, kernel, expanded, out, se, 'HS'|'RE', stride), optional
        The block table; default :data:`V3_SMALL_SETTING`. The last convolution widens to 6x the last
        block's channels.

    Shapes
    ------
    - input: (N, C_in, H, W) float32 images, any H, W >= 32
    - output: (N, num_classes) logits

    2,542,856 parameters with the defaults (torchvision's ``mobilenet_v3_small``).

    Raises
    ------
    TypeError, ValueError
        Non-positive ``num_classes``/``in_channels``, ``dropout`` outside [0, 1).

    References
    ----------
    Howard et al., 2019, "Searching for MobileNetV3"; ``torchvision.models.mobilenet_v3_small``.
    """
    num_classes, dropout, in_channels = _check_common("mobilenet_v3_small", num_classes, dropout, in_channels)
    features = [conv_bn(in_channels, 16, 3, 2, activation=nn.Hardswish, **_V3_BN)]
    for row in setting or V3_SMALL_SETTING:
        features.append(_inverted_residual_v3(*row))
    cout = (setting or V3_SMALL_SETTING)[-1][3]
    features.append(conv_bn(cout, 6 * cout, 1, activation=nn.Hardswish, **_V3_BN))
    head = nn.Sequential(nn.Linear(6 * cout, 1024), nn.Hardswish(), nn.Dropout(dropout), nn.Linear(1024, num_classes))
    return chain([("features", nn.Sequential(*features)), ("avgpool", nn.AdaptiveAvgPool2d(1)),
                  ("flatten", nn.Flatten()), ("classifier", head)])
