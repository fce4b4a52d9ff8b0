"""Registry cases: BatchNorm1d / BatchNorm2d in training and evaluation mode.

The layers under test draw non-trivial state on ``initialize`` (weight != 1, bias != 0, running mean != 0,
running variance != 1, a batch counter > 0), so the generic gradient check and PyTorch comparison exercise
every term; the torch side is loaded from the same state dict.
"""
import torch

from sparkdl import nn
from tests.cases import LayerCase


def _randomize(m, rng):
    if m.affine:
        m.weight[...] = rng.uniform(0.5, 1.5, m.weight.shape)
        m.bias[...] = rng.normal(0.0, 0.5, m.bias.shape)
    if m.track_running_stats:
        m.running_mean[...] = rng.normal(0.0, 0.5, m.running_mean.shape)
        m.running_var[...] = rng.uniform(0.5, 2.0, m.running_var.shape)
        m.num_batches_tracked[...] = 3


class RandomStateBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d whose ``reset_parameters`` draws random affine parameters and running statistics."""

    def reset_parameters(self, rng):
        super().reset_parameters(rng)
        _randomize(self, rng)


class RandomStateBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose ``reset_parameters`` draws random affine parameters and running statistics."""

    def reset_parameters(self, rng):
        super().reset_parameters(rng)
        _randomize(self, rng)


def _bn(id, dims, shape, training, atol=1e-6, **kw):
    ours = RandomStateBatchNorm1d if dims == 1 else RandomStateBatchNorm2d
    theirs = torch.nn.BatchNorm1d if dims == 1 else torch.nn.BatchNorm2d
    c = shape[1]
    return LayerCase(id, lambda: ours(c, **kw), shape, shape, lambda: theirs(c, **kw), training=training,
                     atol=atol)


CASES = [
    _bn("bn1d-2d-train", 1, (8, 5), True),
    _bn("bn1d-2d-eval", 1, (8, 5), False),
    _bn("bn1d-3d-train-odd", 1, (3, 4, 7), True),
    _bn("bn1d-3d-eval-odd", 1, (3, 4, 7), False),
    _bn("bn1d-batch1-eval", 1, (1, 5), False),
    # N=2: x_hat = +-1 whatever x is, so the exact input gradient is ~eps-sized and torch's float32 result
    # carries ~1e-6 absolute rounding error (measured against float64), hence atol 2e-6.
    _bn("bn1d-batch2-train", 1, (2, 3), True, atol=2e-6),
    _bn("bn1d-3d-batch1-train", 1, (1, 3, 5), True),
    _bn("bn1d-momentum-none-train", 1, (6, 4), True, momentum=None),
    _bn("bn1d-noaffine-train", 1, (5, 3), True, affine=False),
    _bn("bn1d-noaffine-eval", 1, (5, 3), False, affine=False),
    _bn("bn1d-nostats-eval", 1, (6, 2), False, track_running_stats=False),
    _bn("bn1d-nostats-train", 1, (6, 2, 3), True, track_running_stats=False),
    _bn("bn2d-train", 2, (3, 4, 5, 3), True),
    _bn("bn2d-eval", 2, (3, 4, 5, 3), False),
    _bn("bn2d-batch1-eval", 2, (1, 3, 1, 1), False),
    _bn("bn2d-batch1-train", 2, (1, 3, 2, 3), True),
    _bn("bn2d-momentum0.3-eps1e-3-train", 2, (2, 5, 3, 2), True, momentum=0.3, eps=1e-3),
    _bn("bn2d-noaffine-momentum-none-train", 2, (4, 2, 3, 3), True, affine=False, momentum=None),
]
