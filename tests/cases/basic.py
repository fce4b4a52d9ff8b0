import torch

from sparkdl import nn
from tests.cases import LayerCase

CASES = [
    LayerCase("linear", lambda: nn.Linear(7, 5), (4, 7), (4, 5), lambda: torch.nn.Linear(7, 5)),
    LayerCase("linear-batch1-nobias", lambda: nn.Linear(3, 6, bias=False), (1, 3), (1, 6),
              lambda: torch.nn.Linear(3, 6, bias=False)),
    LayerCase("relu", lambda: nn.ReLU(), (3, 4, 5), (3, 4, 5), lambda: torch.nn.ReLU()),
    LayerCase("sequential-mlp", lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)), (5, 6), (5, 3),
              lambda: torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))),
]
