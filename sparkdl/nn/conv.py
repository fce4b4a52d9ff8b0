"""2-D convolution layer, :class:`Conv2d`, and the table of its five algorithms (forward and backward).

Which algorithm runs is decided per call from the layer and input shape by the rule in
:mod:`sparkdl.nn.conv_algorithm`; the drivers live in :mod:`sparkdl.nn.conv_im2col`,
:mod:`sparkdl.nn.conv_winograd`, :mod:`sparkdl.nn.conv_pointwise` and the numba kernels
:mod:`sparkdl.kernels.conv_direct` and :mod:`sparkdl.kernels.conv_depthwise`.
"""
from __future__ import annotations

import functools

import numpy as np

from sparkdl.config import get_num_threads
from sparkdl.kernels.conv_depthwise import depthwise_backward, depthwise_forward
from sparkdl.kernels.conv_direct import direct_forward
from sparkdl.kernels.epilogue import NO_EPILOGUE
from sparkdl.nn._checks import check_pair
from sparkdl.nn._conv_layer import _ConvLayer
from sparkdl.nn.conv_algorithm import ConvShape, forward_algorithm, plan, thresholds
from sparkdl.nn.conv_im2col import ConvGeometry, im2col_backward, im2col_forward, im2col_plan
from sparkdl.nn.conv_pointwise import pointwise_backward, pointwise_forward
from sparkdl.nn.conv_winograd import winograd_backward, winograd_forward

__all__ = ["Conv2d", "conv2d_forward", "conv2d_backward"]


def _depthwise_forward(x, weight, bias, geom, ho, wo, act):
    return depthwise_forward(x, weight, bias, *geom.stride, *geom.padding, *geom.dilation, ho, wo, *act)


def _depthwise_backward(x, weight, grad_y, geom, grad_w, input_grad):
    grad_x, gw = depthwise_backward(x, weight, grad_y, *geom.stride, *geom.padding, *geom.dilation, input_grad)
    grad_w[...] = gw
    return grad_x if input_grad else None


#: ``algorithm -> (forward, backward)``: ``forward(x, weight, bias, geom, ho, wo, act) -> y`` (``act`` an epilogue
#: of :mod:`sparkdl.kernels.epilogue`: in the kernel writing the output, a pass for the 1x1 GEMM) and
#: ``backward(x, weight, grad_y, geom, grad_w, input_grad) -> grad_x or None`` (writes ``grad_w``). The direct
#: kernel has no backward of its own: its layers differentiate with im2col.
_ALGORITHMS = {
    "depthwise": (_depthwise_forward, _depthwise_backward),
    "direct": (lambda x, w, b, g, ho, wo, act: direct_forward(x, w, b, *g.stride, *g.padding, *g.dilation, ho, wo,
                                                              *act, get_num_threads()),
               im2col_backward),
    "pointwise": (lambda x, w, b, g, ho, wo, act: pointwise_forward(x, w, b, g.stride, act),
                  lambda x, w, gy, g, gw, ig: pointwise_backward(x, w, gy, g.stride, gw, ig)),
    "winograd": (lambda x, w, b, g, ho, wo, act: winograd_forward(x, w, b, g.padding, ho, wo, act),
                 lambda x, w, gy, g, gw, ig: winograd_backward(x, w, gy, g.padding, gw, ig)),
    "im2col": (im2col_forward, im2col_backward),
}


def conv2d_forward(algorithm: str, x, weight, bias, geom: ConvGeometry, ho: int, wo: int,
                   act=NO_EPILOGUE) -> np.ndarray:
    """``y = act(conv(x, weight) + bias)`` (N, C_out, ho, wo) with the named algorithm (which must be eligible for
    the geometry: :func:`sparkdl.nn.conv_algorithm.eligible_algorithms`). ``x`` (N, C, H, W) contiguous,
    ``weight`` (C_out, C/groups, kH, kW), ``bias`` (C_out,) or empty; all of one float dtype. ``act``: an
    epilogue ``(kind, low, high)`` of :mod:`sparkdl.kernels.epilogue` (default none)."""
    return _ALGORITHMS[algorithm][0](x, weight, bias, geom, ho, wo, act)


def conv2d_backward(algorithm: str, x, weight, grad_y, geom: ConvGeometry, grad_w, input_grad: bool = True):
    """Write the weight gradient into ``grad_w`` and return the input gradient (None without ``input_grad``) of
    :func:`conv2d_forward`; ``grad_y`` contiguous (N, C_out, ho, wo)."""
    return _ALGORITHMS[algorithm][1](x, weight, grad_y, geom, grad_w, input_grad)


def _call_plan(shape: ConvShape) -> tuple:
    """``(forward algorithm, backward algorithm, taps, geometry of the cut convolution)`` of a layer shape:
    :func:`plan` and :func:`forward_algorithm`, memoised with the rule's current thresholds as part of the key."""
    return _call_plan_cached(shape, *thresholds())


