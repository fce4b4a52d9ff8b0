"""2-D convolution layer: im2col + BLAS GEMM, and Winograd F(2x2, 3x3) for 3x3 / stride-1 layers.

The numba kernels (data movement and Winograd transforms) are in :mod:`sparkdl.kernels.conv`; this module
holds the validating layer and the chunked drivers that call BLAS (numpy ``matmul``) between kernels.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sparkdl.kernels import conv as K
from sparkdl.kernels.conv_direct import direct_forward
from sparkdl.nn._checks import check_pair
from sparkdl.nn._conv_layer import _ConvLayer

__all__ = ["Conv2d", "ConvGeometry", "im2col_plan", "im2col_forward", "im2col_backward", "im2col_input_grad"]

#: Bytes of work buffers (im2col columns + GEMM output, or Winograd-transformed input + output) per chunk:
#: a chunk stays in a core's L2 cache (2 MB here) between the kernels and the GEMMs (which run on one BLAS
#: thread). 512 KB measured best for LeNet-5 and the small CNN (1 MB was 10-40% slower on the im2col layers).
#: The same for every thread count: the weight gradient sums chunk by chunk, so a chunk size that followed the
#: thread count would make the bits depend on it.
_CHUNK_BYTES = 1 << 19

#: Use the wide (stride-1) column layout while it wastes at most this fraction of GEMM columns.
_MAX_WIDE_WASTE = 0.5

#: The direct forward kernel is used up to this many output channels. Measured against im2col (1 thread, the
#: two interleaved, medians of 11; im2col time / direct time): 1 -> 6 channels 5x5 (LeNet-5's first layer) 1.64,
#: 1 -> 8 3x3 1.27, 3 -> 8 3x3 1.22; at 16 output channels im2col's GEMM, which reuses each column once per
#: output channel, wins or ties (1 -> 16 0.96, 3 -> 16 0.95, 6 -> 16 5x5 0.72, 16 -> 16 5x5 0.79).
_DIRECT_MAX_OUT_CHANNELS = 8

#: Winograd needs at least this many input channels to beat im2col (measured; see :meth:`Conv2d.uses_winograd`).
_WINOGRAD_MIN_CHANNELS = 8

#: Winograd F(2x2, 3x3) filter transform G (Lavin & Gray, 2016): U = G g G^T, 4x4 from 3x3.
_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def _chunk(n: int, bytes_per_sample: int) -> int:
    """Samples per chunk so that one chunk's work buffers stay in the cores' L2 caches."""
    return int(max(1, min(n, _CHUNK_BYTES // max(1, bytes_per_sample))))


class ConvGeometry(NamedTuple):
    """A 2-D convolution's window geometry: (height, width) pairs and the group count."""

    kernel_size: tuple
    stride: tuple
    padding: tuple
    dilation: tuple
    groups: int


def im2col_plan(geom: ConvGeometry, x_shape, ho: int, wo: int, c_out: int, itemsize: int):
    """Chunk geometry ``(hp, wp, wq, plane, k, nb)`` of a convolution of input ``x_shape`` (N, C, H, W) with
    output size ``(ho, wo)`` and ``c_out`` output channels (see :mod:`sparkdl.kernels.conv`)."""
    n, c, h, w = x_shape
    (kh, kw), (sh, sw), (ph, pw), dw = geom.kernel_size, geom.stride, geom.padding, geom.dilation[1]
    hp, wp = h + 2 * ph, w + 2 * pw
    wide = sh == 1 and sw == 1 and wp <= (1 + _MAX_WIDE_WASTE) * wo
    wq = wp if wide else wo
    plane = hp * wp + ((kw - 1) * dw if wide else 0)
    k = c * kh * kw
    return hp, wp, wq, plane, k, _chunk(n, (k + c_out) * ho * wq * itemsize)


def _chunks(n: int, nb: int, columns_per_sample: int):
    """``(n0, b, lc)`` of every chunk of at most ``nb`` of ``n`` samples: first sample, samples, GEMM columns."""
    for n0 in range(0, n, nb):
        b = min(nb, n - n0)
        yield n0, b, b * columns_per_sample


def _columns(x, n0: int, b: int, geom: ConvGeometry, plan: tuple, ho: int, xp, cols) -> np.ndarray:
    """The im2col columns ``(k, b*ho*wq)`` of samples ``x[n0:n0+b]`` (a view of ``cols``): the samples are
    padded into ``xp``, then gathered (``plan`` from :func:`im2col_plan`)."""
    hp, wp, wq, plane, k, nb = plan
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geom.kernel_size, geom.stride, geom.padding, geom.dilation
    lc = b * ho * wq
    xpc, colc = xp[:b], cols[:k * lc].reshape(k, lc)
    K.pad_planes(x, n0, ph, pw, xpc)
    K.im2col(xpc, wp, kh, kw, sh, sw, dh, dw, ho, wq, colc)
    return colc


