"""Registry cases: activations, Dropout and the shape layers (Flatten, Reshape, Identity)."""
import torch

from sparkdl import nn
from tests.cases import LayerCase


class TorchReshape(torch.nn.Module):
    """torch counterpart of :class:`sparkdl.nn.Reshape`: per-sample reshape keeping the batch axis."""

    def __init__(self, shape):
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, x):
        return x.reshape(x.shape[0], *self.shape)


def _act(id, make, torch_make, shape=(3, 4, 5)):
    return LayerCase(id, make, shape, shape, torch_make)


CASES = [
    _act("leaky_relu", lambda: nn.LeakyReLU(), lambda: torch.nn.LeakyReLU()),
    _act("leaky_relu-slope0.2-odd", lambda: nn.LeakyReLU(0.2), lambda: torch.nn.LeakyReLU(0.2), (7, 3)),
    _act("leaky_relu-negative-slope", lambda: nn.LeakyReLU(-0.5), lambda: torch.nn.LeakyReLU(-0.5), (5,)),
    _act("elu", lambda: nn.ELU(), lambda: torch.nn.ELU()),
    _act("elu-alpha0.5-odd", lambda: nn.ELU(alpha=0.5), lambda: torch.nn.ELU(alpha=0.5), (3, 1, 7)),
    _act("gelu", lambda: nn.GELU(), lambda: torch.nn.GELU()),
    _act("gelu-tanh", lambda: nn.GELU("tanh"), lambda: torch.nn.GELU(approximate="tanh"), (2, 9)),
    _act("tanh", lambda: nn.Tanh(), lambda: torch.nn.Tanh()),
    _act("sigmoid", lambda: nn.Sigmoid(), lambda: torch.nn.Sigmoid(), (1, 11)),
    _act("softmax-dim1", lambda: nn.Softmax(dim=1), lambda: torch.nn.Softmax(dim=1), (4, 7)),
    _act("softmax-dim-last-3d", lambda: nn.Softmax(dim=-1), lambda: torch.nn.Softmax(dim=-1)),
    _act("softmax-dim0-3d", lambda: nn.Softmax(dim=0), lambda: torch.nn.Softmax(dim=0)),
    _act("softmax-dim1-4d", lambda: nn.Softmax(1), lambda: torch.nn.Softmax(1), (2, 3, 2, 3)),
    _act("softmax-single-class", lambda: nn.Softmax(1), lambda: torch.nn.Softmax(1), (3, 1)),
    _act("log_softmax-dim1", lambda: nn.LogSoftmax(dim=1), lambda: torch.nn.LogSoftmax(dim=1), (5, 6)),
    _act("log_softmax-dim1-3d", lambda: nn.LogSoftmax(1), lambda: torch.nn.LogSoftmax(1)),
    _act("log_softmax-dim-last-batch1", lambda: nn.LogSoftmax(-1), lambda: torch.nn.LogSoftmax(-1), (1, 9)),
    # Dropout: identity in eval mode (torch parity); in training the mask comes from the rng, so only the
    # float64 gradcheck applies (it reruns forward with the same seed, hence the same mask).
    LayerCase("dropout-eval", lambda: nn.Dropout(0.3), (4, 6), (4, 6), lambda: torch.nn.Dropout(0.3)),
    LayerCase("dropout-train", lambda: nn.Dropout(0.3), (4, 3, 5), (4, 3, 5), training=True),
    LayerCase("dropout-train-p0", lambda: nn.Dropout(0.0), (3, 4), (3, 4), lambda: torch.nn.Dropout(0.0),
              training=True),
    LayerCase("flatten", lambda: nn.Flatten(), (2, 3, 4, 5), (2, 60), lambda: torch.nn.Flatten()),
    LayerCase("flatten-2-3", lambda: nn.Flatten(2, 3), (2, 3, 4, 5), (2, 3, 20), lambda: torch.nn.Flatten(2, 3)),
    LayerCase("flatten-all", lambda: nn.Flatten(0), (2, 3, 4), (24,), lambda: torch.nn.Flatten(0)),
    LayerCase("flatten-noop-2d", lambda: nn.Flatten(), (3, 7), (3, 7), lambda: torch.nn.Flatten()),
    LayerCase("reshape", lambda: nn.Reshape((3, 2, 2)), (2, 12), (2, 3, 2, 2), lambda: TorchReshape((3, 2, 2))),
    LayerCase("reshape-infer", lambda: nn.Reshape([-1, 5]), (3, 2, 5), (3, 2, 5), lambda: TorchReshape((-1, 5))),
    LayerCase("reshape-int", lambda: nn.Reshape(6), (1, 2, 3), (1, 6), lambda: TorchReshape((6,))),
    LayerCase("identity", lambda: nn.Identity(), (3, 5), (3, 5), lambda: torch.nn.Identity()),
]
