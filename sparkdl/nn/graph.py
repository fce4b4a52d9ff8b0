"""The :class:`Graph` container: any directed acyclic graph of modules over one flat parameter vector.

A graph has named inputs, named nodes (each a module applied to earlier values) and named outputs::

    g = nn.Graph(inputs="x",
                 nodes=[("conv", nn.Conv2d(3, 8, 3, padding=1), "x"),
                        ("relu", nn.ReLU(), "conv"),
                        ("proj", nn.Conv2d(3, 8, 1), "x"),
                        ("add", nn.Add(), ["relu", "proj"])],      # a skip connection
                 outputs="add")

A value may feed any number of nodes and outputs (its gradients are summed in backward). A node with one
input calls ``module.forward(array)``; a node with k >= 2 inputs calls ``module.forward((x_1, ..., x_k))``,
so it must be a merge layer (:mod:`sparkdl.nn.merge`), a multi-input Graph or a module that declares its
``num_inputs`` (:class:`~sparkdl.nn.OnnxOp`). Node modules are children
named by their node names, in node order, so parameter names are ``<node>.<tensor>`` (node names may
contain dots, e.g. ``layer1.0.conv1``, which gives PyTorch's ``state_dict`` keys of nested modules).
"""
from __future__ import annotations

import re

import numpy as np

from sparkdl.nn.fusion import graph_runs, run_fused
from sparkdl.nn.merge import Add, Concatenate
from sparkdl.nn.module import Module

__all__ = ["Graph"]

_NAME = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$")


def _names(what: str, value) -> list[str]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        raise TypeError(f"Graph: {what} must be a name or a non-empty list of names (str), got {value!r}")
    return list(names)


def _arity(module: Module):
    """How many inputs ``module`` takes: 1, an exact count (a Graph), or None for 'two or more' (merges)."""
    if isinstance(module, Graph):
        return len(module.input_names)
    if isinstance(module, (Add, Concatenate)):
        return None
    return int(vars(module).get("num_inputs", 1))  # a module that declares its input count (nn.OnnxOp)


def _sum_grads(a, b):
    """a + b for gradients that may be nested tuples with None parts (a recurrent layer's (output, state))."""
    if a is None or b is None:
        return b if a is None else a
    if isinstance(a, tuple):
        return tuple(_sum_grads(x, y) for x, y in zip(a, b))
    return a + b


