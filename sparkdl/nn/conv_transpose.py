"""Transposed 2-D convolution (the adjoint of :class:`~sparkdl.nn.Conv2d`), on the same im2col kernels."""
from __future__ import annotations

import numpy as np

from sparkdl.nn._checks import check_input, check_pair
from sparkdl.nn._conv_layer import _ConvLayer
from sparkdl.nn.conv_im2col import ConvGeometry, im2col_backward, im2col_forward, im2col_input_grad

__all__ = ["ConvTranspose2d"]


class ConvTranspose2d(_ConvLayer):
    r"""Transposed 2-D convolution ("deconvolution"): the gradient of a :class:`~sparkdl.nn.Conv2d` with
    respect to its input, used as a layer (upsampling by ``stride``).

    :math:`y = \mathrm{conv2d}^\top(x, W) + b`: every input position scatters ``W[c_in]`` (scaled by its value)
    into the output, at stride ``stride``, ``dilation`` between taps, cropped by ``padding``.

    Parameters
    ----------
    in_channels : int
        Input channels C_in (the output channels of the Conv2d whose adjoint this layer is).
    out_channels : int
        Output channels C_out (that Conv2d's input channels).
    kernel_size : int or (int, int)
        Kernel size (kH, kW).
    stride : int or (int, int), default 1
        Step between the scattered windows (the upsampling factor).
    padding : int or (int, int), default 0
        ``dilation * (kernel_size - 1) - padding`` zero padding of the equivalent direct convolution: crops
        ``padding`` rows/columns from both sides of the output.
    output_padding : int or (int, int), default 0
        Extra rows/columns added to one side (bottom/right) of the output, to pick among the input sizes a
        strided Conv2d maps to the same size; each must be smaller than the stride or the dilation.
    groups : int, default 1
        Independent groups of channels; both channel counts must be divisible by it.
    bias : bool, default True
        Learn an additive per-channel bias.
    dilation : int or (int, int), default 1
        Spacing between kernel taps.

    Shapes
    ------
    - input: (N, C_in, H, W)
    - output: (N, C_out, H_out, W_out),
      ``H_out = (H - 1)*stride[0] - 2*padding[0] + dilation[0]*(kH - 1) + output_padding[0] + 1`` (W likewise)
    - ``weight``: (C_in, C_out/groups, kH, kW), init U(-k, k) with ``k = 1/sqrt(C_out/groups * kH * kW)``
      (PyTorch's default, ``kaiming_uniform_(a=sqrt(5))`` on this shape)
    - ``bias``: (C_out,), init U(-k, k)

    Raises
    ------
    TypeError, ValueError
        Bad constructor arguments (non-positive sizes, negative padding, channels not divisible by
        ``groups``, ``output_padding`` not smaller than stride or dilation); an input of the wrong dtype, rank
        or channel count, or one whose output size would be < 1.

    Notes
    -----
    Forward is the input-gradient pass of Conv2d (a GEMM ``W^T x`` per group, then col2im), backward is a
    Conv2d forward (im2col, GEMM) for the input gradient plus Conv2d's weight-gradient GEMM.

    References
    ----------
    ``torch.nn.ConvTranspose2d``; Dumoulin & Visin, 2016, "A guide to convolution arithmetic for deep
    learning", arXiv:1603.07285.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1):
        super().__init__()
        name = "ConvTranspose2d"
        self._check_channels(in_channels, out_channels)
        self.kernel_size = check_pair(name, "kernel_size", kernel_size)
        self.stride = check_pair(name, "stride", stride)
        self.padding = check_pair(name, "padding", padding, minimum=0)
        self.output_padding = check_pair(name, "output_padding", output_padding, minimum=0)
        self.dilation = check_pair(name, "dilation", dilation)
        self._check_groups(groups)
        for op, s, d in zip(self.output_padding, self.stride, self.dilation):
            if op >= s and op >= d:
                raise ValueError(f"{name}: output_padding must be smaller than either stride or dilation, got "
                                 f"output_padding={self.output_padding}, stride={self.stride}, "
                                 f"dilation={self.dilation}")
        self._add_parameters((self.in_channels, self.out_channels // self.groups) + self.kernel_size, bias)

    def output_size(self, h: int, w: int) -> tuple[int, int]:
        """``(H_out, W_out)`` for an input of spatial size ``(h, w)`` (PyTorch's formula)."""
        return tuple((size - 1) * s - 2 * p + d * (k - 1) + op + 1 for size, s, p, d, k, op in
                     zip((h, w), self.stride, self.padding, self.dilation, self.kernel_size, self.output_padding))

    def _geometry(self):
        """The direct convolution this layer is the adjoint of (input: our output, output: our input)."""
        return ConvGeometry(self.kernel_size, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, x, *, training=False, rng=None):
        check_input(self, x, 4, axis=1, size=self.in_channels)
        ho, wo = self.output_size(x.shape[2], x.shape[3])
        if ho < 1 or wo < 1:
            raise ValueError(f"ConvTranspose2d: input spatial size {x.shape[2:]} gives output size ({ho}, {wo}) "
                             f"< 1 with padding={self.padding}; use less padding")
        x = np.ascontiguousarray(x)
        y = im2col_input_grad(x, self.weight, self._geometry(), (x.shape[0], self.out_channels, ho, wo))
        if self.use_bias:
            y += self.bias[:, None, None]
        return y, x

    def backward(self, cache, grad_y, grad_params):
        x = cache
        grad_y = np.ascontiguousarray(grad_y, dtype=self.dtype)
        views = self._grad_views_with_bias(grad_y, grad_params)
        geom = self._geometry()
        im2col_backward(grad_y, self.weight, x, geom, views["weight"], input_grad=False)
        return im2col_forward(grad_y, self.weight, np.zeros(0, self.dtype), geom, x.shape[2], x.shape[3])

    def get_config(self):
        return {"in_channels": self.in_channels, "out_channels": self.out_channels,
                "kernel_size": list(self.kernel_size), "stride": list(self.stride), "padding": list(self.padding),
                "output_padding": list(self.output_padding), "groups": self.groups, "bias": self.use_bias,
                "dilation": list(self.dilation)}
