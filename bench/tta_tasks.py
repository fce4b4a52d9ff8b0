"""The tasks of bench/time_to_accuracy.py: data set, target, architecture (defined for both libraries), each
system's settings and the grid they were chosen from.

``mnist``: LeNet-5 on MNIST to 99.0% test accuracy (:func:`sparkdl.models.lenet5` and its PyTorch twin).

``fashion_mnist``: ResNet-8 on Fashion-MNIST to 92.0%. ResNet-8 is the CIFAR ResNet of He et al. (2016) with one
basic block per stage, for 1x28x28 inputs: conv 3x3 16 (no bias) - BN - ReLU; three stages of one basic block
(two conv 3x3 - BN, identity shortcut in the first, a 1x1 conv (stride 2) - BN projection in the others) at 16,
32 (stride 2, 14x14) and 64 (stride 2, 7x7) channels, each followed by ReLU; global average pooling; fc 10.
77,754 parameters; 8 weighted layers on the main path.

Settings: every system trains with Adam and a cosine decay (to 1% of the peak rate) over ``schedule_epochs``
epochs (sparkdl: after a linear warm-up of half an epoch, as ``sparkdl train`` does), and stops at the first
epoch whose test accuracy reaches the target. ``SETTINGS[task][system]`` = (batch size, peak learning rate[,
schedule_epochs]) is the fastest to the target of ``SEARCH[task][system]`` (batch sizes x rates; for
TorchDistributor the batch is per process, so the global batch is twice it); ``python bench/time_to_accuracy.py
--task T --search`` runs the grid. The MNIST settings come from earlier sessions' trials (bench/RESULTS.md, not
this exact grid) and, for the schedule, from runs of every system at ``schedule_epochs`` 4, 6 and 10 (28th
session: PyTorch and TorchDistributor are fastest at 4, sparkdl at 10). Since several iterations share one Spark
job (29th session), sparkdl's iteration is cheap enough for PyTorch's batch sizes: its MNIST setting comes from
``--search --systems sparkdl --schedule-epochs 4`` over its whole grid (31st session: fastest 128, 3e-3, 18.8 s in
3 epochs; 256 / 4e-3, the earlier setting, needed 4). The Fashion-MNIST
settings are PROVISIONAL (not yet searched on this machine) until ``--search`` has run: the references' are their
grids' middle points, sparkdl's PyTorch's own (128, 2e-3; 30th session: small batches are cheap since several
iterations share a Spark job).
"""
from __future__ import annotations

__all__ = ["TASKS", "SETTINGS", "SEARCH", "sparkdl_model", "torch_model"]

TASKS = {
    "mnist": {"fetch": "fetch_mnist", "mean": 0.1307, "std": 0.3081, "target": 0.99, "model": "lenet5",
              "schedule_epochs": 10, "max_epochs": 15},
    "fashion_mnist": {"fetch": "fetch_fashion_mnist", "mean": 0.2860, "std": 0.3530, "target": 0.92,
                      "model": "resnet8", "schedule_epochs": 12, "max_epochs": 20},
}

SETTINGS = {  # (batch size, peak learning rate[, schedule_epochs if not the task's]) per system
    "mnist": {"sparkdl": (128, 3e-3, 4), "torch": (128, 3e-3, 4), "distributor": (64, 3e-3, 4)},
    "fashion_mnist": {"sparkdl": (128, 2e-3), "torch": (128, 2e-3), "distributor": (64, 2e-3)},
}

SEARCH = {  # batch sizes x peak learning rates tried per system
    "mnist": {"sparkdl": ((128, 256, 512, 1024), (3e-3, 4e-3, 6e-3)), "torch": ((64, 128, 256), (1e-3, 3e-3, 6e-3)),
              "distributor": ((32, 64, 128), (1e-3, 3e-3, 6e-3))},
    "fashion_mnist": {"sparkdl": ((128, 256, 512), (2e-3, 4e-3, 8e-3)),
                      "torch": ((64, 128, 256), (1e-3, 2e-3, 4e-3)),
                      "distributor": ((32, 64, 128), (1e-3, 2e-3, 4e-3))},
}


def _resnet8_blocks(m, cin, cout, stride):
    """One basic block of ResNet-8 from the module namespace ``m`` (sparkdl.nn or torch.nn): ``(body, shortcut)``."""
    body = m.Sequential(m.Conv2d(cin, cout, 3, stride, 1, bias=False), m.BatchNorm2d(cout), m.ReLU(),
                        m.Conv2d(cout, cout, 3, 1, 1, bias=False), m.BatchNorm2d(cout))
    shortcut = None if stride == 1 and cin == cout else m.Sequential(m.Conv2d(cin, cout, 1, stride, bias=False),
                                                                     m.BatchNorm2d(cout))
    return body, shortcut


RESNET8_STAGES = ((16, 16, 1), (16, 32, 2), (32, 64, 2))  # (in channels, out channels, stride)


def sparkdl_model(name, seed=0):
    """The task's network in sparkdl, initialized with ``seed``."""
    from sparkdl import models, nn
    if name == "lenet5":
        return models.lenet5().initialize(seed)
    layers = [nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    for cin, cout, stride in RESNET8_STAGES:
        body, shortcut = _resnet8_blocks(nn, cin, cout, stride)
        layers += [nn.Residual(body, shortcut), nn.ReLU()]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers).initialize(seed)


def torch_model(name):
    """The same network in PyTorch (PyTorch's default initialization; seed with ``torch.manual_seed``)."""
    from torch import nn
    if name == "lenet5":
        return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5),
                             nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(),
                             nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))

    class Residual(nn.Module):
        def __init__(self, body, shortcut):
            super().__init__()
            self.body, self.shortcut = body, shortcut

        def forward(self, x):
            return self.body(x) + (x if self.shortcut is None else self.shortcut(x))

    layers = [nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    for cin, cout, stride in RESNET8_STAGES:
        layers += [Residual(*_resnet8_blocks(nn, cin, cout, stride)), nn.ReLU()]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)