def _add_columns(gcols, n0: int, geom: ConvGeometry, plan: tuple, ho: int, grad_x) -> None:
    """Adjoint of :func:`_columns`: ``grad_x[n0:n0+b]`` (overwritten) from the column gradients ``gcols``."""
    hp, wp, wq, plane, k, nb = plan
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geom.kernel_size, geom.stride, geom.padding, geom.dilation
    K.col2im(gcols, n0, hp, wp, ph, pw, kh, kw, sh, sw, dh, dw, ho, wq, grad_x)


def im2col_forward(x, weight, bias, geom: ConvGeometry, ho: int, wo: int) -> np.ndarray:
    """``y = conv(x, weight) + bias`` (N, C_out, ho, wo) by im2col + one GEMM per group and chunk.

    ``x`` (N, C, H, W) contiguous, ``weight`` (C_out, C/groups, kH, kW), ``bias`` (C_out,) or empty.
    """
    n, c = x.shape[:2]
    co, g = weight.shape[0], geom.groups
    plan = im2col_plan(geom, x.shape, ho, wo, co, x.itemsize)
    hp, wp, wq, plane, k, nb = plan
    wg = weight.reshape(g, co // g, k // g)
    y = np.empty((n, co, ho, wo), x.dtype)
    xp = np.empty((nb, c, plane), x.dtype)
    cols = np.empty(k * nb * ho * wq, x.dtype)
    yw = np.empty(co * nb * ho * wq, x.dtype)
    for n0, b, lc in _chunks(n, nb, ho * wq):
        colc, ywc = _columns(x, n0, b, geom, plan, ho, xp, cols), yw[:co * lc].reshape(co, lc)
        if g == 1:
            np.matmul(wg[0], colc, out=ywc)
        else:
            np.matmul(wg, colc.reshape(g, k // g, lc), out=ywc.reshape(g, co // g, lc))
        K.crop_bias(ywc, bias, n0, ho, wo, wq, y)
    return y


def im2col_backward(x, weight, grad_y, geom: ConvGeometry, grad_w, input_grad: bool = True):
    """Write ``grad_w`` (the weight gradient, ``weight``'s shape) and return ``grad_x`` (or None without
    ``input_grad``) of :func:`im2col_forward`; ``grad_y`` is contiguous (N, C_out, ho, wo)."""
    n, c = x.shape[:2]
    co, ho, wo = grad_y.shape[1:]
    g = geom.groups
    plan = im2col_plan(geom, x.shape, ho, wo, co, x.itemsize)
    hp, wp, wq, plane, k, nb = plan
    wg = weight.reshape(g, co // g, k // g)
    gwt = np.zeros((g, k // g, co // g), x.dtype)  # grad_W^T: cols @ grad_y^T is the faster BLAS shape
    grad_x = np.empty_like(x) if input_grad else None
    xp = np.empty((nb, c, plane), x.dtype)
    cols = np.empty(k * nb * ho * wq, x.dtype)
    gyw = np.empty(co * nb * ho * wq, x.dtype)
    tmp = np.empty_like(gwt)
    for n0, b, lc in _chunks(n, nb, ho * wq):
        colc, gywc = _columns(x, n0, b, geom, plan, ho, xp, cols), gyw[:co * lc].reshape(co, lc)
        K.widen(grad_y, n0, wq, gywc)
        gy3, col3 = gywc.reshape(g, co // g, lc), colc.reshape(g, k // g, lc)
        np.matmul(col3, gy3.transpose(0, 2, 1), out=gwt if n0 == 0 else tmp)
        if n0:
            gwt += tmp
        if input_grad:
            np.matmul(wg.transpose(0, 2, 1), gy3, out=col3)  # grad of the columns, in place of cols
            _add_columns(colc, n0, geom, plan, ho, grad_x)
    grad_w.reshape(g, co // g, k // g)[...] = gwt.transpose(0, 2, 1)
    return grad_x


def im2col_input_grad(grad_y, weight, geom: ConvGeometry, x_shape) -> np.ndarray:
    """Input gradient alone, ``conv^T(grad_y, weight)`` of shape ``x_shape``: the forward pass of a transposed
    convolution. ``grad_y`` contiguous (N, C_out, ho, wo), ``weight`` (C_out, C/groups, kH, kW)."""
    co, ho, wo = grad_y.shape[1:]
    g = geom.groups
    plan = im2col_plan(geom, x_shape, ho, wo, co, grad_y.itemsize)
    hp, wp, wq, plane, k, nb = plan
    wgt = weight.reshape(g, co // g, k // g).transpose(0, 2, 1)
    grad_x = np.empty(x_shape, grad_y.dtype)
    cols = np.empty(k * nb * ho * wq, grad_y.dtype)
    gyw = np.empty(co * nb * ho * wq, grad_y.dtype)
    for n0, b, lc in _chunks(x_shape[0], nb, ho * wq):
        colc, gywc = cols[:k * lc].reshape(k, lc), gyw[:co * lc].reshape(co, lc)
        K.widen(grad_y, n0, wq, gywc)
        np.matmul(wgt, gywc.reshape(g, co // g, lc), out=colc.reshape(g, k // g, lc))
        _add_columns(colc, n0, geom, plan, ho, grad_x)
    return grad_x


class Conv2d(_ConvLayer):
    r"""2-D convolution over NCHW input, :math:`y[n, o] = b[o] + \sum_{c \in g(o)} W[o, c] \star x[n, c]`.

    Parameters
    ----------
    in_channels : int
        Input channels C_in.
    out_channels : int
        Output channels C_out.
    kernel_size : int or (int, int)
        Kernel size (kH, kW).
    stride : int or (int, int), default 1
        Step between windows.
    padding : int or (int, int), default 0
        Implicit zero padding on both sides of H and W.
    dilation : int or (int, int), default 1
        Spacing between kernel taps.
    groups : int, default 1
        Split channels into ``groups`` independent convolutions; both channel counts must be divisible by
        it (``groups == in_channels`` is a depthwise convolution).
    bias : bool, default True
        Learn an additive per-channel bias.

    Shapes
    ------
    - input: (N, C_in, H, W)
    - output: (N, C_out, H_out, W_out) with
      ``H_out = floor((H + 2*padding[0] - dilation[0]*(kH - 1) - 1) / stride[0]) + 1`` (W likewise)
    - ``weight``: (C_out, C_in/groups, kH, kW), init U(-k, k) with ``k = 1/sqrt(C_in/groups * kH * kW)``
      (PyTorch's default, ``kaiming_uniform_(a=sqrt(5))``)
    - ``bias``: (C_out,), init U(-k, k)

    Raises
    ------
    TypeError
        Non-integer sizes; an input that is not an array of the layer's dtype.
    ValueError
        Non-positive sizes, negative padding, channels not divisible by ``groups``; an input that is not
        4-D, has the wrong channel count, or is smaller than the dilated kernel.

    Notes
    -----
    Three algorithms, chosen per layer by :meth:`uses_direct` and :meth:`uses_winograd` (the result is the
    same convolution; they agree to float rounding):

    * **direct** (forward only; stride 1, one group, few output channels such as a first layer): each output
      channel accumulates shifted rows of the padded input, four taps per pass, with no column matrix.

    * **im2col + GEMM** (any configuration). Per chunk of samples: im2col (numba, parallel over
      sample-channel planes), one BLAS GEMM per group ``y = W @ cols``; backward ``grad_W^T = cols @
      grad_y^T`` and ``grad_cols = W^T @ grad_y`` followed by col2im.
    * **Winograd F(2x2, 3x3)** (3x3, stride 1, dilation 1, one group, >= 8 input channels): 16 GEMMs of
      ``C_out x C_in`` by ``C_in x tiles`` replace the 9-tap GEMM, 2.25x fewer multiplications; the
      backward pass is the exact adjoint (``dU = GY V^T``, ``dV = U^T GY``).

    Chunks are sized so their work buffers stay in L2 cache; backward recomputes the columns (or the
    transformed input) instead of caching them, so the cache is the input only.

    References
    ----------
    ``torch.nn.Conv2d``; Chellapilla, Puri & Simard (2006), "High Performance Convolutional Neural
    Networks for Document Processing" (im2col + GEMM); Lavin & Gray (2016), "Fast Algorithms for
    Convolutional Neural Networks", arXiv:1509.09308 (Winograd).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True):
        super().__init__()
        self._check_channels(in_channels, out_channels)
        self.kernel_size = check_pair("Conv2d", "kernel_size", kernel_size)
        self.stride = check_pair("Conv2d", "stride", stride)
        self.padding = check_pair("Conv2d", "padding", padding, minimum=0)
        self.dilation = check_pair("Conv2d", "dilation", dilation)
        self._check_groups(groups)
        self._add_parameters((self.out_channels, self.in_channels // self.groups) + self.kernel_size, bias)

    # ------------------------------------------------------------------ geometry
    def output_size(self, h: int, w: int) -> tuple[int, int]:
        """``(H_out, W_out)`` for an input of spatial size ``(h, w)`` (PyTorch's formula)."""
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self.kernel_size, self.stride, self.padding, self.dilation
        return (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1

    def _check(self, x):
        name = "Conv2d"
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{name}: input must be a numpy.ndarray, got {type(x).__name__}")
        if x.dtype != self.dtype:
            raise TypeError(f"{name}: input dtype must be {self.dtype} (the layer's dtype), got {x.dtype}; "
                            f"convert with x.astype(np.{self.dtype})")
        if x.ndim != 4:
            raise ValueError(f"{name}: expected 4-D input (N, C, H, W), got {x.ndim}-D with shape {x.shape}")
        if x.shape[1] != self.in_channels:
            raise ValueError(f"{name}: expected input with in_channels={self.in_channels} channels "
                             f"(axis 1), got shape {x.shape}")
        ho, wo = self.output_size(x.shape[2], x.shape[3])
        if ho < 1 or wo < 1:
            (kh, kw), (ph, pw), (dh, dw) = self.kernel_size, self.padding, self.dilation
            raise ValueError(f"{name}: input spatial size ({x.shape[2]}, {x.shape[3]}) with padding ({ph}, {pw}) "
                             f"is smaller than the dilated kernel ({dh * (kh - 1) + 1}, {dw * (kw - 1) + 1}); "
                             f"output size would be ({ho}, {wo})")
        return ho, wo

    def geometry(self) -> "ConvGeometry":
        """The layer's (kernel, stride, padding, dilation, groups), as the im2col drivers take it."""
        return ConvGeometry(self.kernel_size, self.stride, self.padding, self.dilation, self.groups)

    def _plan(self, x_shape, ho, wo):
        """im2col chunk geometry shared by forward and backward: (hp, wp, wq, plane, k, nb)."""
        return im2col_plan(self.geometry(), x_shape, ho, wo, self.out_channels, self.dtype.itemsize)

    def uses_winograd(self) -> bool:
        """Whether forward/backward run Winograd F(2x2, 3x3) instead of im2col + GEMM.

        Chosen for 3x3 kernels with stride 1, dilation 1, one group and at least
        ``_WINOGRAD_MIN_CHANNELS`` input channels (below that the GEMMs are too thin to pay for the transforms;
        measured in bench/kernels.py).
        """
        return (self.kernel_size == (3, 3) and self.stride == (1, 1) and self.dilation == (1, 1)
                and self.groups == 1 and self.in_channels >= _WINOGRAD_MIN_CHANNELS)

    def uses_direct(self) -> bool:
        """Whether forward runs the direct kernel (:func:`sparkdl.kernels.conv_direct.direct_forward`) instead of
        im2col + GEMM: stride 1, one group, at most ``_DIRECT_MAX_OUT_CHANNELS`` output channels (and no
        Winograd). Backward always uses im2col + GEMM (its input is the cached ``x`` either way)."""
        return (self.stride == (1, 1) and self.groups == 1 and self.out_channels <= _DIRECT_MAX_OUT_CHANNELS
                and not self.uses_winograd())

    # ------------------------------------------------------------------ compute
    def forward(self, x, *, training=False, rng=None):
        ho, wo = self._check(x)
        x = np.ascontiguousarray(x)
        bias = self._bias_or_empty()
        if self.uses_direct():
            (ph, pw), (dh, dw) = self.padding, self.dilation
            return direct_forward(x, self.weight, bias, ph, pw, dh, dw, ho, wo), x
        if self.uses_winograd():
            return _winograd_forward(x, self.weight, bias, self.padding, ho, wo), x
        return im2col_forward(x, self.weight, bias, self.geometry(), ho, wo), x

    def backward(self, cache, grad_y, grad_params):
        return self._backward(cache, grad_y, grad_params, input_grad=True)

    def backward_parameters(self, cache, grad_y, grad_params):
        self._backward(cache, grad_y, grad_params, input_grad=False)

    def _backward(self, cache, grad_y, grad_params, input_grad):
        x = cache
        grad_y = np.ascontiguousarray(grad_y, dtype=self.dtype)
        views = self._grad_views_with_bias(grad_y, grad_params)
        if self.uses_winograd():
            return _winograd_backward(x, self.weight, grad_y, self.padding, views["weight"], input_grad)
        return im2col_backward(x, self.weight, grad_y, self.geometry(), views["weight"], input_grad)

    def get_config(self):
        return {"in_channels": self.in_channels, "out_channels": self.out_channels,
                "kernel_size": list(self.kernel_size), "stride": list(self.stride),
                "padding": list(self.padding), "dilation": list(self.dilation), "groups": self.groups,
                "bias": self.use_bias}


# ---------------------------------------------------------------------------------------------- Winograd
def _winograd_geometry(x_shape, ho, wo, itemsize, c_out):
    """Tile rows and columns, tiles per sample and samples per chunk of the Winograd path."""
    th, tw = (ho + 1) // 2, (wo + 1) // 2
    tiles = th * (tw + 1)  # per sample, including one padding tile per tile row
    nb = _chunk(x_shape[0], 16 * (x_shape[1] + c_out) * tiles * itemsize)
    return th, tw, tiles, nb


def _winograd_filters(weight, dtype):
    """``(G, U)``: the transform G in ``dtype`` and ``U = G w G^T`` of every 3x3 filter, (4, Co, C, 4)."""
    g = _G.astype(dtype)
    return g, np.tensordot(np.tensordot(g, weight, axes=(1, 2)), g, axes=(3, 1))


def _winograd_forward(x, weight, bias, padding, ho, wo):
    """y = conv(x, weight) + bias via ``M[xi] = U[xi] @ V[xi]`` over 16 Winograd points, chunk by chunk."""
    n, c = x.shape[:2]
    co = weight.shape[0]
    ph, pw = padding
    th, tw, tiles, nb = _winograd_geometry(x.shape, ho, wo, x.itemsize, co)
    u = np.ascontiguousarray(_winograd_filters(weight, x.dtype)[1].transpose(0, 3, 1, 2)).reshape(16, co, c)
    y = np.empty((n, co, ho, wo), x.dtype)
    vbuf = np.empty(c * 16 * nb * tiles, x.dtype)
    mbuf = np.empty(co * 16 * nb * tiles, x.dtype)
    for n0, _, L in _chunks(n, nb, tiles):
        v, m = vbuf[:c * 16 * L].reshape(c, 16, L), mbuf[:co * 16 * L].reshape(co, 16, L)
        K.winograd_input(x, n0, ph, pw, th, tw, v)
        np.matmul(u, v.transpose(1, 0, 2), out=m.transpose(1, 0, 2))
        K.winograd_output(m, bias, n0, th, tw, y)
    return y


def _winograd_backward(x, weight, grad_y, padding, grad_w, input_grad=True):
    """Exact adjoint of :func:`_winograd_forward`: ``dU = sum GY V^T`` and ``dV = U^T GY``; returns grad_x
    (None without ``input_grad``)."""
    n, c = x.shape[:2]
    co = weight.shape[0]
    ph, pw = padding
    ho, wo = grad_y.shape[2:]
    th, tw, tiles, nb = _winograd_geometry(x.shape, ho, wo, x.itemsize, co)
    g, u = _winograd_filters(weight, x.dtype)
    ut = np.ascontiguousarray(u.transpose(0, 3, 2, 1)).reshape(16, c, co)  # U[xi]^T
    gu, tmp = np.zeros((16, co, c), x.dtype), np.empty((16, co, c), x.dtype)
    grad_x = np.empty_like(x) if input_grad else None
    vbuf = np.empty(c * 16 * nb * tiles, x.dtype)
    gbuf = np.empty(co * 16 * nb * tiles, x.dtype)
    for n0, _, L in _chunks(n, nb, tiles):
        v, gyt = vbuf[:c * 16 * L].reshape(c, 16, L), gbuf[:co * 16 * L].reshape(co, 16, L)
        K.winograd_input(x, n0, ph, pw, th, tw, v)
        K.winograd_grad_output(grad_y, n0, th, tw, gyt)
        np.matmul(gyt.transpose(1, 0, 2), v.transpose(1, 2, 0), out=tmp)
        gu += tmp
        if input_grad:
            np.matmul(ut, gyt.transpose(1, 0, 2), out=v.transpose(1, 0, 2))  # dV, in place of V
            K.winograd_input_adjoint(v, n0, ph, pw, th, tw, grad_x)
    gw = np.tensordot(np.tensordot(g, gu.reshape(4, 4, co, c), axes=(0, 0)), g, axes=(1, 0))  # (3, Co, C, 3)
    grad_w[...] = gw.transpose(1, 2, 0, 3)
    return grad_x
