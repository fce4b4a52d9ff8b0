"""Converters of the sequence operators: ``Gather`` of a weight table (-> :class:`~sparkdl.nn.Embedding`),
``LSTM``/``GRU``/``RNN`` (-> the recurrent layers) and ``LayerNormalization`` (-> :class:`~sparkdl.nn.LayerNorm`).

ONNX recurrent nodes hold all directions' weights in one tensor each, ``W`` (D, G*H, D_in), ``R`` (D, G*H, H)
and ``B`` (D, 2*G*H) = [W_b, R_b], with the gates in ONNX's order: LSTM ``i, o, f, c`` and GRU ``z, r, h``,
where PyTorch (and sparkdl) use ``i, f, g, o`` and ``r, z, n``. ``torch.onnx.export`` writes one node per layer
of a stacked network, joined by a Squeeze (one direction) or Transpose + Reshape (two): such a stack becomes one
module with ``num_layers`` layers (parameters named as torch's, ``weight_ih_l1`` ...). The nodes' outputs ``Y``
(T, D, N, H), ``Y_h`` and ``Y_c`` (D, N, H) are taken from the module's ``(output, state)`` by
:class:`~sparkdl.nn.RecurrentPart` nodes; the glue torch writes around the stack imports as generic nodes.
"""
from __future__ import annotations

import numpy as np

from sparkdl import nn
from sparkdl.onnx.converters import Layer, converter, describe
from sparkdl.onnx.generic import generic
from sparkdl.onnx.reader import tensor_array

__all__: list[str] = []  # converters register themselves

#: Gate blocks of ONNX's weight rows in PyTorch's gate order, and PyTorch's class, per ONNX operator.
_GATES = {"LSTM": ([0, 2, 3, 1], nn.LSTM), "GRU": ([1, 0, 2], nn.GRU), "RNN": ([0], nn.RNN)}
#: Default activations per direction (the only ones the sparkdl layers compute).
_DEFAULT_ACTIVATIONS = {"LSTM": [["Sigmoid", "Tanh", "Tanh"]], "GRU": [["Sigmoid", "Tanh"]],
                        "RNN": [["Tanh"], ["Relu"]]}
_COMMON = {"activation_alpha": None, "activation_beta": None, "activations": None, "clip": None,
           "direction": "forward", "hidden_size": None, "layout": 0}


@converter("Gather", attrs={"axis": 0})
def _gather(node, a, ctx):
    """A constant 2-D float table indexed along axis 0 by computed indices is an Embedding; else generic."""
    table = ctx.graph.constants.get(node.input[0])
    if table is not None and not ctx.is_const(node.input[1]) and a["axis"] == 0 and table.ndim == 2 \
            and table.dtype.kind == "f":
        v, e = table.shape
        return ctx.layer(node, nn.Embedding, {"num_embeddings": int(v), "embedding_dim": int(e)},
                         inputs=[node.input[1]], weight=(np.asarray(table, np.float32), node.input[0]))
    return generic(node, ctx, {"axis": int(a["axis"])})


def _is_zeros(ctx, name: str, depth: int = 0) -> bool:
    """Whether ``name`` is all zeros: a zero constant, or a ConstantOfShape(0) reshaped/sliced/expanded."""
    if name in ctx.graph.constants:
        return not np.any(ctx.graph.constants[name])
    node = ctx.producers.get(name)
    if node is None or depth > 32:
        return False
    if node.op_type == "ConstantOfShape":
        value = [a for a in node.attribute if a.name == "value"]
        return not value or not np.any(tensor_array(value[0].t, describe(node)))
    if node.op_type in ("Expand", "Slice", "Reshape", "Unsqueeze", "Squeeze", "Identity", "Cast", "Transpose"):
        return _is_zeros(ctx, node.input[0], depth + 1)
    return False


def _input(node, index: int) -> str:
    return node.input[index] if index < len(node.input) else ""


