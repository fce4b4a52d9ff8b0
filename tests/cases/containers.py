"""Registry cases: Residual (identity and projection shortcuts), Concat and nested containers.

The torch counterparts below name their submodules like sparkdl's containers (``body``/``shortcut``;
Concat branches ``"0"``, ``"1"``, ...), so state dicts load by name in the generic PyTorch comparison.
"""
import torch
from torch import nn as tnn

from sparkdl import nn
from tests.cases import LayerCase


class TorchResidual(tnn.Module):
    """``body(x) + shortcut(x)``, identity shortcut when ``shortcut`` is None."""

    def __init__(self, body, shortcut=None):
        super().__init__()
        self.body = body
        self.shortcut = shortcut

    def forward(self, x):
        return self.body(x) + (x if self.shortcut is None else self.shortcut(x))


class TorchConcat(tnn.Module):
    """Branches applied to the same input, joined along ``dim``; children named "0", "1", ..."""

    def __init__(self, *branches, dim=1):
        super().__init__()
        self.dim = dim
        for i, b in enumerate(branches):
            self.add_module(str(i), b)

    def forward(self, x):
        return torch.cat([b(x) for b in self.children()], dim=self.dim)


def _mlp_residual():
    return nn.Residual(nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 6)))


def _torch_mlp_residual():
    return TorchResidual(tnn.Sequential(tnn.Linear(6, 6), tnn.Tanh(), tnn.Linear(6, 6)))


# A bias right before BatchNorm has an exactly-zero gradient in training (the mean absorbs it), which makes
# float32 comparisons pure rounding noise: layers feeding BatchNorm have bias=False, as in ResNets.
def _projection_residual():
    return nn.Residual(nn.Sequential(nn.Linear(6, 8, bias=False), nn.BatchNorm1d(8), nn.GELU()),
                       shortcut=nn.Sequential(nn.Linear(6, 8, bias=False), nn.BatchNorm1d(8)))


def _torch_projection_residual():
    return TorchResidual(tnn.Sequential(tnn.Linear(6, 8, bias=False), tnn.BatchNorm1d(8), tnn.GELU()),
                         shortcut=tnn.Sequential(tnn.Linear(6, 8, bias=False), tnn.BatchNorm1d(8)))


def _nested():
    return nn.Sequential(
        nn.Residual(nn.Sequential(nn.Linear(5, 5), nn.LeakyReLU(0.1)), shortcut=nn.Identity()),
        nn.Concat(nn.Linear(5, 3), nn.Sequential(nn.Linear(5, 4, bias=False), nn.BatchNorm1d(4), nn.Sigmoid())),
        nn.Linear(7, 4), nn.LogSoftmax(dim=1))


def _torch_nested():
    return tnn.Sequential(
        TorchResidual(tnn.Sequential(tnn.Linear(5, 5), tnn.LeakyReLU(0.1)), shortcut=tnn.Identity()),
        TorchConcat(tnn.Linear(5, 3), tnn.Sequential(tnn.Linear(5, 4, bias=False), tnn.BatchNorm1d(4), tnn.Sigmoid())),
        tnn.Linear(7, 4), tnn.LogSoftmax(dim=1))


def _conv_block(ours):
    """ResNet basic block with a 1x1 projection shortcut (stride 2), in sparkdl (``ours``) or torch."""
    m = nn if ours else tnn
    res = nn.Residual if ours else TorchResidual
    return res(m.Sequential(m.Conv2d(2, 3, 3, stride=2, padding=1, bias=False), m.BatchNorm2d(3), m.ReLU(),
                            m.Conv2d(3, 3, 3, padding=1, bias=False), m.BatchNorm2d(3)),
               shortcut=m.Sequential(m.Conv2d(2, 3, 1, stride=2, bias=False), m.BatchNorm2d(3)))


def _inception(ours):
    """Inception-style Concat of a 1x1 conv, a 3x3 conv and an Identity along channels."""
    m = nn if ours else tnn
    cat = nn.Concat if ours else TorchConcat
    return cat(m.Conv2d(3, 2, 1), m.Sequential(m.Conv2d(3, 3, 3, padding=1), m.ELU()), m.Identity(), dim=1)


CASES = [
    LayerCase("residual-identity", _mlp_residual, (4, 6), (4, 6), _torch_mlp_residual),
    LayerCase("residual-projection-train", _projection_residual, (5, 6), (5, 8), _torch_projection_residual,
              training=True),
    LayerCase("residual-projection-eval", _projection_residual, (3, 6), (3, 8), _torch_projection_residual),
    LayerCase("concat-dim1", lambda: nn.Concat(nn.Linear(5, 3), nn.Sequential(nn.Linear(5, 4), nn.Tanh())),
              (3, 5), (3, 7), lambda: TorchConcat(tnn.Linear(5, 3), tnn.Sequential(tnn.Linear(5, 4), tnn.Tanh()))),
    LayerCase("concat-dim-last-3d", lambda: nn.Concat(nn.Identity(), nn.Softmax(dim=2), dim=-1),
              (2, 3, 4), (2, 3, 8), lambda: TorchConcat(tnn.Identity(), tnn.Softmax(dim=2), dim=-1)),
    LayerCase("nested-train", _nested, (6, 5), (6, 4), _torch_nested, training=True),
    # Weight gradients here are float32 sums of magnitude ~10 through two BatchNorms: torch's and ours both
    # differ from float64 by a few 1e-6 absolute, hence atol 2e-5.
    LayerCase("resnet-block-train", lambda: _conv_block(True), (2, 2, 5, 5), (2, 3, 3, 3),
              lambda: _conv_block(False), training=True, atol=2e-5),
    # (eval-mode gradients of conv and BatchNorm are checked by their own cases; parity only here, for speed)
    LayerCase("resnet-block-eval", lambda: _conv_block(True), (1, 2, 4, 4), (1, 3, 2, 2), lambda: _conv_block(False),
              gradcheck=False, atol=2e-5),
    LayerCase("inception-concat", lambda: _inception(True), (2, 3, 4, 5), (2, 8, 4, 5), lambda: _inception(False)),
]
