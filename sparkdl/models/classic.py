"""The first reference architectures (LeNet-5, an MLP, a small VGG-style CNN), used by the command line,
examples and benchmarks; their parameters are named as a ``torch.nn.Sequential`` of the same layers."""
from __future__ import annotations

from sparkdl import nn

__all__ = ["lenet5", "mlp", "small_cnn"]


def lenet5(num_classes: int = 10, in_channels: int = 1) -> nn.Sequential:
    """LeNet-5 for (N, 1, 28, 28) inputs, with ReLU and max pooling (LeCun et al., 1998, modernised).

    conv 6@5×5 (padding 2) → ReLU → maxpool 2 → conv 16@5×5 → ReLU → maxpool 2 → flatten (400) →
    fc 120 → ReLU → fc 84 → ReLU → fc ``num_classes`` (logits). 61,706 parameters for 10 classes.
    """
    return nn.Sequential(
        nn.Conv2d(in_channels, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, num_classes))


def mlp(in_features: int = 784, hidden=(512, 256), num_classes: int = 10, dropout: float = 0.0) -> nn.Sequential:
    """Multi-layer perceptron: flatten → [fc → ReLU (→ Dropout)] per hidden size → fc ``num_classes``.

    Input (N, *) with ``prod(*) == in_features``; output (N, num_classes) logits.
    """
    layers = [nn.Flatten()]
    width = in_features
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        if dropout:
            layers.append(nn.Dropout(dropout))
        width = h
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


def small_cnn(num_classes: int = 10, in_channels: int = 3) -> nn.Sequential:
    """VGG-style CNN for (N, 3, 32, 32): conv32-conv32-pool-conv64-conv64-pool-fc256-fc``num_classes``
    (3×3 convolutions with padding 1, ReLU)."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, num_classes))

