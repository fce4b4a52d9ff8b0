"""The converter table: one small function per ONNX operator, registered with :func:`converter`.

A converter is ``fn(node, attrs, ctx) -> Layer``: it reads the node (its attributes already checked against
the names it declared, defaults filled in), validates shapes and constants through ``ctx``, and returns a
:class:`Layer` -- which sparkdl module class to build, with which config, on which inputs, with which
tensors. Converters build nothing; :mod:`sparkdl.onnx.builder` does, after every node has converted.

Adding an operator::

    @converter("Softplus", attrs={})
    def _softplus(node, a, ctx):
        return ctx.layer(node, nn.Softplus, {})
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sparkdl.onnx.reader import OnnxGraph, OnnxImportError

__all__ = ["Layer", "Context", "converter", "CONVERTERS", "supported_ops"]


@dataclass
class Layer:
    """What one node (or a fused group of nodes) becomes: ``cls(**config)`` applied to ``inputs``.

    ``tensors`` are its parameters and buffers by local name (e.g. ``weight``), ``sources`` the initializer
    each came from (used to name the module like PyTorch), ``output`` the ONNX value it produces. A converter
    returns one Layer, or a list (several outputs of one node; empty when the node folded to a constant).
    """

    node: object
    cls: type
    config: dict
    inputs: list
    output: str
    tensors: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Entry:
    fn: object
    attrs: dict


#: ONNX op_type -> converter (function and declared attributes with defaults).
CONVERTERS: dict[str, _Entry] = {}


def converter(op_type: str, attrs: dict):
    """Register ``fn`` as the converter of ``op_type``; ``attrs`` are its attribute names and defaults
    (a default may be a callable ``opset -> value`` where the default changed between opsets)."""
    def register(fn):
        CONVERTERS[op_type] = _Entry(fn, dict(attrs))
        return fn
    return register


def supported_ops() -> list[str]:
    """The ONNX operators the importer converts, sorted."""
    return sorted(CONVERTERS)


def describe(node) -> str:
    return f"node {node.name or '<unnamed>'!r} ({node.op_type})"


class Context:
    """What converters may ask about the graph: shapes, constants, consumers; and fusing a consumer."""

    def __init__(self, graph: OnnxGraph):
        self.graph, self.opset = graph, graph.opset
        self.consumers: dict[str, list] = {}
        for n in graph.nodes:
            for i in n.input:
                if i:
                    self.consumers.setdefault(i, []).append(n)
        self.absorbed: set[int] = set()
        #: factors k that a Reshape merged into a dynamic axis (N -> N * k, e.g. attention heads): a later Reshape
        #: may split that axis again into (-1, k)
        self.merged_batch: set[int] = set()
        self.producers = {o: n for n in graph.nodes for o in n.output if o}

    def fail(self, node, message: str):
        raise OnnxImportError(f"{describe(node)}: {message}")

    def is_const(self, name: str) -> bool:
        return name in self.graph.constants

    def const(self, node, index: int, what: str) -> np.ndarray | None:
        """Input ``index`` of ``node`` as a constant array (None if the optional input is absent)."""
        if index >= len(node.input) or not node.input[index]:
            return None
        name = node.input[index]
        if name not in self.graph.constants:
            self.fail(node, f"input {index} ({what}) must be a constant initializer, but {name!r} is computed "
                            "in the graph; sparkdl imports fixed weights and static shapes only")
        return self.graph.constants[name]

    def activation(self, node, index: int, ranks=None) -> str:
        """Input ``index`` of ``node``, which must be a computed float tensor of one of ``ranks``."""
        if index >= len(node.input) or not node.input[index]:
            self.fail(node, f"input {index} is missing")
        name = node.input[index]
        if name in self.graph.constants:
            self.fail(node, f"input {index} ({name!r}) is a constant; supported: a computed tensor there")
        if ranks is not None and len(self.shape(node, name)) not in ranks:
            self.fail(node, f"input {name!r} has shape {self.shape(node, name)}; supported ranks: "
                            f"{sorted(ranks)} (batch axis first)")
        return name

    def shape(self, node, name: str) -> tuple:
        """Inferred shape of value ``name`` (None for the batch axis)."""
        s = self.graph.shapes.get(name)
        if s is None or not s or any(d is None for d in s[1:]):
            self.fail(node, f"the shape of {name!r} is {'unknown' if s is None else s} after shape inference "
                            "(None = dynamic); sparkdl needs static shapes except for the batch axis")
        return s

    def sole_consumer(self, name: str):
        users = self.consumers.get(name, [])
        return users[0] if len(users) == 1 and name not in self.graph.outputs else None

    def absorb(self, node) -> None:
        """Mark ``node`` as converted together with its producer (e.g. the bias Add of a MatMul)."""
        self.absorbed.add(id(node))

    def layer(self, node, cls, config, inputs=None, output=None, **tensors) -> Layer:
        """A :class:`Layer` for ``node``: ``tensors`` are ``local_name=(array, source_name)`` pairs."""
        ins = inputs if inputs is not None else [self.activation(node, 0)]
        return Layer(node, cls, config, ins, output or node.output[0],
                     {k: v[0] for k, v in tensors.items()}, {k: v[1] for k, v in tensors.items() if v[1]})


def read_attributes(node, entry: _Entry, opset: int) -> dict:
    """The node's attributes as Python values, defaults filled in.

    Raises
    ------
    OnnxImportError
        If the node has an attribute the converter does not declare.
    """
    from onnx import helper
    given = {a.name: a for a in node.attribute}
    unknown = sorted(set(given) - set(entry.attrs))
    if unknown:
        raise OnnxImportError(f"{describe(node)}: unsupported attribute(s) {unknown}; supported attributes of "
                              f"{node.op_type}: {sorted(entry.attrs) or 'none'}")
    out = {}
    for name, default in entry.attrs.items():
        if name in given:
            v = helper.get_attribute_value(given[name])
            if isinstance(v, float):  # stored as float32: its shortest repr (1e-05, not 9.999999747378752e-06)
                v = float(str(np.float32(v)))
            if isinstance(v, (list, tuple)):
                v = [e.decode() if isinstance(e, bytes) else e for e in v]
            out[name] = v.decode() if isinstance(v, bytes) else v
        else:
            out[name] = default(opset) if callable(default) else default
    return out
