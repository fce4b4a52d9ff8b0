"""Graph rewrites before conversion: node patterns that an exporter writes for one PyTorch function, replaced by
the one ONNX operator that sparkdl converts to a layer.

* GELU (``approximate='none'``) below opset 20, where ONNX has no ``Gelu``: both of PyTorch's exporters write
  ``0.5 * x * (1 + Erf(x / sqrt(2)))`` as five nodes (``Div`` or ``Mul`` by 1/sqrt(2), ``Erf``, ``Add 1``, two
  ``Mul``), which would run as five whole-array numpy operations each keeping its inputs for backward;
  :func:`fuse_gelu` makes them one ``Gelu`` node (:class:`~sparkdl.nn.GELU`, one pass each way).

A rewrite applies only where every intermediate value has one consumer and is no graph output, so it never
changes what the graph computes; anything else is left to the node-by-node converters.
"""
from __future__ import annotations

import math

from sparkdl.onnx.reader import OnnxGraph

__all__ = ["fuse_patterns", "fuse_gelu"]


def _scalar(graph: OnnxGraph, name: str) -> float | None:
    value = graph.constants.get(name)
    return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None


def _is(graph: OnnxGraph, name: str, target: float) -> bool:
    value = _scalar(graph, name)
    return value is not None and math.isclose(value, target, rel_tol=1e-6)


def _operands(node) -> tuple[str, str] | None:
    return tuple(node.input) if node.op_type in ("Mul", "Add", "Div") and len(node.input) == 2 else None


class _Links:
    def __init__(self, graph: OnnxGraph):
        self.graph = graph
        self.producer = {o: n for n in graph.nodes for o in n.output if o}
        self.consumers: dict[str, list] = {}
        for n in graph.nodes:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)

    def sole(self, name: str, op_type: str):
        """The one consumer of intermediate value ``name`` when it is an ``op_type`` node, else None."""
        users = self.consumers.get(name, [])
        ok = len(users) == 1 and users[0].op_type == op_type and name not in self.graph.outputs
        return users[0] if ok else None

    def other(self, node, name: str) -> str | None:
        """The input of binary ``node`` that is not ``name``."""
        ins = _operands(node)
        return None if ins is None or name not in ins else (ins[1] if ins[0] == name else ins[0])


def _gelu_nodes(links: _Links, erf) -> tuple[list, str, str] | None:
    """``(nodes, x, output)`` of the erf formula of GELU around ``erf``, or None."""
    g = links.graph
    scale = links.producer.get(erf.input[0])
    if scale is None or links.sole(erf.input[0], "Erf") is not erf or _operands(scale) is None:
        return None
    x, c = scale.input
    if scale.op_type == "Mul" and x in g.constants:
        x, c = c, x
    if x in g.constants or not (scale.op_type == "Div" and _is(g, c, math.sqrt(2))
                                or scale.op_type == "Mul" and _is(g, c, 1 / math.sqrt(2))):
        return None
    add = links.sole(erf.output[0], "Add")
    if add is None or not _is(g, links.other(add, erf.output[0]), 1.0):
        return None
    first = links.sole(add.output[0], "Mul")
    if first is None:
        return None
    factor = links.other(first, add.output[0])
    if factor == x or _is(g, factor, 0.5):  # (x * (1 + erf)) * 0.5, or (0.5 * (1 + erf)) * x
        last = links.sole(first.output[0], "Mul")
        want = 0.5 if factor == x else None
        rest = None if last is None else links.other(last, first.output[0])
        if rest is None or not (_is(g, rest, want) if want else rest == x):
            return None
        return [scale, erf, add, first, last], x, last.output[0]
    half = links.producer.get(factor)  # (x * 0.5) * (1 + erf)
    if half is None or half.op_type != "Mul" or links.sole(factor, "Mul") is not first:
        return None
    if not _is(g, links.other(half, x) or "", 0.5):
        return None
    return [half, scale, erf, add, first], x, first.output[0]


def fuse_gelu(graph: OnnxGraph) -> int:
    """Replace each erf formula of GELU in ``graph.nodes`` by one ``Gelu`` node (in place); returns how many."""
    from onnx import helper
    links = _Links(graph)
    replaced, dropped = {}, set()
    for erf in [n for n in graph.nodes if n.op_type == "Erf"]:
        found = _gelu_nodes(links, erf)
        if found is None or any(id(n) in dropped for n in found[0]):
            continue
        nodes, x, out = found
        gelu = helper.make_node("Gelu", [x], [out], name=erf.name.rsplit("Erf", 1)[0] + "Gelu" if erf.name else "")
        gelu.metadata_props.extend(erf.metadata_props)  # the module scope (dynamo) names the layer like PyTorch
        last = max(nodes, key=graph.nodes.index)
        replaced[id(last)] = gelu
        dropped.update(id(n) for n in nodes)
    graph.nodes[:] = [replaced.get(id(n), n) for n in graph.nodes if id(n) not in dropped or id(n) in replaced]
    return len(replaced)


def fuse_patterns(graph: OnnxGraph) -> OnnxGraph:
    """Every rewrite of this module, in place; returns ``graph``."""
    fuse_gelu(graph)
    return graph

