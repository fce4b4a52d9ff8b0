"""Registry cases: SiLU, Softplus, PReLU, LayerNorm and GroupNorm.

The normalization layers draw random affine parameters on ``initialize`` (weight != 1, bias != 0) so the
gradient check and the PyTorch comparison exercise every term; PReLU likewise draws its slopes.
"""
import torch

from sparkdl import nn
from tests.cases import LayerCase


def _random_affine(cls):
    """A subclass of ``cls`` whose ``reset_parameters`` draws weight ~ U(0.5, 1.5), bias ~ N(0, 0.5)."""
    def reset_parameters(self, rng):
        for name, arr in self.named_parameters():
            arr[...] = rng.uniform(0.5, 1.5, arr.shape) if name == "weight" else rng.normal(0, 0.5, arr.shape)
    return type("RandomAffine" + cls.__name__, (cls,), {"reset_parameters": reset_parameters})


RandomAffineLayerNorm = _random_affine(nn.LayerNorm)
RandomAffineGroupNorm = _random_affine(nn.GroupNorm)


class RandomSlopePReLU(nn.PReLU):
    """PReLU with slopes drawn from U(-0.5, 0.8) (negative slopes included)."""

    def reset_parameters(self, rng):
        self.weight[...] = rng.uniform(-0.5, 0.8, self.weight.shape)


def _same(id, make, torch_make, shape, **kw):
    return LayerCase(id, make, shape, shape, torch_make, **kw)


CASES = [
    _same("silu", lambda: nn.SiLU(), lambda: torch.nn.SiLU(), (3, 4, 5)),
    _same("softplus", lambda: nn.Softplus(), lambda: torch.nn.Softplus(), (4, 6)),
    # beta 2, threshold 1: inputs above 0.5 take the linear branch
    _same("softplus-beta2-threshold1", lambda: nn.Softplus(beta=2.0, threshold=1.0),
          lambda: torch.nn.Softplus(beta=2.0, threshold=1.0), (5, 7)),
    _same("softplus-negative-beta", lambda: nn.Softplus(beta=-0.5), lambda: torch.nn.Softplus(beta=-0.5), (9,)),
    _same("prelu-shared", lambda: nn.PReLU(), lambda: torch.nn.PReLU(), (3, 4, 5)),
    _same("prelu-init", lambda: nn.PReLU(init=0.1), lambda: torch.nn.PReLU(init=0.1), (2, 3)),
    _same("prelu-channels-4d", lambda: RandomSlopePReLU(3), lambda: torch.nn.PReLU(3), (2, 3, 4, 2)),
    _same("prelu-channels-2d", lambda: RandomSlopePReLU(5), lambda: torch.nn.PReLU(5), (4, 5)),
    _same("layernorm-last", lambda: RandomAffineLayerNorm(6), lambda: torch.nn.LayerNorm(6), (4, 6)),
    _same("layernorm-3d", lambda: RandomAffineLayerNorm(8), lambda: torch.nn.LayerNorm(8), (2, 5, 8)),
    _same("layernorm-two-axes", lambda: RandomAffineLayerNorm([3, 4]), lambda: torch.nn.LayerNorm([3, 4]),
          (2, 2, 3, 4)),
    _same("layernorm-nobias-eps", lambda: RandomAffineLayerNorm(5, eps=1e-3, bias=False),
          lambda: torch.nn.LayerNorm(5, eps=1e-3, bias=False), (3, 5)),
    _same("layernorm-noaffine", lambda: nn.LayerNorm(7, elementwise_affine=False),
          lambda: torch.nn.LayerNorm(7, elementwise_affine=False), (3, 2, 7)),
    _same("groupnorm-4d", lambda: RandomAffineGroupNorm(2, 4), lambda: torch.nn.GroupNorm(2, 4), (3, 4, 3, 2)),
    _same("groupnorm-3d-one-group", lambda: RandomAffineGroupNorm(1, 3), lambda: torch.nn.GroupNorm(1, 3),
          (2, 3, 5)),
    _same("groupnorm-instance-2d", lambda: RandomAffineGroupNorm(6, 6, eps=1e-3),
          lambda: torch.nn.GroupNorm(6, 6, eps=1e-3), (2, 6, 4)),
    _same("groupnorm-noaffine-2d", lambda: nn.GroupNorm(2, 6, affine=False),
          lambda: torch.nn.GroupNorm(2, 6, affine=False), (3, 6)),
]
