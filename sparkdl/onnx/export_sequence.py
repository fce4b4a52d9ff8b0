"""ONNX exporters of the sequence layers, registered into :data:`sparkdl.onnx.export_ops.EXPORTERS`.

- :class:`~sparkdl.nn.Embedding` -> ``Gather`` (the graph input is int64 token ids);
- :class:`~sparkdl.nn.LSTM`, ``GRU``, ``RNN`` -> one ONNX node per layer, weights in ONNX's gate order, with
  the Transpose/Reshape glue of ``torch.onnx.export`` (its value is ``(output, state)``, so a model passes it
  on through :class:`~sparkdl.nn.RNNOutput`, exported as Slice/Transpose/Reshape);
- :class:`~sparkdl.nn.LayerNorm` -> ``LayerNormalization`` (opset 17);
- :class:`~sparkdl.nn.MultiheadAttention` and :class:`~sparkdl.nn.TransformerEncoderLayer` -> primitives
  (MatMul, Add, Reshape, Transpose, Gather, Mul, Softmax, LayerNormalization, Relu/Gelu), the computation of
  :meth:`sparkdl.nn.MultiheadAttention.forward` step by step on (N, L, E) arrays, so no shape is fixed but E
  (and L for the causal mask, a constant added to the scores). The projections are ``MatMul`` by the
  transposed weight (initializer ``<weight name>_t``) plus the bias, as ``torch.onnx.export`` writes a
  ``Linear`` on a 3-D input;
- the recurrent nodes' outputs of imported graphs, :class:`~sparkdl.nn.RecurrentPart`, so a fine-tuned imported
  network exports again (the generic nodes, :class:`~sparkdl.nn.OnnxOp`, in :mod:`sparkdl.onnx.export_generic`).
"""
from __future__ import annotations

import math

import numpy as np

from sparkdl import nn
from sparkdl.onnx.export_ops import EXPORTERS, _dense, _join, _param

__all__: list[str] = []  # exporters register themselves

#: For each ONNX gate block, the PyTorch block it comes from (LSTM i,o,f,c <- i,f,g,o; GRU z,r,h <- r,z,n).
_ONNX_ORDER = {"LSTM": [0, 3, 1, 2], "GRU": [1, 0, 2], "RNN": [0]}


def _embedding(m, path, x, shape, em):
    return em.node("Gather", [_param(em, m, path, "weight"), x], path, axis=0)


def _recurrent(m, path, x, shape, em):
    op, h = m.mode, m.hidden_size
    order = _ONNX_ORDER[op]

    def onnx_rows(w):
        return np.concatenate([w[k * h:(k + 1) * h] for k in order], axis=0)

    if m.batch_first:
        x = em.node("Transpose", [x], path, perm=[1, 0, 2])
    attrs = {"hidden_size": h, "direction": "bidirectional" if m.bidirectional else "forward"}
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    if op == "RNN":
        attrs["activations"] = [m.nonlinearity.capitalize()] * m.num_directions
    h_outs, c_outs = [], []
    for layer in range(m.num_layers):
        w, r, b = [], [], []
        for sfx in m._suffixes(layer):
            w_ih, w_hh, b_ih, b_hh = m._weights(sfx)
            w.append(onnx_rows(w_ih))
            r.append(onnx_rows(w_hh))
            b.append(np.concatenate([onnx_rows(b_ih), onnx_rows(b_hh)]))
        args = [x, em.tensor(_join(path, f"W_l{layer}"), np.stack(w)), em.tensor(_join(path, f"R_l{layer}"),
                                                                                 np.stack(r))]
        if m.use_bias:
            args.append(em.tensor(_join(path, f"B_l{layer}"), np.stack(b)))
        outs = em.node(op, args, path, num_outputs=3 if op == "LSTM" else 2, **attrs)
        y = em.node("Transpose", [outs[0]], path, perm=[0, 2, 1, 3])  # (T, D, N, H) -> (T, N, D, H)
        x = em.node("Reshape", [y, em.tensor(_join(path, "shape"), np.array([0, 0, -1]))], path)
        h_outs.append(outs[1])
        c_outs.append(outs[2] if op == "LSTM" else None)
    if m.batch_first:
        x = em.node("Transpose", [x], path, perm=[1, 0, 2])
    h_n = h_outs[0] if len(h_outs) == 1 else em.node("Concat", h_outs, path, axis=0)
    if op != "LSTM":
        return x, h_n
    return x, (h_n, c_outs[0] if len(c_outs) == 1 else em.node("Concat", c_outs, path, axis=0))


def _rnn_output(m, path, x, shape, em):
    out, state = x
    if m.select == "output":
        return out
    h_n = state[0] if isinstance(state, tuple) else state
    hn_shape = shape[1][0] if isinstance(state, tuple) else shape[1]
    d = shape[0][-1] // hn_shape[2]
    last = em.node("Slice", [h_n, em.tensor(_join(path, "starts"), np.array([-d])),
                             em.tensor(_join(path, "ends"), np.array([hn_shape[0]])),
                             em.tensor(_join(path, "axes"), np.array([0]))], path)
    last = em.node("Transpose", [last], path, perm=[1, 0, 2])  # (D, N, H) -> (N, D, H)
    return em.node("Reshape", [last, em.tensor(_join(path, "shape"), np.array([0, -1]))], path)


