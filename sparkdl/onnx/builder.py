"""Graph building: converted :class:`~sparkdl.onnx.converters.Layer` specs -> a sparkdl module.

Three phases, so a file that cannot be imported fails before anything is built (after the rewrites of
:mod:`sparkdl.onnx.patterns`, e.g. GELU's erf formula -> one ``Gelu`` node):

1. every node's operator is in the converter table and its attributes are declared (all problems at once);
2. every node converts to a ``Layer`` (shapes and constants validated, nothing built);
3. modules are built, given their tensors, named, and wired into an :class:`~sparkdl.nn.Sequential` (a chain
   whose module names are 0, 1, ... as a ``torch.nn.Sequential``'s) or an :class:`~sparkdl.nn.Graph`.

Module names follow PyTorch: the prefix of the initializer names (``layer1.0.conv1.weight`` ->
``layer1.0.conv1``), else the module path that ``torch.onnx.export`` writes into the node's name_scopes
metadata (dynamo) or name (``/layer1/layer1.0/conv1/Conv`` -> ``layer1.0.conv1``), else the node name, else
the operator; so parameters keep the exporting model's ``state_dict`` keys whenever the file carries them.
"""
from __future__ import annotations

import re
import warnings

from sparkdl import nn
from sparkdl.onnx import (generic, ops, ops_activation, ops_sequence, ops_spatial,  # noqa: F401  (register converters)
                          ops_tensor)
from sparkdl.onnx.converters import CONVERTERS, Context, describe, read_attributes, supported_ops
from sparkdl.onnx.patterns import fuse_patterns
from sparkdl.onnx.reader import OnnxGraph, OnnxImportError

__all__ = ["build"]


def _check_supported(graph: OnnxGraph) -> None:
    problems = []
    for node in graph.nodes:
        entry = CONVERTERS.get(node.op_type)
        if entry is None or node.domain not in ("", "ai.onnx"):
            problems.append(f"{describe(node)}: unsupported operator {node.domain + '.' if node.domain else ''}"
                            f"{node.op_type}")
            continue
        try:
            read_attributes(node, entry, graph.opset)
        except OnnxImportError as e:
            problems.append(str(e))
    if problems:
        raise OnnxImportError("cannot import this ONNX model:\n  " + "\n  ".join(problems) +
                              f"\nsupported operators: {', '.join(supported_ops())}")


def _convert(graph: OnnxGraph) -> list:
    ctx = Context(graph)
    layers = []
    for node in graph.nodes:
        if id(node) in ctx.absorbed:
            continue
        entry = CONVERTERS[node.op_type]
        try:
            layer = entry.fn(node, read_attributes(node, entry, graph.opset), ctx)
        except OnnxImportError:
            raise
        except (TypeError, ValueError, IndexError, KeyError, ArithmeticError) as e:  # values no check foresaw
            raise OnnxImportError(f"{describe(node)}: cannot convert: {type(e).__name__}: {e}") from None
        produced = layer if isinstance(layer, list) else [layer]
        made = {p.output for p in produced}
        for extra in list(node.output)[1:]:
            if extra and extra not in made and (extra in ctx.consumers or extra in graph.outputs):
                ctx.fail(node, f"output {extra!r} (an optional output) is used; supported: the first output only")
        layers.extend(produced)
    layers = _live(layers, graph)
    used, shared = {}, []
    for layer in layers:
        for name in layer.sources.values():
            if name in used and used[name] is not layer:
                shared.append(f"initializer {name!r} is used by {describe(used[name].node)} and {describe(layer.node)}")
            used.setdefault(name, layer)
    if shared:  # dynamo's optimizer merges equal initializers (fresh LayerNorm weights, deep-copied layers)
        more = f" (and {len(shared) - 1} more)" if len(shared) > 1 else ""
        warnings.warn(f"{shared[0]}{more}: imported as independent copies (exact in evaluation; in training each "
                      "copy learns on its own, unlike weights tied in the source model)", UserWarning, stacklevel=2)
    return layers


def _live(layers: list, graph: OnnxGraph) -> list:
    """The layers some graph output depends on (drops e.g. the shape arithmetic of a zero initial state)."""
    producer = {layer.output: layer for layer in layers}
    needed, stack = set(), list(graph.outputs)
    while stack:
        layer = producer.get(stack.pop())
        if layer is not None and id(layer) not in needed:
            needed.add(id(layer))
            stack.extend(layer.inputs)
    return [layer for layer in layers if id(layer) in needed]


def _clean(name: str) -> str:
    parts = [re.sub(r"[^A-Za-z0-9_]", "_", p) for p in name.split(".")]
    return ".".join(p for p in parts if p)


