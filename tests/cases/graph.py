"""Registry cases: :class:`nn.Graph` with skip connections, fan-out, merge layers and dotted node names.

Each torch counterpart has attributes named like the graph's nodes (dotted node names are nested torch
modules), so state dicts load by name in the generic PyTorch comparison. Multi-input and multi-output graphs
are checked in tests/test_graph.py (the generic tests feed one array).
"""
import torch
from torch import nn as tnn

from sparkdl import nn
from tests.cases import LayerCase


def _skip():
    """x -> lin1 -> tanh; x -> lin2; tanh + lin2 + x (x feeds three nodes)."""
    return nn.Graph("x", [("lin1", nn.Linear(5, 5), "x"), ("tanh", nn.Tanh(), "lin1"),
                          ("lin2", nn.Linear(5, 5), "x"), ("add", nn.Add(), ["tanh", "lin2", "x"])], "add")


class TorchSkip(tnn.Module):
    def __init__(self):
        super().__init__()
        self.lin1, self.lin2 = tnn.Linear(5, 5), tnn.Linear(5, 5)

    def forward(self, x):
        return torch.tanh(self.lin1(x)) + self.lin2(x) + x


def _nested_names():
    """Conv block with dotted names ('block.conv', 'block.bn'), joined with its input along channels,
    then a shared value ('relu') used by both the head and a second join."""
    return nn.Graph("input", [
        ("block.conv", nn.Conv2d(2, 3, 3, padding=1, bias=False), "input"),
        ("block.bn", nn.BatchNorm2d(3), "block.conv"),
        ("relu", nn.ReLU(), "block.bn"),
        ("cat", nn.Concatenate(dim=1), ["relu", "input"]),
        ("head", nn.Conv2d(5, 3, 1), "cat"),
        ("out", nn.Add(), ["head", "relu"])], "out")


class TorchNestedNames(tnn.Module):
    def __init__(self):
        super().__init__()
        self.block = tnn.Module()
        self.block.conv = tnn.Conv2d(2, 3, 3, padding=1, bias=False)
        self.block.bn = tnn.BatchNorm2d(3)
        self.head = tnn.Conv2d(5, 3, 1)

    def forward(self, x):
        r = torch.relu(self.block.bn(self.block.conv(x)))
        return self.head(torch.cat([r, x], dim=1)) + r


def _dead_branch():
    """A node ('unused') that reaches no output: its parameter gradient must be exactly zero."""
    return nn.Graph("x", [("unused", nn.Linear(4, 2), "x"), ("fc", nn.Linear(4, 3), "x"),
                          ("act", nn.Sigmoid(), "fc")], "act")


def _sub_graph():
    """A Graph inside a Sequential inside a Graph (a graph node holding a graph)."""
    inner = nn.Graph("h", [("a", nn.Linear(4, 4), "h"), ("b", nn.ELU(), "a"), ("sum", nn.Add(), ["b", "h"])], "sum")
    return nn.Graph("x", [("seq", nn.Sequential(nn.Linear(3, 4), inner), "x"), ("out", nn.LogSoftmax(dim=1), "seq")],
                    "out")


CASES = [
    LayerCase("graph-skip-fanout", _skip, (4, 5), (4, 5), TorchSkip),
    LayerCase("graph-nested-names-train", _nested_names, (2, 2, 4, 4), (2, 3, 4, 4), TorchNestedNames, training=True,
              atol=1e-5),
    LayerCase("graph-nested-names-eval", _nested_names, (2, 2, 3, 3), (2, 3, 3, 3), TorchNestedNames),
    LayerCase("graph-dead-branch", _dead_branch, (3, 4), (3, 3)),
    LayerCase("graph-in-graph", _sub_graph, (3, 3), (3, 4)),
]
