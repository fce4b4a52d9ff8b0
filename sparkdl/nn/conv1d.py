"""1-D convolution: a :class:`~sparkdl.nn.Conv2d` im2col convolution with a height-1 kernel over (N, C, 1, L)."""
from __future__ import annotations

import numpy as np

from sparkdl.nn._checks import check_input, check_positive_int
from sparkdl.nn._conv_layer import _ConvLayer
from sparkdl.nn.conv_im2col import ConvGeometry, im2col_backward, im2col_forward

__all__ = ["Conv1d"]


def single(layer: str, arg: str, value, minimum: int = 1) -> int:
    """An int, or a 1-tuple/list of one int (PyTorch's ``_single``), range-checked."""
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise ValueError(f"{layer}: {arg} must be an int or a 1-tuple, got {value!r}")
        value = value[0]
    return check_positive_int(layer, arg, value, minimum)


class Conv1d(_ConvLayer):
    r"""1-D convolution over (N, C, L) input, :math:`y[n, o] = b[o] + \sum_{c \in g(o)} W[o, c] \star x[n, c]`.

    Parameters
    ----------
    in_channels : int
        Input channels C_in (axis 1 of the (N, C_in, L) input).
    out_channels : int
        Output channels C_out (axis 1 of the output).
    kernel_size : int
        Kernel length K.
    stride : int, default 1
        Step between windows.
    padding : int, default 0
        Implicit zeros on both ends of L.
    dilation : int, default 1
        Spacing between kernel taps.
    groups : int, default 1
        Independent groups of channels; both channel counts must be divisible by it.
    bias : bool, default True
        Learn an additive per-channel bias.

    Shapes
    ------
    - input: (N, C_in, L)
    - output: (N, C_out, L_out), ``L_out = floor((L + 2*padding - dilation*(K - 1) - 1) / stride) + 1``
    - ``weight``: (C_out, C_in/groups, K), init U(-k, k) with ``k = 1/sqrt(C_in/groups * K)`` (PyTorch's
      default); ``bias``: (C_out,), init U(-k, k)

    Raises
    ------
    TypeError, ValueError
        Bad constructor arguments; an input of the wrong dtype, rank or channel count, or shorter than the
        dilated kernel.

    Notes
    -----
    Runs Conv2d's im2col + GEMM drivers on the (N, C, 1, L) view with a (1, K) kernel; ``kernel_size``,
    ``stride``, ``padding`` and ``dilation`` are stored as 1-tuples, as in PyTorch.
    Reference: ``torch.nn.Conv1d``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True):
        super().__init__()
        name = "Conv1d"
        self._check_channels(in_channels, out_channels)
        self.kernel_size = (single(name, "kernel_size", kernel_size),)
        self.stride = (single(name, "stride", stride),)
        self.padding = (single(name, "padding", padding, minimum=0),)
        self.dilation = (single(name, "dilation", dilation),)
        self._check_groups(groups)
        self._add_parameters((self.out_channels, self.in_channels // self.groups) + self.kernel_size, bias)

    def output_size(self, length: int) -> int:
        """``L_out`` for an input of length ``length`` (PyTorch's formula)."""
        (k,), (s,), (p,), (d,) = self.kernel_size, self.stride, self.padding, self.dilation
        return (length + 2 * p - d * (k - 1) - 1) // s + 1

    def _geometry(self):
        return ConvGeometry((1, self.kernel_size[0]), (1, self.stride[0]), (0, self.padding[0]),
                            (1, self.dilation[0]), self.groups)

    def _weight4(self, w):
        return w.reshape(w.shape[0], w.shape[1], 1, w.shape[2])

    def forward(self, x, *, training=False, rng=None):
        check_input(self, x, 3, axis=1, size=self.in_channels)
        lo = self.output_size(x.shape[2])
        if lo < 1:
            (k,), (p,), (d,) = self.kernel_size, self.padding, self.dilation
            raise ValueError(f"Conv1d: input length {x.shape[2]} with padding {p} is shorter than the dilated "
                             f"kernel ({d * (k - 1) + 1}); output length would be {lo}")
        x4 = np.ascontiguousarray(x).reshape(x.shape[0], x.shape[1], 1, x.shape[2])
        y = im2col_forward(x4, self._weight4(self.weight), self._bias_or_empty(), self._geometry(), 1, lo)
        return y.reshape(x.shape[0], self.out_channels, lo), x4

    def backward(self, cache, grad_y, grad_params):
        x4 = cache
        gx = self._backward(cache, grad_y, grad_params, input_grad=True)
        return gx.reshape(x4.shape[0], x4.shape[1], x4.shape[3])

    def backward_parameters(self, cache, grad_y, grad_params):
        self._backward(cache, grad_y, grad_params, input_grad=False)

    def _backward(self, x4, grad_y, grad_params, input_grad):
        gy4 = np.ascontiguousarray(grad_y, dtype=self.dtype).reshape(grad_y.shape[0], grad_y.shape[1], 1,
                                                                       grad_y.shape[2])
        views = self._grad_views_with_bias(gy4, grad_params)
        return im2col_backward(x4, self._weight4(self.weight), gy4, self._geometry(), self._weight4(views["weight"]),
                               input_grad)

    def get_config(self):
        return {"in_channels": self.in_channels, "out_channels": self.out_channels,
                "kernel_size": self.kernel_size[0], "stride": self.stride[0], "padding": self.padding[0],
                "dilation": self.dilation[0], "groups": self.groups, "bias": self.use_bias}
