"""The Transformer encoder: :class:`TransformerEncoderLayer` (self-attention + feed-forward, residuals and
LayerNorm, post- or pre-norm) and :class:`TransformerEncoder` (a stack of them with an optional final norm),
children named as in PyTorch."""
from __future__ import annotations

import numbers

import numpy as np

from sparkdl.kernels import activation as KA
from sparkdl.nn._checks import check_bool, check_input, check_positive_int
from sparkdl.nn.attention import MultiheadAttention
from sparkdl.nn.containers import Sequential
from sparkdl.nn.dropout import Dropout
from sparkdl.nn.layer_norm import LayerNorm
from sparkdl.nn.linear import Linear
from sparkdl.nn.module import Module

__all__ = ["TransformerEncoderLayer", "TransformerEncoder"]

#: activation -> (dtype -> (forward, backward) kernels, whether backward reads the output rather than the input)
_ACTIVATIONS = {"relu": (lambda dtype: (KA.relu_forward, KA.relu_backward), True), "gelu": (KA.gelu_kernels, False)}


class TransformerEncoderLayer(Module):
    r"""One Transformer encoder layer (Vaswani et al., 2017).

    Post-norm (default): :math:`z = \mathrm{LN}_1(x + \mathrm{SA}(x))`,
    :math:`y = \mathrm{LN}_2(z + \mathrm{FF}(z))`; pre-norm (``norm_first``):
    :math:`z = x + \mathrm{SA}(\mathrm{LN}_1(x))`, :math:`y = z + \mathrm{FF}(\mathrm{LN}_2(z))`; with
    :math:`\mathrm{SA}` = dropout1 ∘ self_attn and
    :math:`\mathrm{FF}(z)` = dropout2(linear2(dropout(act(linear1(z))))).

    Parameters
    ----------
    d_model : int
        Model width E.
    nhead : int
        Attention heads; must divide ``d_model``.
    dim_feedforward : int, default 2048
        Hidden width F of the feed-forward network.
    dropout : float, default 0.1
        Dropout probability of every dropout (attention weights, feed-forward, residual branches).
    activation : {'relu', 'gelu'}, default 'relu'
        Feed-forward activation.
    layer_norm_eps : float, default 1e-5
        LayerNorm epsilon.
    batch_first : bool, default False
        Input (N, L, E) if True, else (L, N, E).
    norm_first : bool, default False
        Pre-norm instead of post-norm.
    bias : bool, default True
        Biases in the linear layers, the attention and the LayerNorms.
    causal : bool, default False
        Always apply a causal attention mask (see :mod:`sparkdl.nn.attention`).

    Shapes
    ------
    - input: (L, N, E), or (N, L, E) with ``batch_first``; output: same shape
    - children ``self_attn`` (:class:`MultiheadAttention`), ``linear1`` (E → F), ``linear2`` (F → E),
      ``norm1``/``norm2`` (:class:`LayerNorm` (E)), ``dropout``/``dropout1``/``dropout2``; parameter names
      therefore equal ``torch.nn.TransformerEncoderLayer``'s state-dict keys.

    Raises
    ------
    TypeError, ValueError
        Bad constructor arguments; an input of the wrong dtype, rank or width; malformed masks.

    Notes
    -----
    :meth:`forward` also takes ``src_key_padding_mask`` (N, L), ``src_mask`` and ``is_causal`` as keyword
    arguments (PyTorch's names; see :func:`sparkdl.nn.attention.attention_mask`). Every dropout draws one seed
    from the ``rng`` passed to forward, in a fixed order, so a seeded step is reproducible; masks follow the rule
    of :class:`~sparkdl.nn.Dropout` with the sample axis N as the row axis (also for (L, N, E) inputs).

    References
    ----------
    Vaswani et al., 2017, "Attention Is All You Need"; Xiong et al., 2020, "On Layer Normalization in the
    Transformer Architecture" (pre-norm); ``torch.nn.TransformerEncoderLayer``.
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, causal: bool = False):
        super().__init__()
        name = "TransformerEncoderLayer"
        self.d_model = check_positive_int(name, "d_model", d_model)
        self.dim_feedforward = check_positive_int(name, "dim_feedforward", dim_feedforward)
        if activation not in _ACTIVATIONS:
            raise ValueError(f"{name}: activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        norm_first = check_bool(name, "norm_first", norm_first)
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) or not 0 <= dropout < 1:
            raise ValueError(f"{name}: dropout must be a number in [0, 1), got {dropout!r}")
        self.activation, self.norm_first = activation, bool(norm_first)
        self.add_module("self_attn", MultiheadAttention(d_model, nhead, dropout, bias, batch_first, causal))
        self.add_module("linear1", Linear(d_model, dim_feedforward, bias))
        self.add_module("dropout", Dropout(dropout))
        self.add_module("linear2", Linear(dim_feedforward, d_model, bias))
        self.add_module("norm1", LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        self.add_module("norm2", LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        self.add_module("dropout1", Dropout(dropout))
        self.add_module("dropout2", Dropout(dropout))

    @classmethod
    def from_config(cls, config, children=None):
        """Rebuild from :meth:`get_config` (the constructor creates the children itself)."""
        return cls(**config)

    def _drop(self, layer, a, lead, training, rng):
        """A Dropout child on (rows, F) activations, viewed as (N, L, F) or (L, N, F) so that the mask's rows are
        the samples (see :class:`~sparkdl.nn.Dropout`)."""
        y, c = layer.forward(a.reshape(*lead, a.shape[-1]), training=training, rng=rng,
                             batch_axis=0 if self.self_attn.batch_first else 1)
        return y.reshape(a.shape), c

    @staticmethod
    def _drop_backward(layer, cache, g, lead):
        return layer.backward(cache, g.reshape(*lead, g.shape[-1]), None).reshape(g.shape)

    def _ff(self, z, lead, training, rng):
        kernels, from_output = _ACTIVATIONS[self.activation]
        h, c1 = self.linear1.forward(z, training=training, rng=rng)
        a = kernels(h.dtype)[0](h.reshape(-1)).reshape(h.shape)
        ad, c2 = self._drop(self.dropout, a, lead, training, rng)
        f, c3 = self.linear2.forward(ad, training=training, rng=rng)
        f, c4 = self._drop(self.dropout2, f, lead, training, rng)
        return f, (c1, a if from_output else h, c2, c3, c4, lead)

    def _ff_backward(self, cache, g, grad_params):
        c1, act_in, c2, c3, c4, lead = cache
        bwd = _ACTIVATIONS[self.activation][0](act_in.dtype)[1]
        g = self._drop_backward(self.dropout2, c4, g, lead)
        g = self.linear2.backward(c3, g, self.child_grad(grad_params, "linear2"))
        g = self._drop_backward(self.dropout, c2, g, lead)
        g = bwd(act_in.reshape(-1), np.ascontiguousarray(g).reshape(-1)).reshape(g.shape)
        return self.linear1.backward(c1, g, self.child_grad(grad_params, "linear1"))

    def _sa(self, z, shape, training, rng, masks):
        s, ca = self.self_attn.forward(z.reshape(shape), training=training, rng=rng, **masks)
        s, cd = self._drop(self.dropout1, s.reshape(z.shape), shape[:2], training, rng)
        return s, (ca, cd)

    def _sa_backward(self, cache, g, shape, grad_params):
        ca, cd = cache
        g = self._drop_backward(self.dropout1, cd, g, shape[:2])
        g = self.self_attn.backward(ca, g.reshape(shape), self.child_grad(grad_params, "self_attn"))
        return g.reshape(-1, self.d_model)

    def forward(self, x, *, training=False, rng=None, src_mask=None, src_key_padding_mask=None, is_causal=False):
        check_input(self, x, 3, axis=2, size=self.d_model)
        masks = {"attn_mask": src_mask, "key_padding_mask": src_key_padding_mask, "is_causal": is_causal}
        x2 = np.ascontiguousarray(x).reshape(-1, self.d_model)
        kw = {"training": training, "rng": rng}
        if self.norm_first:
            n1, cn1 = self.norm1.forward(x2, **kw)
            s, csa = self._sa(n1, x.shape, training, rng, masks)
            z = x2 + s
            n2, cn2 = self.norm2.forward(z, **kw)
            f, cff = self._ff(n2, x.shape[:2], training, rng)
            y = z + f
        else:
            s, csa = self._sa(x2, x.shape, training, rng, masks)
            z, cn1 = self.norm1.forward(x2 + s, **kw)
            f, cff = self._ff(z, x.shape[:2], training, rng)
            y, cn2 = self.norm2.forward(z + f, **kw)
        return y.reshape(x.shape), (cn1, csa, cn2, cff, x.shape)

    def backward(self, cache, grad_y, grad_params):
        cn1, csa, cn2, cff, shape = cache
        grad_params[...] = 0  # the Dropout children own no parameters; every other slice is overwritten
        gy = np.ascontiguousarray(grad_y).reshape(-1, self.d_model)
        g1, g2 = self.child_grad(grad_params, "norm1"), self.child_grad(grad_params, "norm2")
        if self.norm_first:
            gz = gy + self.norm2.backward(cn2, self._ff_backward(cff, gy, grad_params), g2)
            gx = gz + self.norm1.backward(cn1, self._sa_backward(csa, gz, shape, grad_params), g1)
        else:
            gs2 = self.norm2.backward(cn2, gy, g2)
            gz = gs2 + self._ff_backward(cff, gs2, grad_params)
            gs1 = self.norm1.backward(cn1, gz, g1)
            gx = gs1 + self._sa_backward(csa, gs1, shape, grad_params)
        return gx.reshape(shape)

    def get_config(self):
        a = self.self_attn
        return {"d_model": self.d_model, "nhead": a.num_heads, "dim_feedforward": self.dim_feedforward,
                "dropout": a.dropout, "activation": self.activation, "layer_norm_eps": self.norm1.eps,
                "batch_first": a.batch_first, "norm_first": self.norm_first, "bias": a.use_bias,
                "causal": a.causal}


class TransformerEncoder(Module):
    r"""A stack of ``num_layers`` copies of ``encoder_layer``, then ``norm`` if given (``torch.nn.TransformerEncoder``).

    Parameters
    ----------
    encoder_layer : TransformerEncoderLayer
        The layer to stack; it is copied ``num_layers`` times (:meth:`~sparkdl.nn.Module.initialize` then
        draws every copy's parameters independently).
    num_layers : int
        Number of layers.
    norm : LayerNorm, optional
        Applied to the output of the last layer (usual with pre-norm layers).

    Shapes
    ------
    - input: (L, N, E), or (N, L, E) when the layer is ``batch_first``; output: same shape
    - children ``layers`` (a :class:`~sparkdl.nn.Sequential` holding the copies, which :meth:`forward` runs
      itself so that the masks reach every layer) and ``norm``; parameter names therefore equal
      ``torch.nn.TransformerEncoder``'s state-dict keys (``layers.0.self_attn.in_proj_weight``, ...)

    Raises
    ------
    TypeError, ValueError
        An ``encoder_layer`` that is not a :class:`TransformerEncoderLayer`, a ``norm`` that is not a
        :class:`~sparkdl.nn.LayerNorm`, a non-positive ``num_layers``; bad inputs or masks (raised by the layers).

    Notes
    -----
    :meth:`forward` takes ``mask``, ``src_key_padding_mask`` (N, L) and ``is_causal`` as keyword arguments
    (PyTorch's names), passed to every layer as ``src_mask``, ``src_key_padding_mask`` and ``is_causal``.

    References
    ----------
    Vaswani et al., 2017, "Attention Is All You Need"; ``torch.nn.TransformerEncoder`` (without its nested-tensor
    fast path, which only changes speed).
    """

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm: LayerNorm | None = None):
        super().__init__()
        name = "TransformerEncoder"
        if not isinstance(encoder_layer, TransformerEncoderLayer):
            raise TypeError(f"{name}: encoder_layer must be a TransformerEncoderLayer, got "
                            f"{type(encoder_layer).__name__}")
        self.num_layers = check_positive_int(name, "num_layers", num_layers)
        if norm is not None and not isinstance(norm, LayerNorm):
            raise TypeError(f"{name}: norm must be a LayerNorm or None, got {type(norm).__name__}")
        self.add_module("layers", Sequential(*(encoder_layer.copy() for _ in range(self.num_layers))))
        if norm is not None:
            self.add_module("norm", norm)

    @classmethod
    def from_config(cls, config, children=None):
        """Rebuild from :meth:`get_config` and the saved children (``layers`` and optionally ``norm``)."""
        children = dict(children or {})
        layers, norm = children.pop("layers", None), children.pop("norm", None)
        if not isinstance(layers, Sequential) or len(layers) == 0 or children:
            raise ValueError("TransformerEncoder.from_config: children must be 'layers' (a non-empty Sequential of "
                             f"TransformerEncoderLayer) and optionally 'norm'; got layers={type(layers).__name__}, "
                             f"unexpected {sorted(children)}")
        return cls(layers[0], **config, norm=norm)

    def forward(self, x, *, training=False, rng=None, mask=None, src_key_padding_mask=None, is_causal=False):
        caches = []
        for layer in self.layers._modules.values():
            x, c = layer.forward(x, training=training, rng=rng, src_mask=mask,
                                 src_key_padding_mask=src_key_padding_mask, is_causal=is_causal)
            caches.append(c)
        cn = None
        if "norm" in self._modules:
            x, cn = self.norm.forward(x, training=training, rng=rng)
        return x, (caches, cn)

    def backward(self, cache, grad_y, grad_params):
        caches, cn = cache
        g = grad_y if cn is None else self.norm.backward(cn, grad_y, self.child_grad(grad_params, "norm"))
        grad_layers = self.child_grad(grad_params, "layers")
        for (name, layer), c in zip(reversed(self.layers._modules.items()), reversed(caches)):
            g = layer.backward(c, g, self.layers.child_grad(grad_layers, name))
        return g

    def get_config(self):
        return {"num_layers": self.num_layers}