@functools.lru_cache(maxsize=4096)
def _call_plan_cached(shape: ConvShape, *_thresholds) -> tuple:
    algorithm, taps, cut = plan(shape)
    geom = ConvGeometry(cut.kernel_size, cut.stride, cut.padding, cut.dilation, cut.groups)
    return forward_algorithm(cut), algorithm, taps, geom


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
    Five algorithms compute the same convolution (they agree to float rounding); :meth:`algorithm` picks one per
    call from the layer and input shape by the documented rule of :mod:`sparkdl.nn.conv_algorithm`:
    ``depthwise`` (a numba kernel per channel plane, ``groups == C_in == C_out``), ``direct`` (forward only,
    few output channels: shifted rows of the padded input, no column matrix), ``pointwise`` (1x1: one GEMM per
    sample or chunk, no im2col), ``winograd`` (F(2x2, 3x3), 2.25x fewer multiplications on maps large enough
    for its tiles) and ``im2col`` + BLAS GEMM (any configuration). Backward uses the forward's algorithm
    (``im2col`` for ``direct``).

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

    def shape_for(self, x_shape, threads: int | None = None) -> ConvShape:
        """The :class:`~sparkdl.nn.conv_algorithm.ConvShape` of this layer on input ``x_shape`` (N, C, H, W);
        ``threads`` defaults to the calling thread's numba thread count."""
        n, _, h, w = x_shape
        return ConvShape(self.in_channels, self.out_channels, h, w, self.kernel_size, self.stride, self.padding,
                         self.dilation, self.groups, n, get_num_threads() if threads is None else threads)

    def algorithm(self, x_shape, threads: int | None = None) -> str:
        """The algorithm the backward pass (and, but where :meth:`forward_algorithm` differs, the forward) runs on
        input shape ``x_shape`` (N, C, H, W): the rule of :mod:`sparkdl.nn.conv_algorithm`
        (:func:`~sparkdl.nn.conv_algorithm.plan`) on :meth:`shape_for`."""
        return plan(self.shape_for(x_shape, threads))[0]

    def forward_algorithm(self, x_shape, threads: int | None = None) -> str:
        """The algorithm the forward pass runs on input shape ``x_shape`` (N, C, H, W)
        (:func:`~sparkdl.nn.conv_algorithm.forward_algorithm`)."""
        return _call_plan(self.shape_for(x_shape, threads))[0]

    def _plan_call(self, x_shape, weight):
        """``(forward algorithm, backward algorithm, weight, geometry, taps)`` of one call: ``weight`` cut to the
        live taps (a copy, or ``weight`` itself when every tap is live) and the geometry of the cut convolution."""
        forward, backward, taps, geom = _call_plan(self.shape_for(x_shape))
        (i0, i1), (j0, j1) = taps
        if geom.kernel_size != self.kernel_size:
            weight = np.ascontiguousarray(weight[:, :, i0:i1 + 1, j0:j1 + 1])
        return forward, backward, weight, geom, taps

    # ------------------------------------------------------------------ compute
    def forward(self, x, *, training=False, rng=None):
        ho, wo = self._check(x)
        x = np.ascontiguousarray(x)
        algorithm, _, weight, geom, _ = self._plan_call(x.shape, self.weight)
        return conv2d_forward(algorithm, x, weight, self._bias_or_empty(), geom, ho, wo), x

    def forward_folded(self, x, scale=None, shift=None, act=None):
        """Inference output of this convolution, followed by a per-channel affine map (an evaluation-mode
        BatchNorm) and an activation, in one convolution pass: the scale is folded into the weights,
        ``y = act(conv(x, weight * scale) + (bias * scale + shift))``.

        ``scale``, ``shift`` (C_out,) float64, or None (no affine map); ``act`` an epilogue ``(kind, low, high)``
        of :mod:`sparkdl.kernels.epilogue`, or None. No cache: for inference only (see :mod:`sparkdl.nn.fusion`).
        """
        ho, wo = self._check(x)
        x = np.ascontiguousarray(x)
        if scale is None:
            weight, bias = self.weight, self._bias_or_empty()
        else:  # the scale in the layer's dtype: one pass over the weights (a float64 product and cast took three)
            weight = self.weight * scale.astype(self.dtype).reshape(-1, 1, 1, 1)
            bias = ((self.bias * scale if self.use_bias else 0.0) + shift).astype(self.dtype)
        algorithm, _, weight, geom, _ = self._plan_call(x.shape, weight)
        return conv2d_forward(algorithm, x, weight, bias, geom, ho, wo, NO_EPILOGUE if act is None else act)

    def backward(self, cache, grad_y, grad_params):
        return self._backward(cache, grad_y, grad_params, input_grad=True)

    def backward_parameters(self, cache, grad_y, grad_params):
        self._backward(cache, grad_y, grad_params, input_grad=False)

    def _backward(self, cache, grad_y, grad_params, input_grad):
        x = cache
        grad_y = np.ascontiguousarray(grad_y, dtype=self.dtype)
        views = self._grad_views_with_bias(grad_y, grad_params)
        _, algorithm, weight, geom, ((i0, i1), (j0, j1)) = self._plan_call(x.shape, self.weight)
        if weight is self.weight:
            return conv2d_backward(algorithm, x, weight, grad_y, geom, views["weight"], input_grad)
        grad_w = np.empty_like(weight)  # the cut taps' gradient; the others read only padding: zero
        grad_x = conv2d_backward(algorithm, x, weight, grad_y, geom, grad_w, input_grad)
        views["weight"][...] = 0
        views["weight"][:, :, i0:i1 + 1, j0:j1 + 1] = grad_w
        return grad_x

    def get_config(self):
        return {"in_channels": self.in_channels, "out_channels": self.out_channels,
                "kernel_size": list(self.kernel_size), "stride": list(self.stride),
                "padding": list(self.padding), "dilation": list(self.dilation), "groups": self.groups,
                "bias": self.use_bias}