class Graph(Module):
    """A directed acyclic graph of modules with named inputs, nodes and outputs.

    Parameters
    ----------
    inputs : str or list of str
        Names of the graph inputs, in the order ``forward`` receives them.
    nodes : list of (name, module, inputs)
        In topological order: each node's ``inputs`` (a name or a list of names) are graph inputs or
        earlier nodes. Each module instance appears once (a module used twice would need shared weights).
    outputs : str or list of str
        Names of the values returned (nodes or graph inputs; repeats allowed).

    Shapes
    ------
    - input: one array if the graph has one input, else a tuple of arrays in ``inputs`` order
    - output: one array if the graph has one output, else a tuple in ``outputs`` order
    - parameters: the node modules' parameters in node order, named ``<node>.<name>``

    Notes
    -----
    ``backward(cache, grad_y, grad_params)`` takes one gradient per output (an array, or a tuple for several
    outputs) and returns one per input (likewise). Gradients of a value used several times are summed (part
    by part for a recurrent layer's ``(output, state)``; a None part or gradient counts as zero);
    a node whose value reaches no output gets a zero parameter gradient and is not run backward; an input
    that reaches no output gets a zero gradient.

    Raises
    ------
    TypeError
        Names that are not strings, a node that is not a (name, Module, inputs) triple, a multi-input node
        whose module is not a merge layer, a Graph or an ``OnnxOp`` with as many inputs (or the converse).
    ValueError
        A malformed or repeated name, an input that is not a graph input or an earlier node (nodes out of
        topological order or unknown names), an unknown output, or a module instance used twice.

    References
    ----------
    BigDL ``nn.Graph`` (``Graph(input, output)`` over module nodes); Keras functional models;
    ONNX ``GraphProto`` (topologically sorted nodes).
    """

    def __init__(self, inputs, nodes, outputs):
        super().__init__()
        self.input_names = _names("inputs", inputs)
        self.output_names = _names("outputs", outputs)
        if not isinstance(nodes, (list, tuple)):
            raise TypeError(f"Graph: nodes must be a list of (name, module, inputs), got {type(nodes).__name__}")
        known = {}
        for n in self.input_names:
            self._check_new_name(n, known, "input")
            known[n] = "input"
        self.node_inputs: dict[str, list[str]] = {}
        seen, children = {}, []
        for i, node in enumerate(nodes):
            if not (isinstance(node, (tuple, list)) and len(node) == 3):
                raise TypeError(f"Graph: nodes[{i}] must be a (name, module, inputs) triple, got {node!r}")
            name, module, args = node
            self._check_new_name(name, known, f"nodes[{i}]")
            args = _names(f"node {name!r} inputs", args)
            if not isinstance(module, Module):
                raise TypeError(f"Graph: node {name!r} must hold a sparkdl.nn.Module, got {type(module).__name__}")
            if id(module) in seen:
                raise ValueError(f"Graph: node {name!r} reuses the module instance of node {seen[id(module)]!r}; "
                                 "give each node its own module (shared weights are not supported)")
            seen[id(module)] = name
            for a in args:
                if a not in known:
                    raise ValueError(f"Graph: node {name!r} takes {a!r}, which is not a graph input or an earlier "
                                     f"node; list nodes in topological order (defined so far: {list(known)})")
            arity = _arity(module)
            if (arity is None and len(args) < 2) or (arity is not None and len(args) != arity):
                want = "2 or more inputs" if arity is None else f"{arity} input(s)"
                raise TypeError(f"Graph: node {name!r} ({type(module).__name__}) takes {want}, got {len(args)} "
                                f"{args}; join several values with a merge layer (nn.Add, nn.Concatenate)")
            known[name] = "node"
            self.node_inputs[name] = args
            children.append((name, module))
        self._add_modules(children)  # one re-pack of the flat vectors for all nodes
        unknown = [o for o in self.output_names if o not in known]
        if unknown:
            raise ValueError(f"Graph: outputs {unknown} are not graph inputs or nodes (known: {list(known)})")

    @staticmethod
    def _check_new_name(name, known, where):
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"Graph: {where} name must be dot-separated words of letters, digits and '_' "
                             f"(e.g. 'conv1' or 'layer1.0.conv1'), got {name!r}")
        if name in known:
            raise ValueError(f"Graph: name {name!r} is used twice ({known[name]} and {where})")

    # ------------------------------------------------------------------ persistence
    def get_config(self):
        return {"inputs": list(self.input_names), "outputs": list(self.output_names),
                "nodes": [[n, list(a)] for n, a in self.node_inputs.items()]}

    @classmethod
    def from_config(cls, config, children=None):
        children = dict(children or {})
        nodes = config.get("nodes")
        if not isinstance(nodes, list) or not all(isinstance(n, list) and len(n) == 2 for n in nodes):
            raise ValueError(f"Graph.from_config: 'nodes' must be a list of [name, inputs] pairs, got {nodes!r}")
        names = [n for n, _ in nodes]
        if names != list(children):
            raise ValueError(f"Graph.from_config: nodes {names} do not match the children {list(children)}")
        return cls(config.get("inputs"), [(n, children[n], a) for n, a in nodes], config.get("outputs"))

    # ------------------------------------------------------------------ compute
    def _unpack(self, x, what: str, count: int) -> tuple:
        if count == 1:
            return (x,)
        if not isinstance(x, (tuple, list)) or len(x) != count:
            got = f"{len(x)} arrays" if isinstance(x, (tuple, list)) else f"a {type(x).__name__}"
            raise TypeError(f"Graph: {what} must be a tuple of {count} arrays, got {got}")
        return tuple(x)

    def _inputs(self, x) -> tuple:
        """The graph inputs as a tuple of arrays (TypeError otherwise)."""
        xs = self._unpack(x, f"the input ({self.input_names})", len(self.input_names))
        for name, a in zip(self.input_names, xs):
            if not isinstance(a, np.ndarray):
                raise TypeError(f"Graph: input {name!r} must be a numpy.ndarray, got {type(a).__name__}")
        return xs

    def forward(self, x, *, training=False, rng=None):
        xs = self._inputs(x)
        values = dict(zip(self.input_names, xs))
        caches = {}
        for name, module in self._modules.items():
            args = [values[a] for a in self.node_inputs[name]]
            values[name], caches[name] = module.forward(args[0] if len(args) == 1 else tuple(args),
                                                        training=training, rng=rng)
        ys = tuple(values[o] for o in self.output_names)
        return (ys[0] if len(ys) == 1 else ys), (caches, [(a.shape, a.dtype) for a in xs])

    def infer(self, x):
        """Nodes in order, each Conv2d (-> BatchNorm2d) (-> activation) chain whose inner values nothing else uses
        run as one folded convolution (:func:`sparkdl.nn.fusion.graph_runs`)."""
        xs = self._inputs(x)
        values = dict(zip(self.input_names, xs))
        runs = graph_runs(self)
        inner = {n for run in runs.values() for n in run[1:]}
        for name, module in self._modules.items():
            if name in inner:  # computed with the run's convolution
                continue
            args = [values[a] for a in self.node_inputs[name]]
            if name in runs:
                values[runs[name][-1]] = run_fused([self._modules[n] for n in runs[name]], args[0])
            else:
                values[name] = module.infer(args[0] if len(args) == 1 else tuple(args))
        ys = tuple(values[o] for o in self.output_names)
        return ys[0] if len(ys) == 1 else ys

    def backward(self, cache, grad_y, grad_params):
        caches, input_specs = cache
        grads: dict[str, np.ndarray] = {}

        def accumulate(name, g):
            if g is not None:  # None: no gradient (integer inputs, e.g. token ids or shapes)
                grads[name] = g if name not in grads else _sum_grads(grads[name], g)

        for name, g in zip(self.output_names, self._unpack(grad_y, "grad_y", len(self.output_names))):
            accumulate(name, g)
        for name, module in reversed(self._modules.items()):
            gp = self.child_grad(grad_params, name)
            if name not in grads:  # reaches no output
                gp[...] = 0
                continue
            gx = module.backward(caches[name], grads.pop(name), gp)
            args = self.node_inputs[name]
            for a, g in zip(args, (gx,) if len(args) == 1 else gx):
                accumulate(a, g)
        gxs = tuple(grads[n] if n in grads else np.zeros(shape, dtype)
                    for n, (shape, dtype) in zip(self.input_names, input_specs))
        return gxs[0] if len(gxs) == 1 else gxs

    def __repr__(self) -> str:
        lines = [f"  ({name}): " + repr(m).replace("\n", "\n  ") + f" <- {self.node_inputs[name]}"
                 for name, m in self._modules.items()]
        return (f"Graph(inputs={self.input_names}, outputs={self.output_names}\n" + "\n".join(lines) + "\n)")