def _scope(node_name: str) -> str:
    """Module path from a torch.onnx node name: '/layer1/layer1.0/conv1/Conv' -> 'layer1.0.conv1'.

    torch writes one scope component per module, some relative to an ancestor ('layer1', 'layer1.0',
    'shortcut', 'shortcut.0'): a component that starts with the path's last segments continues them.
    """
    path: list[str] = []
    for c in node_name.strip("/").split("/")[:-1]:
        seg = [p for p in c.split(".") if p]
        k = max((k for k in range(min(len(path), len(seg)) + 1) if path[len(path) - k:] == seg[:k]), default=0)
        path += seg[k:]
    return _clean(".".join(path))


def _dynamo_scope(node) -> str:
    """Module path from the dynamo exporter's ``pkg.torch.onnx.name_scopes`` metadata, a list of the enclosing
    modules' paths and the operator (``['', 'features', 'features.0', 'features.0.2', 'hardswish']`` ->
    ``features.0.2``); '' when absent."""
    for prop in getattr(node, "metadata_props", ()):
        if prop.key == "pkg.torch.onnx.name_scopes":
            scopes = re.findall(r"'([^']*)'", prop.value[:10_000])
            return _clean(scopes[-2]) if len(scopes) >= 2 else ""
    return ""


def _node_scope(node) -> str:
    return _dynamo_scope(node) or _scope(node.name)


def _module_name(layer) -> str:
    """PyTorch-style name of a module with tensors: the common prefix of ``<prefix>.<local name>`` sources."""
    prefixes = {src[:-len(local) - 1] for local, src in layer.sources.items() if src.endswith("." + local)}
    if len(prefixes) == 1 and _clean(next(iter(prefixes))):
        return _clean(prefixes.pop())
    return _node_scope(layer.node) or _clean(layer.node.name.replace("/", ".")) or layer.node.op_type.lower()


def _unique(base: str, used: set, suffix: str) -> str:
    name = base if base not in used else f"{base}.{suffix}" if base else suffix
    k = 1
    while name in used:
        name, k = f"{base}.{suffix}_{k}" if base else f"{suffix}_{k}", k + 1
    used.add(name)
    return name


def _instantiate(layer):
    try:
        module = layer.cls(**layer.config)
        state = module.state_dict()
        state.update(layer.tensors)
        module.load_state_dict(state)
    except (TypeError, ValueError, KeyError) as e:
        raise OnnxImportError(f"{describe(layer.node)}: cannot build {layer.cls.__name__}({layer.config}): "
                              f"{e}") from None
    return module


def build(graph: OnnxGraph) -> nn.Module:
    """Build the sparkdl module for a read and checked ONNX graph (see the module docstring).

    Raises
    ------
    OnnxImportError
        Unsupported operators or attributes (all listed), or a node that cannot be expressed by sparkdl's
        layers (names the node, the operator and what is supported).
    """
    _check_supported(fuse_patterns(graph))
    layers = _convert(graph)
    modules = [_instantiate(layer) for layer in layers]
    used: set = set()
    value = {}
    inputs = []
    for name in graph.inputs:
        value[name] = _unique(_clean(name) or "input", used, "input")
        inputs.append(value[name])
    names = [""] * len(layers)
    # modules with tensors are named first, so that their names (the state_dict prefixes) are PyTorch's even
    # when a tensor-less node of the same scope (a Transpose before an LSTM) comes earlier
    for i in sorted(range(len(layers)), key=lambda i: not layers[i].tensors):
        layer = layers[i]
        scope = _module_name(layer) if layer.tensors else (_node_scope(layer.node) or _clean(layer.node.name)
                                                           or layer.node.op_type.lower())
        names[i] = _unique(scope, used, layer.node.op_type.lower())
    for layer, name in zip(layers, names):
        value[layer.output] = name
    missing = [o for o in graph.outputs if o not in value]
    if missing:
        raise OnnxImportError(f"graph outputs {missing} are constants; supported: outputs computed from the inputs")
    outputs = [value[o] for o in graph.outputs]
    chain = (graph.batch_size is None and len(inputs) == 1 and len(outputs) == 1 and outputs[0] == names[-1]
             and all(layer.inputs == [layers[i - 1].output if i else graph.inputs[0]]
                     for i, layer in enumerate(layers))
             and names == [str(i) for i in range(len(names))])
    if chain:
        return nn.Sequential(*modules)
    return nn.Graph(inputs, [(n, m, [value[i] for i in layer.inputs]) for n, m, layer in zip(names, modules, layers)],
                    outputs, batch_size=graph.batch_size)
