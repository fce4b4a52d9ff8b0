"""Multi-head scaled dot-product self-attention: :class:`MultiheadAttention`.

How masks reach the layer
-------------------------
The layer contract passes one array through ``forward(x, *, training, rng)``, and containers pass nothing
else. Masks are therefore

* a constructor option, ``causal=True``, for the mask every call uses (a decoder / language model: it then
  works inside :class:`~sparkdl.nn.Sequential` and every other container), and
* keyword-only arguments of :meth:`MultiheadAttention.forward` (``key_padding_mask``, ``attn_mask``,
  ``is_causal``) for masks that change with the batch, when a model calls the layer itself (as
  :class:`~sparkdl.nn.TransformerEncoderLayer` does with its ``src_key_padding_mask``).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from sparkdl.kernels import activation as KA
from sparkdl.nn import init
from sparkdl.nn._checks import check_bool, check_input, check_positive_int
from sparkdl.nn.dropout_masks import dropout_mask
from sparkdl.nn.module import Module

__all__ = ["MultiheadAttention", "attention_mask"]


def attention_mask(owner: str, n: int, num_heads: int, length: int, dtype, key_padding_mask=None, attn_mask=None,
                   causal: bool = False):
    """The additive mask (0 where allowed, -inf where not) broadcastable to scores (N, H, L, L), or None.

    Boolean masks are True where attention is *not* allowed; float masks are added to the scores (PyTorch's
    conventions). ``key_padding_mask``: (N, L); ``attn_mask``: (L, L) or (N*num_heads, L, L).

    Raises
    ------
    TypeError, ValueError
        A mask that is not a bool/float array, or has the wrong shape.
    """
    total = None
    for arg, mask, shapes in (("key_padding_mask", key_padding_mask, [(n, length)]),
                              ("attn_mask", attn_mask, [(length, length), (n * num_heads, length, length)])):
        if mask is None:
            continue
        if not isinstance(mask, np.ndarray) or not (mask.dtype == np.bool_ or mask.dtype.kind == "f"):
            raise TypeError(f"{owner}: {arg} must be a bool or float numpy.ndarray, got "
                            f"{type(mask).__name__}{' of ' + str(mask.dtype) if isinstance(mask, np.ndarray) else ''}")
        if mask.shape not in shapes:
            raise ValueError(f"{owner}: {arg} must have shape {' or '.join(map(str, shapes))}, got {mask.shape}")
        add = np.where(mask, -np.inf, 0).astype(dtype) if mask.dtype == np.bool_ else mask.astype(dtype)
        if arg == "key_padding_mask":
            add = add[:, None, None, :]
        elif add.ndim == 3:
            add = add.reshape(n, num_heads, length, length)
        total = add if total is None else total + add
    if causal:
        add = np.triu(np.full((length, length), -np.inf, dtype), 1)
        total = add if total is None else total + add
    return total


class MultiheadAttention(Module):
    r"""Multi-head self-attention (Vaswani et al., 2017), parameters named and laid out as PyTorch's.

    With :math:`[Q, K, V] = x W_{in}^T + b_{in}` split into ``num_heads`` heads of size
    :math:`d = E / \text{num\_heads}`, per head
    :math:`\mathrm{head} = \mathrm{softmax}(Q K^T / \sqrt{d} + M)\, V` (M: the additive mask), and
    :math:`y = [\mathrm{head}_1, \dots] W_{out}^T + b_{out}`.

    Parameters
    ----------
    embed_dim : int
        Model width E.
    num_heads : int
        Number of heads; must divide ``embed_dim``.
    dropout : float, default 0
        Dropout probability on the attention weights (training only; the mask of sample n is a function of the
        seed drawn from ``rng`` and n, see :class:`~sparkdl.nn.Dropout`).
    bias : bool, default True
        Learn ``in_proj_bias`` and ``out_proj.bias``.
    batch_first : bool, default False
        Input (N, L, E) if True, else (L, N, E) (PyTorch's default).
    causal : bool, default False
        Always apply the causal mask (position i attends to positions <= i); see the module docstring.

    Shapes
    ------
    - input: (L, N, E), or (N, L, E) with ``batch_first``; output: same shape
    - ``in_proj_weight``: (3E, E), Xavier-uniform init; ``in_proj_bias``: (3E,), init 0
    - ``out_proj.weight``: (E, E), init U(-1/sqrt(E), 1/sqrt(E)); ``out_proj.bias``: (E,), init 0

    Raises
    ------
    TypeError, ValueError
        Bad constructor arguments (``embed_dim`` not divisible by ``num_heads``, ``dropout`` outside
        ``[0, 1)``, a flag that is not a bool); an input of the wrong dtype, rank or width; malformed masks.

    Notes
    -----
    Self-attention only (query = key = value = the input; no ``kdim``/``vdim``, ``add_bias_kv``,
    ``add_zero_attn``), and :meth:`forward` returns the output only, not the attention weights. All
    products are BLAS GEMMs (batched over heads); softmax is the numba kernel of :class:`~sparkdl.nn.Softmax`.
    A query row whose every key is masked gives NaN, as in PyTorch.

    References
    ----------
    Vaswani et al., 2017, "Attention Is All You Need"; ``torch.nn.MultiheadAttention``.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 batch_first: bool = False, causal: bool = False):
        super().__init__()
        name = "MultiheadAttention"
        self.embed_dim = check_positive_int(name, "embed_dim", embed_dim)
        self.num_heads = check_positive_int(name, "num_heads", num_heads)
        if self.embed_dim % self.num_heads:
            raise ValueError(f"{name}: embed_dim must be divisible by num_heads, got embed_dim={self.embed_dim}, "
                             f"num_heads={self.num_heads}")
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) or not 0 <= dropout < 1:
            raise ValueError(f"{name}: dropout must be a number in [0, 1), got {dropout!r}")
        self.use_bias = check_bool(name, "bias", bias)
        self.batch_first, self.causal = check_bool(name, "batch_first", batch_first), check_bool(name, "causal", causal)
        self.dropout = float(dropout)
        e = self.embed_dim
        self.add_parameter("in_proj_weight", (3 * e, e))
        if self.use_bias:
            self.add_parameter("in_proj_bias", (3 * e,))
        self.add_parameter("out_proj.weight", (e, e))
        if self.use_bias:
            self.add_parameter("out_proj.bias", (e,))
        self.reset_parameters(np.random.default_rng())

    def reset_parameters(self, rng):
        """As ``torch.nn.MultiheadAttention._reset_parameters``."""
        t = self._tensors["parameters"]
        init.xavier_uniform_(t["in_proj_weight"], rng)
        init.kaiming_uniform_(t["out_proj.weight"], rng, a=math.sqrt(5))
        if self.use_bias:
            t["in_proj_bias"][...] = 0
            t["out_proj.bias"][...] = 0

    # ------------------------------------------------------------------ layout helpers
    def _heads(self, a, n, length):
        """(rows, E) -> (N, H, L, d) strided view; rows are (N, L) with batch_first, else (L, N)."""
        h, d = self.num_heads, self.embed_dim // self.num_heads
        if self.batch_first:
            return a.reshape(n, length, h, d).transpose(0, 2, 1, 3)
        return a.reshape(length, n, h, d).transpose(1, 2, 0, 3)

    def _rows(self, a):
        """Inverse of :meth:`_heads`: (N, H, L, d) -> contiguous (rows, E)."""
        n, h, length, d = a.shape
        order = (0, 2, 1, 3) if self.batch_first else (2, 0, 1, 3)
        return np.ascontiguousarray(a.transpose(order)).reshape(n * length, h * d)

    # ------------------------------------------------------------------ compute
    def forward(self, x, *, training=False, rng=None, key_padding_mask=None, attn_mask=None, is_causal=False):
        """Self-attention of ``x``; see the class docstring. Masks: :func:`attention_mask`; ``is_causal``
        applies the causal mask for this call (``causal=True`` in the constructor applies it always)."""
        name = "MultiheadAttention"
        check_input(self, x, 3, axis=2, size=self.embed_dim)
        n, length = (x.shape[0], x.shape[1]) if self.batch_first else (x.shape[1], x.shape[0])
        mask = attention_mask(name, n, self.num_heads, length, x.dtype, key_padding_mask, attn_mask,
                              self.causal or bool(is_causal))
        t = self._tensors["parameters"]
        x2 = np.ascontiguousarray(x).reshape(-1, self.embed_dim)
        qkv = x2 @ t["in_proj_weight"].T
        if self.use_bias:
            qkv += t["in_proj_bias"]
        e = self.embed_dim
        q, k, v = (self._heads(qkv[:, i * e:(i + 1) * e], n, length) for i in range(3))
        scale = x.dtype.type(1.0 / math.sqrt(e // self.num_heads))
        scores = np.matmul(q, k.transpose(0, 1, 3, 2))
        scores *= scale
        if mask is not None:
            scores += mask
        p = KA.softmax(scores.reshape(-1, length, 1)).reshape(scores.shape)
        keep = None
        if training and self.dropout > 0:
            if rng is None:
                raise ValueError(f"{name}: training=True with dropout > 0 needs a random generator: pass "
                                 "rng=numpy.random.default_rng(seed) to forward (or use training=False)")
            keep = dropout_mask(rng, p.shape, self.dropout, x.dtype)  # (N, H, L, L): axis 0 is the sample
        pd = p if keep is None else p * keep
        o = self._rows(np.matmul(pd, v))
        y = o @ t["out_proj.weight"].T
        if self.use_bias:
            y += t["out_proj.bias"]
        return y.reshape(x.shape), (x2, qkv, p, keep, o, n, length, x.shape)

    def backward(self, cache, grad_y, grad_params):
        x2, qkv, p, keep, o, n, length, shape = cache
        t = self._tensors["parameters"]
        g = self.grad_views(grad_params)
        e = self.embed_dim
        gy = np.ascontiguousarray(grad_y).reshape(-1, e)
        np.matmul(gy.T, o, out=g["out_proj.weight"])
        if self.use_bias:
            np.sum(gy, axis=0, out=g["out_proj.bias"])
        go = self._heads(gy @ t["out_proj.weight"], n, length)  # (N, H, L, d)
        q, k, v = (self._heads(qkv[:, i * e:(i + 1) * e], n, length) for i in range(3))
        pd = p if keep is None else p * keep
        gqkv = np.empty_like(qkv)
        gv = np.matmul(pd.transpose(0, 1, 3, 2), go)
        gp = np.matmul(go, v.transpose(0, 1, 3, 2))
        if keep is not None:
            gp *= keep
        gs = KA.softmax_backward(p.reshape(-1, length, 1), gp.reshape(-1, length, 1)).reshape(p.shape)
        gs *= x2.dtype.type(1.0 / math.sqrt(e // self.num_heads))
        gq = np.matmul(gs, k)
        gk = np.matmul(gs.transpose(0, 1, 3, 2), q)
        for i, gpart in enumerate((gq, gk, gv)):
            gqkv[:, i * e:(i + 1) * e] = self._rows(gpart)
        np.matmul(gqkv.T, x2, out=g["in_proj_weight"])
        if self.use_bias:
            np.sum(gqkv, axis=0, out=g["in_proj_bias"])
        return (gqkv @ t["in_proj_weight"]).reshape(shape)

    def get_config(self):
        return {"embed_dim": self.embed_dim, "num_heads": self.num_heads, "dropout": self.dropout,
                "bias": self.use_bias, "batch_first": self.batch_first, "causal": self.causal}