def _layer_norm(m, path, x, shape, em):
    if em.opset < 17:
        raise ValueError(f"sparkdl.onnx.save: {path} (LayerNorm) needs opset >= 17 (the LayerNormalization "
                         f"operator), got {em.opset}")
    ones = np.ones(m.normalized_shape)
    scale = _param(em, m, path, "weight") if m.elementwise_affine else em.tensor(_join(path, "weight"), ones)
    bias = _param(em, m, path, "bias") if m.elementwise_affine and m.use_bias else \
        em.tensor(_join(path, "bias"), np.zeros(m.normalized_shape))
    return em.node("LayerNormalization", [x, scale, bias], path, axis=-len(m.normalized_shape), epsilon=m.eps)


def _reshape(em, path, x, target):
    return em.node("Reshape", [x, em.tensor(_join(path, "shape"), np.array(target))], path)


def _attention(m, path, x, shape, em):
    """Self-attention of ``x`` in the layer's layout; only the causal mask needs the length L (batch_first)."""
    e, heads = m.embed_dim, m.num_heads
    t = m._tensors["parameters"]
    if m.causal and not m.batch_first:
        raise ValueError(f"sparkdl.onnx.save: {path} (MultiheadAttention) is causal and time-major (L, N, E): the "
                         "exported file's dynamic axis 0 would be L, and the causal mask needs a fixed L; export "
                         "a batch_first=True model")
    if not m.batch_first:
        x = em.node("Transpose", [x], path, perm=[1, 0, 2])  # (L, N, E) -> (N, L, E)
    qkv = _dense(em, path, x, t["in_proj_weight"], t.get("in_proj_bias"), "in_proj_weight")
    qkv = _reshape(em, path, qkv, [0, 0, 3, heads, e // heads])
    qkv = em.node("Transpose", [qkv], path, perm=[2, 0, 3, 1, 4])  # (3, N, heads, L, d)
    q, k, v = (em.node("Gather", [qkv, em.tensor(_join(path, "index"), np.array(i))], path, axis=0)
               for i in range(3))
    scores = em.node("MatMul", [q, em.node("Transpose", [k], path, perm=[0, 1, 3, 2])], path)
    scores = em.node("Mul", [scores, em.tensor(_join(path, "scale"), np.float32(1.0 / math.sqrt(e // heads)))],
                     path)
    if m.causal:
        length = shape[1]
        mask = np.triu(np.full((length, length), -np.inf, np.float32), 1)
        scores = em.node("Add", [scores, em.tensor(_join(path, "causal_mask"), mask)], path)
    p = em.node("Softmax", [scores], path, axis=-1)
    o = em.node("Transpose", [em.node("MatMul", [p, v], path)], path, perm=[0, 2, 1, 3])  # (N, L, heads, d)
    o = _reshape(em, path, o, [0, 0, e])
    y = _dense(em, path, o, t["out_proj.weight"], t.get("out_proj.bias"), "out_proj.weight")
    return y if m.batch_first else em.node("Transpose", [y], path, perm=[1, 0, 2])


def _transformer(m, path, x, shape, em):
    sub = {name: _join(path, name) for name in ("self_attn", "linear1", "linear2", "norm1", "norm2")}

    def linear(name, z):
        lin = getattr(m, name)
        return _dense(em, sub[name], z, lin.weight, lin.bias if lin.use_bias else None, "weight")

    def feed_forward(z):
        f = linear("linear1", z)
        f = em.node("Relu", [f], sub["linear1"]) if m.activation == "relu" else \
            EXPORTERS[nn.GELU](nn.GELU(), sub["linear1"], f, None, em)
        return linear("linear2", f)

    def norm(name, z):
        return _layer_norm(getattr(m, name), sub[name], z, None, em)

    def attention(z):
        return _attention(m.self_attn, sub["self_attn"], z, shape, em)

    if m.norm_first:
        z = em.node("Add", [x, attention(norm("norm1", x))], path)
        return em.node("Add", [z, feed_forward(norm("norm2", z))], path)
    z = norm("norm1", em.node("Add", [x, attention(x)], path))
    return norm("norm2", em.node("Add", [z, feed_forward(z)], path))


def _recurrent_part(m, path, x, shape, em):
    out, state = x
    if m.part == "Y":  # (T, N, D * H) -> (T, D, N, H)
        y = _reshape(em, path, out, [0, 0, m.num_directions, -1])
        return em.node("Transpose", [y], path, perm=[0, 2, 1, 3])
    full = (state[0] if m.part == "Y_h" else state[1]) if isinstance(state, tuple) else state
    d, start = m.num_directions, m.layer * m.num_directions
    rows = (shape[1][0 if m.part == "Y_h" else 1] if isinstance(state, tuple) else shape[1])[0]
    if rows == d:  # a one-layer module: the whole state
        return full
    return em.node("Slice", [full, em.tensor(_join(path, "starts"), np.array([start])),
                             em.tensor(_join(path, "ends"), np.array([start + d])),
                             em.tensor(_join(path, "axes"), np.array([0]))], path)


EXPORTERS.update({nn.RecurrentPart: _recurrent_part})
EXPORTERS.update({nn.Embedding: _embedding, nn.LSTM: _recurrent, nn.GRU: _recurrent, nn.RNN: _recurrent,
                  nn.RNNOutput: _rnn_output, nn.LayerNorm: _layer_norm, nn.MultiheadAttention: _attention,
                  nn.TransformerEncoderLayer: _transformer})
