"""Residual networks: ResNet-18/34/50 in torchvision's ImageNet layout and a CIFAR ResNet-20.

Every network is a :class:`~sparkdl.nn.Graph` whose node names are torchvision's attribute paths, so the parameter
and buffer names equal ``torchvision.models.resnet*().state_dict()`` keys (``conv1.weight``,
``layer1.0.bn1.running_mean``, ``layer2.0.downsample.0.weight``, ``fc.bias``).
"""
from __future__ import annotations

from sparkdl import nn
from sparkdl.models._blocks import chain, check_int

__all__ = ["resnet18", "resnet34", "resnet50", "resnet20"]


def _downsample(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


def _block(cin: int, planes: int, stride: int, bottleneck: bool) -> tuple[nn.Graph, int]:
    """A BasicBlock (two 3x3) or Bottleneck (1x1, 3x3 with the stride, 1x1 to 4x planes), torchvision's names."""
    cout = planes * (4 if bottleneck else 1)
    if bottleneck:
        body = [("conv1", nn.Conv2d(cin, planes, 1, bias=False)), ("bn1", nn.BatchNorm2d(planes)),
                ("relu1", nn.ReLU()), ("conv2", nn.Conv2d(planes, planes, 3, stride, 1, bias=False)),
                ("bn2", nn.BatchNorm2d(planes)), ("relu2", nn.ReLU()),
                ("conv3", nn.Conv2d(planes, cout, 1, bias=False)), ("bn3", nn.BatchNorm2d(cout))]
    else:
        body = [("conv1", nn.Conv2d(cin, planes, 3, stride, 1, bias=False)), ("bn1", nn.BatchNorm2d(planes)),
                ("relu1", nn.ReLU()), ("conv2", nn.Conv2d(planes, planes, 3, 1, 1, bias=False)),
                ("bn2", nn.BatchNorm2d(planes))]
    nodes = [(name, module, prev) for (name, module), prev in zip(body, ["x"] + [n for n, _ in body])]
    skip = "x"
    if stride != 1 or cin != cout:
        nodes.append(("downsample", _downsample(cin, cout, stride), "x"))
        skip = "downsample"
    nodes += [("add", nn.Add(), [body[-1][0], skip]), ("relu", nn.ReLU(), "add")]
    return nn.Graph("x", nodes, "relu"), cout


def _resnet(builder, blocks, widths, bottleneck, num_classes, in_channels, cifar) -> nn.Graph:
    num_classes = check_int(builder, "num_classes", num_classes)
    in_channels = check_int(builder, "in_channels", in_channels)
    c = widths[0]
    if cifar:
        stem = [("conv1", nn.Conv2d(in_channels, c, 3, 1, 1, bias=False)), ("bn1", nn.BatchNorm2d(c)),
                ("relu", nn.ReLU())]
    else:
        stem = [("conv1", nn.Conv2d(in_channels, c, 7, 2, 3, bias=False)), ("bn1", nn.BatchNorm2d(c)),
                ("relu", nn.ReLU()), ("maxpool", nn.MaxPool2d(3, 2, 1))]
    stages = []
    for i, (n, planes) in enumerate(zip(blocks, widths)):
        layer = []
        for j in range(n):
            block, c = _block(c, planes, (1 if i == 0 else 2) if j == 0 else 1, bottleneck)
            layer.append(block)
        stages.append((f"layer{i + 1}", nn.Sequential(*layer)))
    head = [("avgpool", nn.AdaptiveAvgPool2d(1)), ("flatten", nn.Flatten()), ("fc", nn.Linear(c, num_classes))]
    return chain(stem + stages + head)


_SHAPES = """
    Shapes
    ------
    - input: (N, C_in, H, W) float32 images, ``C_in = in_channels``; any H, W >= 32 (five stride-2 stages)
    - output: (N, num_classes) logits
"""


def resnet18(num_classes: int = 1000, in_channels: int = 3) -> nn.Graph:
    """ResNet-18 (BasicBlocks [2, 2, 2, 2], widths 64-512), torchvision's ImageNet layout and state_dict names.

    Parameters
    ----------
    num_classes : int, default 1000
    in_channels : int, default 3
    {shapes}
    11,689,512 parameters with 1000 classes and 3 input channels (torchvision's ``resnet18``).

    Returns
    -------
    sparkdl.nn.Graph
        Layers initialised as PyTorch's defaults; call ``.initialize(seed)`` or load weights
        (:func:`sparkdl.io.load_safetensors` reads a torchvision ``state_dict`` saved with safetensors).

    Raises
    ------
    TypeError, ValueError
        A ``num_classes`` or ``in_channels`` that is not a positive int (the message names the argument).

    References
    ----------
    He, Zhang, Ren & Sun, 2016, "Deep Residual Learning for Image Recognition"; ``torchvision.models.resnet18``.
    """
    return _resnet("resnet18", [2, 2, 2, 2], [64, 128, 256, 512], False, num_classes, in_channels, False)


def resnet34(num_classes: int = 1000, in_channels: int = 3) -> nn.Graph:
    """ResNet-34 (BasicBlocks [3, 4, 6, 3]), as :func:`resnet18` otherwise.
    {shapes}
    21,797,672 parameters with 1000 classes (torchvision's ``resnet34``).

    References
    ----------
    He et al., 2016; ``torchvision.models.resnet34``.
    """
    return _resnet("resnet34", [3, 4, 6, 3], [64, 128, 256, 512], False, num_classes, in_channels, False)


def resnet50(num_classes: int = 1000, in_channels: int = 3) -> nn.Graph:
    """ResNet-50 (Bottlenecks [3, 4, 6, 3], expansion 4, the stride on the 3x3 convolution as torchvision's
    "ResNet v1.5"), as :func:`resnet18` otherwise.
    {shapes}
    25,557,032 parameters with 1000 classes (torchvision's ``resnet50``).

    References
    ----------
    He et al., 2016; ``torchvision.models.resnet50``.
    """
    return _resnet("resnet50", [3, 4, 6, 3], [64, 128, 256, 512], True, num_classes, in_channels, False)


def resnet20(num_classes: int = 10, in_channels: int = 3) -> nn.Graph:
    """The CIFAR ResNet-20 of He et al.: a 3x3 stem, three stages of three BasicBlocks (16, 32, 64 channels;
    strides 1, 2, 2), global average pooling, ``fc``.

    Shortcuts are **option B**: where the shape changes, a 1x1 convolution (stride 2) + BatchNorm named
    ``downsample.0``/``downsample.1`` as torchvision's, elsewhere the identity (the paper's option A zero-pads
    instead and has 0.27 M parameters; option B adds 2,912).

    Parameters
    ----------
    num_classes : int, default 10
    in_channels : int, default 3

    Shapes
    ------
    - input: (N, C_in, H, W) float32 images (32x32 for CIFAR; any H, W >= 4)
    - output: (N, num_classes) logits

    272,474 parameters with 10 classes and 3 input channels.

    Raises
    ------
    TypeError, ValueError
        A ``num_classes`` or ``in_channels`` that is not a positive int.

    References
    ----------
    He, Zhang, Ren & Sun, 2016, "Deep Residual Learning for Image Recognition", section 4.2 (CIFAR-10).
    """
    return _resnet("resnet20", [3, 3, 3], [16, 32, 64], False, num_classes, in_channels, True)


for _f in (resnet18, resnet34, resnet50):
    _f.__doc__ = _f.__doc__.replace("{shapes}", _SHAPES)
