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
    batch_size : int, optional
        The one batch size the nodes compute, for a graph whose nodes fix it (an ONNX file exported with static
        shapes, where the exporter folded the batch into constant reshape targets; :func:`sparkdl.onnx.load`).
        Evaluation at another batch size runs in chunks of ``batch_size`` rows, the last chunk padded with
        copies of its last row whose outputs are dropped (exact when each sample's output depends on that sample
        only, as in every network evaluated per sample); training needs exactly ``batch_size`` rows.

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
        topological order or unknown names), an unknown output, or a module instance used twice; a
        ``batch_size`` that is not a positive int. In ``forward(training=True)`` of a graph with a
        ``batch_size``: inputs with another number of rows. In ``backward``: after an evaluation run in chunks.

    References
    ----------
    BigDL ``nn.Graph`` (``Graph(input, output)`` over module nodes); Keras functional models;
    ONNX ``GraphProto`` (topologically sorted nodes).
    """

    def __init__(self, inputs, nodes, outputs, batch_size=None):
        super().__init__()
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise ValueError(f"Graph: batch_size must be None or a positive int, got {batch_size!r}")
        self.batch_size = batch_size
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
        config = {"inputs": list(self.input_names), "outputs": list(self.output_names),
                  "nodes": [[n, list(a)] for n, a in self.node_inputs.items()]}
        if self.batch_size is not None:
            config["batch_size"] = self.batch_size
        return config

    @classmethod
    def from_config(cls, config, children=None):
        children = dict(children or {})
        nodes = config.get("nodes")
        if not isinstance(nodes, list) or not all(isinstance(n, list) and len(n) == 2 for n in nodes):
            raise ValueError(f"Graph.from_config: 'nodes' must be a list of [name, inputs] pairs, got {nodes!r}")
        names = [n for n, _ in nodes]
        if names != list(children):
            raise ValueError(f"Graph.from_config: nodes {names} do not match the children {list(children)}")
        return cls(config.get("inputs"), [(n, children[n], a) for n, a in nodes], config.get("outputs"),
                   batch_size=config.get("batch_size"))

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

    def _rows(self, xs) -> int | None:
        """The inputs' number of rows when it differs from a fixed ``batch_size`` (None: run them as they are)."""
        if self.batch_size is None:
            return None
        rows = {name: (a.shape[0] if a.ndim else None) for name, a in zip(self.input_names, xs)}
        if len(set(rows.values())) != 1 or None in rows.values():
            raise ValueError(f"Graph: the inputs' rows {rows} differ; a graph of batch_size={self.batch_size} "
                             "needs one batch axis 0 on every input")
        n = next(iter(rows.values()))
        return None if n == self.batch_size else n

    def _chunked(self, run, xs, n: int):
        """``run`` over chunks of ``batch_size`` rows of ``xs``, the last padded by repeating its last row (a
        batch of 0 rows runs one chunk of zeros); the outputs' first ``n`` rows, concatenated."""
        b, parts = self.batch_size, []
        for start in range(0, max(n, 1), b):
            chunk = [a[start:start + b] if n else np.zeros((b,) + a.shape[1:], a.dtype) for a in xs]
            pad = b - len(chunk[0])
            if pad:
                chunk = [np.concatenate([c, np.repeat(c[-1:], pad, axis=0)]) for c in chunk]
            ys = run(chunk[0] if len(chunk) == 1 else tuple(chunk))
            parts.append(ys if isinstance(ys, tuple) else (ys,))
        ys = tuple(np.concatenate([p[i] for p in parts])[:n] for i in range(len(parts[0])))
        return ys[0] if len(ys) == 1 else ys

    def forward(self, x, *, training=False, rng=None):
        xs = self._inputs(x)
        n = self._rows(xs)
        if n is not None:
            if training:
                raise ValueError(f"Graph: this graph computes batches of exactly {self.batch_size} rows "
                                 f"(batch_size, e.g. an ONNX export with static shapes); got {n} rows in training. "
                                 "Train with batches of that size, or export the model with a dynamic batch axis "
                                 "(torch.onnx.export(..., dynamic_shapes=...) or dynamic_axes=...)")
            return self._chunked(lambda c: self.forward(c, rng=rng)[0], xs, n), None
        values = dict(zip(self.input_names, xs))
        caches = {}
        for name, module in self._modules.items():
            args = [values[a] for a in self.node_inputs[name]]
            values[name], caches[name] = module.forward(args[0] if len(args) == 1 else tuple(args),
                                                        training=training, rng=rng)
        ys = tuple(values[o] for o in self.output_names)
        return (ys[0] if len(ys) == 1 else ys), (caches, [(a.shape, a.dtype) for a in xs])

    def infer(self, x):
        """Nodes in order, each Conv2d (-> BatchNorm2d) (-> Add) (-> activation) chain whose inner values nothing else
        uses run as one folded convolution (:func:`sparkdl.nn.fusion.graph_runs`)."""
        xs = self._inputs(x)
        n = self._rows(xs)
        if n is not None:
            return self._chunked(self.infer, xs, n)
        values = dict(zip(self.input_names, xs))
        runs = {run[-1]: run for run in graph_runs(self).values()}  # computed where the run's last node is
        inner = {n for run in runs.values() for n in run[:-1]}
        for name, module in self._modules.items():
            if name in inner:  # computed with its run
                continue
            if name in runs:
                run = runs[name]
                residual = [values[a] for n in run[1:] for a in self.node_inputs[n] if a not in run]
                values[name] = run_fused([self._modules[n] for n in run], values[self.node_inputs[run[0]][0]],
                                         *residual)
            else:
                args = [values[a] for a in self.node_inputs[name]]
                values[name] = module.infer(args[0] if len(args) == 1 else tuple(args))
        ys = tuple(values[o] for o in self.output_names)
        return ys[0] if len(ys) == 1 else ys

    def backward(self, cache, grad_y, grad_params):
        if cache is None:
            raise ValueError(f"Graph: no backward through an evaluation run in chunks of batch_size="
                             f"{self.batch_size}; run forward on exactly {self.batch_size} rows")
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
        fixed = "" if self.batch_size is None else f", batch_size={self.batch_size}"
        return (f"Graph(inputs={self.input_names}, outputs={self.output_names}{fixed}\n" + "\n".join(lines)
                + "\n)")