def _check_recurrent(node, a, ctx, op: str) -> tuple[int, str]:
    """Every attribute and optional input a sparkdl layer cannot compute fails here; returns (D, nonlinearity)."""
    supported = "supported: the PyTorch cell (default activations, no clip, layout=0, direction forward or " \
                "bidirectional, zero initial states, no sequence_lens" + (", input_forget=0, no peepholes P)"
                                                                         if op == "LSTM" else ")")
    if a["direction"] not in ("forward", "bidirectional"):
        ctx.fail(node, f"direction={a['direction']!r}; {supported}")
    d = 2 if a["direction"] == "bidirectional" else 1
    acts = a["activations"]
    nonlinearity = "tanh"
    if acts is not None:
        per = [acts[i * len(acts) // d:(i + 1) * len(acts) // d] for i in range(d)]
        if len(acts) % d or any(p != per[0] for p in per) or per[0] not in _DEFAULT_ACTIVATIONS[op]:
            ctx.fail(node, f"activations={acts}; {supported}")
        nonlinearity = per[0][0].lower() if op == "RNN" else "tanh"
    for attr in ("activation_alpha", "activation_beta", "clip"):
        if a[attr] is not None:
            ctx.fail(node, f"{attr}={a[attr]}; {supported}")
    if a["layout"] != 0:
        ctx.fail(node, f"layout={a['layout']} (batch-major); {supported}")
    if op == "LSTM" and a["input_forget"]:
        ctx.fail(node, f"input_forget={a['input_forget']} (coupled input and forget gates); {supported}")
    if op == "GRU" and a["linear_before_reset"] != 1:
        ctx.fail(node, f"linear_before_reset={a['linear_before_reset']}: the reset gate applied before the "
                       "recurrent matrix product, which PyTorch's GRU (and sparkdl's) does not compute; supported: "
                       "linear_before_reset=1 (what torch.onnx.export writes)")
    if _input(node, 4):
        ctx.fail(node, f"sequence_lens {_input(node, 4)!r} is given (a packed sequence); {supported}")
    if op == "LSTM" and _input(node, 7):
        ctx.fail(node, f"peephole weights P {_input(node, 7)!r}; {supported}")
    for index, what in ((5, "initial_h"), (6, "initial_c")):
        name = _input(node, index)
        if name and (op == "LSTM" or index == 5) and not _is_zeros(ctx, name):
            ctx.fail(node, f"{what} {name!r} is not a zero tensor; {supported} (torch's default h0=None)")
    return d, nonlinearity


def _squeeze_axes(ctx, node):
    given = [a.ints for a in node.attribute if a.name == "axes"]
    if given:
        return list(given[0])
    return [int(v) for v in np.asarray(ctx.graph.constants.get(_input(node, 1), [-99])).reshape(-1)]


def _next_layer(ctx, node, d: int):
    """The recurrent node that reads ``node``'s Y only, through torch's inter-layer glue (Squeeze(axes=[1]) for
    one direction, Transpose(0, 2, 1, 3) + Reshape([0, 0, -1]) for two), and the glue nodes; else (None, [])."""
    glue, value = [], node.output[0]
    for want in (["Squeeze"] if d == 1 else ["Transpose", "Reshape"]) + [node.op_type]:
        users = ctx.consumers.get(value, [])
        if len(users) != 1 or value in ctx.graph.outputs or users[0].op_type != want or users[0].input[0] != value:
            return None, []
        user = users[0]
        if want == "Squeeze" and _squeeze_axes(ctx, user) != [1]:
            return None, []
        if want == "Transpose" and [list(a.ints) for a in user.attribute if a.name == "perm"] != [[0, 2, 1, 3]]:
            return None, []
        if want == "Reshape" and np.asarray(ctx.graph.constants.get(user.input[1], [])).tolist() != [0, 0, -1]:
            return None, []
        if want == node.op_type:
            return user, glue
        glue.append(user)
        value = user.output[0]
    return None, []


def _recurrent(op: str):
    order, cls = _GATES[op]

    def reorder(w, h):
        return np.concatenate([w[k * h:(k + 1) * h] for k in order], axis=0).astype(np.float32)

    def weights(node, a, ctx, d, layer):
        w, r, b = ctx.const(node, 1, "W"), ctx.const(node, 2, "R"), ctx.const(node, 3, "B")
        g = len(order)
        h = int(a["hidden_size"] or r.shape[-1])
        if w.ndim != 3 or w.shape[:2] != (d, g * h) or r.shape != (d, g * h, h) or (
                b is not None and b.shape != (d, 2 * g * h)):
            ctx.fail(node, f"W {w.shape}, R {r.shape}, B {None if b is None else b.shape} do not fit hidden_size={h}"
                           f", {d} direction(s), {g} gate(s): expected ({d}, {g * h}, D_in), ({d}, {g * h}, {h}), "
                           f"({d}, {2 * g * h})")
        tensors = {}
        for k, sfx in enumerate([f"_l{layer}", f"_l{layer}_reverse"][:d]):
            tensors["weight_ih" + sfx] = (reorder(w[k], h), node.input[1] if k == 0 else None)
            tensors["weight_hh" + sfx] = (reorder(r[k], h), node.input[2] if k == 0 else None)
            if b is not None:
                tensors["bias_ih" + sfx] = (reorder(b[k][:g * h], h), node.input[3] if k == 0 else None)
                tensors["bias_hh" + sfx] = (reorder(b[k][g * h:], h), None)
        return tensors, (int(w.shape[2]), h, b is not None)

    def convert(node, a, ctx):
        """One node, or a stack of nodes joined by torch's glue, is one module (num_layers = nodes)."""
        from sparkdl.onnx.converters import CONVERTERS, read_attributes
        d, nonlinearity = _check_recurrent(node, a, ctx, op)
        x = ctx.activation(node, 0)
        tensors, (input_size, h, bias) = weights(node, a, ctx, d, 0)
        nodes = [node]
        while True:
            nxt, glue = _next_layer(ctx, nodes[-1], d)
            if nxt is None:
                break
            na = read_attributes(nxt, CONVERTERS[op], ctx.opset)
            more, (size, nh, nbias) = weights(nxt, na, ctx, d, len(nodes))
            if _check_recurrent(nxt, na, ctx, op) != (d, nonlinearity) or (size, nh, nbias) != (d * h, h, bias):
                break
            tensors.update(more)
            for n in glue + [nxt]:
                ctx.absorb(n)
            nodes.append(nxt)
        config = {"input_size": input_size, "hidden_size": h, "num_layers": len(nodes), "bias": bias,
                  "bidirectional": d == 2}
        if op == "RNN":
            config["nonlinearity"] = nonlinearity
        state = f"{node.output[0] or node.name}:state"
        layers = [ctx.layer(node, cls, config, inputs=[x], output=state, **tensors)]
        for layer, n in enumerate(nodes):
            for k, part in enumerate(["Y", "Y_h", "Y_c"][:len(n.output)]):
                out = n.output[k]
                if out and (out in ctx.consumers or out in ctx.graph.outputs) and (k or n is nodes[-1]):
                    layers.append(Layer(node, nn.RecurrentPart, {"part": part, "num_directions": d,
                                                                 "layer": layer}, [state], out))
        return layers
    return convert


converter("LSTM", attrs={**_COMMON, "input_forget": 0})(_recurrent("LSTM"))
converter("GRU", attrs={**_COMMON, "linear_before_reset": 0})(_recurrent("GRU"))
converter("RNN", attrs=dict(_COMMON))(_recurrent("RNN"))


@converter("LayerNormalization", attrs={"axis": -1, "epsilon": 1e-5, "stash_type": 1})
def _layer_norm(node, a, ctx):
    x = ctx.activation(node, 0)
    scale, bias = ctx.const(node, 1, "Scale"), ctx.const(node, 2, "B")
    shape = ctx.graph.shapes.get(x)
    k = scale.ndim
    rank = len(shape) if shape is not None else None
    axis = a["axis"] if a["axis"] < 0 or rank is None else a["axis"] - rank
    if axis != -k or (rank is not None and shape[rank - k:] != scale.shape and None not in shape[rank - k:]):
        ctx.fail(node, f"axis={a['axis']} with Scale of shape {scale.shape} on an input of shape {shape}; "
                       "supported: normalising over the trailing axes that Scale spans (axis = -Scale.ndim)")
    if bias is not None and bias.shape != scale.shape:
        ctx.fail(node, f"B has shape {bias.shape}; supported: the shape of Scale {scale.shape}")
    tensors = {"weight": (np.asarray(scale, np.float32), node.input[1])}
    if bias is not None:
        tensors["bias"] = (np.asarray(bias, np.float32), node.input[2])
    config = {"normalized_shape": [int(s) for s in scale.shape], "eps": float(a["epsilon"]),
              "bias": bias is not None}
    return ctx.layer(node, nn.LayerNorm, config, inputs=[x], **tensors)
