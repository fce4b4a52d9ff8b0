"""Pooling layers (no parameters): :class:`MaxPool2d`, :class:`AvgPool2d`, :class:`AdaptiveAvgPool2d`, and the 1-D
:class:`MaxPool1d`, :class:`AvgPool1d` (the 2-D kernels on height-1 planes)."""
from __future__ import annotations

import numpy as np

from sparkdl.kernels import pool as K
from sparkdl.nn._checks import check_bool, check_input, check_pair, check_positive_int
from sparkdl.nn.conv1d import single
from sparkdl.nn.module import Module

__all__ = ["MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "MaxPool1d", "AvgPool1d"]


def _pool_out(size: int, k: int, s: int, p: int, ceil_mode: bool) -> int:
    """PyTorch's ``pooling_output_shape``: the last window must start inside the input or left padding."""
    num = size + 2 * p - k
    out = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _planes(layer, x):
    check_input(layer, x, 4)
    n, c, h, w = x.shape
    return np.ascontiguousarray(x).reshape(n * c, h, w)


class _WindowPool2d(Module):
    """Shared argument handling of the fixed-window pools."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False):
        super().__init__()
        name = type(self).__name__
        self.kernel_size = check_pair(name, "kernel_size", kernel_size)
        self.stride = self.kernel_size if stride is None else check_pair(name, "stride", stride)
        self.padding = check_pair(name, "padding", padding, minimum=0)
        for p, k in zip(self.padding, self.kernel_size):
            if 2 * p > k:
                raise ValueError(f"{name}: padding must be at most half of kernel_size, got padding="
                                 f"{self.padding}, kernel_size={self.kernel_size}")
        self.ceil_mode = check_bool(name, "ceil_mode", ceil_mode)

    def output_size(self, h: int, w: int) -> tuple[int, int]:
        """``(H_out, W_out)`` for an input of spatial size ``(h, w)``."""
        (kh, kw), (sh, sw), (ph, pw) = self.kernel_size, self.stride, self.padding
        return _pool_out(h, kh, sh, ph, self.ceil_mode), _pool_out(w, kw, sw, pw, self.ceil_mode)

    def _geometry(self, x):
        planes = _planes(self, x)
        ho, wo = self.output_size(x.shape[2], x.shape[3])
        if ho < 1 or wo < 1:
            raise ValueError(f"{type(self).__name__}: input spatial size ({x.shape[2]}, {x.shape[3]}) is too small "
                             f"for kernel_size={self.kernel_size}, padding={self.padding}; output size would "
                             f"be ({ho}, {wo})")
        return planes, ho, wo

    def get_config(self):
        return {"kernel_size": list(self.kernel_size), "stride": list(self.stride),
                "padding": list(self.padding), "ceil_mode": self.ceil_mode}


class MaxPool2d(_WindowPool2d):
    r"""Max over sliding windows, :math:`y[n,c,i,j] = \max_{a<kH,\,b<kW} x[n,c,s_0 i+a-p_0,\,s_1 j+b-p_1]`.

    Parameters
    ----------
    kernel_size : int or (int, int)
        Window size (kH, kW).
    stride : int or (int, int), optional
        Window step; defaults to ``kernel_size``.
    padding : int or (int, int), default 0
        Implicit padding that never wins the max; at most half of ``kernel_size``.
    ceil_mode : bool, default False
        Round the output size up instead of down (windows may then run off the bottom/right edge).

    Shapes
    ------
    input (N, C, H, W) → output (N, C, H_out, W_out),
    ``H_out = floor_or_ceil((H + 2*padding[0] - kH) / stride[0]) + 1`` (W likewise).

    Raises
    ------
    TypeError, ValueError
        Bad arguments; an input that is not 4-D, has the wrong dtype, or is smaller than a window.

    Notes
    -----
    Ties go to the first maximum in row-major window order and NaN propagates (the last NaN wins), as in
    PyTorch. The forward pass computes the maxima alone (vectorised; tracking argmax indices kept it scalar,
    9x slower for 3x3 stride-2 windows) and keeps its input planes and output in the cache (the input is usually
    held anyway, a ReLU's output); backward recomputes each window's winner from them. Reference:
    ``torch.nn.MaxPool2d``.
    """

    def _maxima(self, x):
        """``(planes, y)``: the input as (N*C, H, W) planes and the window maxima (N, C, H_out, W_out), computed
        without argmax indices (:func:`~sparkdl.kernels.pool.max_pool2d_values`, or the disjoint 2x2 kernel)."""
        planes, ho, wo = self._geometry(x)
        (kh, kw), (sh, sw), (ph, pw) = self.kernel_size, self.stride, self.padding
        if K.is_pool2x2(x.shape[2], x.shape[3], kh, kw, sh, sw, ph, pw, ho, wo):
            y = K.max_pool2x2_forward(planes, ho, wo)
        else:
            y = K.max_pool2d_values(planes, kh, kw, sh, sw, ph, pw, ho, wo)
        return planes, y.reshape(x.shape[0], x.shape[1], ho, wo)

    def forward(self, x, *, training=False, rng=None):
        planes, y = self._maxima(x)
        return y, (planes, y)

    def infer(self, x):
        return self._maxima(x)[1]

    def backward(self, cache, grad_y, grad_params):
        planes, y = cache
        n, c, ho, wo = y.shape
        h, w = planes.shape[1:]
        y3 = y.reshape(n * c, ho, wo)
        gy = np.ascontiguousarray(grad_y).reshape(y3.shape)
        (kh, kw), (sh, sw), (ph, pw) = self.kernel_size, self.stride, self.padding
        if K.is_pool2x2(h, w, kh, kw, sh, sw, ph, pw, ho, wo):
            gx = K.max_pool2x2_backward(gy, planes, y3)
        else:
            gx = K.max_pool2d_backward_from_values(gy, planes, y3, kh, kw, sh, sw, ph, pw)
        return gx.reshape(n, c, h, w)


class AvgPool2d(_WindowPool2d):
    r"""Mean over sliding windows.

    Parameters
    ----------
    kernel_size, stride, padding, ceil_mode
        As in :class:`MaxPool2d` (padding cells hold zeros).
    count_include_pad : bool, default True
        Divide by the window size including padding cells (True) or by the number of input cells.

    Shapes
    ------
    input (N, C, H, W) → output (N, C, H_out, W_out), sizes as in :class:`MaxPool2d`.

    Raises
    ------
    TypeError, ValueError
        Bad arguments (as :class:`MaxPool2d`, or a non-bool ``count_include_pad``); an input that is not 4-D,
        has the wrong dtype, or is smaller than a window.

    Notes
    -----
    Reference: ``torch.nn.AvgPool2d`` (without ``divisor_override``).
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__(kernel_size, stride, padding, ceil_mode)
        self.count_include_pad = check_bool("AvgPool2d", "count_include_pad", count_include_pad)

    def forward(self, x, *, training=False, rng=None):
        planes, ho, wo = self._geometry(x)
        (kh, kw), (sh, sw), (ph, pw) = self.kernel_size, self.stride, self.padding
        y = K.avg_pool2d_forward(planes, kh, kw, sh, sw, ph, pw, ho, wo, self.count_include_pad)
        return y.reshape(x.shape[0], x.shape[1], ho, wo), x.shape

    def backward(self, cache, grad_y, grad_params):
        shape = cache
        (kh, kw), (sh, sw), (ph, pw) = self.kernel_size, self.stride, self.padding
        gy = np.ascontiguousarray(grad_y).reshape(-1, grad_y.shape[2], grad_y.shape[3])
        gx = K.avg_pool2d_backward(gy, shape[2], shape[3], kh, kw, sh, sw, ph, pw, self.count_include_pad)
        return gx.reshape(shape)

    def get_config(self):
        return {**super().get_config(), "count_include_pad": self.count_include_pad}


class AdaptiveAvgPool2d(Module):
    r"""Average pooling to a fixed output size, whatever the input size.

    Output cell ``(i, j)`` averages rows ``[floor(i*H/H_out), ceil((i+1)*H/H_out))`` and the matching
    columns; ``output_size=1`` is global average pooling.

    Parameters
    ----------
    output_size : int, or pair of (int or None)
        ``(H_out, W_out)``; ``None`` keeps that input dimension.

    Shapes
    ------
    input (N, C, H, W) of any spatial size → output (N, C, H_out, W_out).

    Raises
    ------
    TypeError, ValueError
        A non-integer or non-positive ``output_size``; an input that is not 4-D or has the wrong dtype.

    Notes
    -----
    Reference: ``torch.nn.AdaptiveAvgPool2d``; Lin, Chen & Yan (2013), "Network In Network" (global
    average pooling).
    """

    def __init__(self, output_size):
        super().__init__()
        sizes = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size, output_size)
        if len(sizes) != 2:
            raise ValueError(f"AdaptiveAvgPool2d: output_size must be an int or a pair, got {output_size!r}")
        self.output_size = tuple(None if s is None else check_positive_int("AdaptiveAvgPool2d", "output_size", s)
                                 for s in sizes)

    def forward(self, x, *, training=False, rng=None):
        planes = _planes(self, x)
        ho = x.shape[2] if self.output_size[0] is None else self.output_size[0]
        wo = x.shape[3] if self.output_size[1] is None else self.output_size[1]
        y = K.adaptive_avg_pool2d_forward(planes, ho, wo)
        return y.reshape(x.shape[0], x.shape[1], ho, wo), x.shape

    def backward(self, cache, grad_y, grad_params):
        shape = cache
        gy = np.ascontiguousarray(grad_y).reshape(-1, grad_y.shape[2], grad_y.shape[3])
        return K.adaptive_avg_pool2d_backward(gy, shape[2], shape[3]).reshape(shape)

    def get_config(self):
        return {"output_size": list(self.output_size)}


class _WindowPool1d(Module):
    """Shared argument handling of the 1-D pools: windows (1, k) over planes (N*C, 1, L)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False):
        super().__init__()
        name = type(self).__name__
        self.kernel_size = (single(name, "kernel_size", kernel_size),)
        self.stride = self.kernel_size if stride is None else (single(name, "stride", stride),)
        self.padding = (single(name, "padding", padding, minimum=0),)
        if 2 * self.padding[0] > self.kernel_size[0]:
            raise ValueError(f"{name}: padding must be at most half of kernel_size, got padding={self.padding[0]}, "
                             f"kernel_size={self.kernel_size[0]}")
        self.ceil_mode = check_bool(name, "ceil_mode", ceil_mode)

    def output_size(self, length: int) -> int:
        """``L_out`` for an input of length ``length``."""
        return _pool_out(length, self.kernel_size[0], self.stride[0], self.padding[0], self.ceil_mode)

    def _geometry(self, x):
        check_input(self, x, 3)
        n, c, length = x.shape
        lo = self.output_size(length)
        if lo < 1:
            raise ValueError(f"{type(self).__name__}: input length {length} is too small for kernel_size="
                             f"{self.kernel_size[0]}, padding={self.padding[0]}; output length would be {lo}")
        return np.ascontiguousarray(x).reshape(n * c, 1, length), lo

    def _args(self):
        """(kh, kw, sh, sw, ph, pw) of the equivalent 2-D pool."""
        return 1, self.kernel_size[0], 1, self.stride[0], 0, self.padding[0]

    def get_config(self):
        return {"kernel_size": self.kernel_size[0], "stride": self.stride[0], "padding": self.padding[0],
                "ceil_mode": self.ceil_mode}


class MaxPool1d(_WindowPool1d):
    r"""Max over sliding windows of a sequence, :math:`y[n,c,i] = \max_{a<K} x[n,c,s i+a-p]`.

    Parameters
    ----------
    kernel_size : int
        Window length K.
    stride : int, optional
        Window step; defaults to ``kernel_size``.
    padding : int, default 0
        Implicit padding that never wins the max; at most ``kernel_size / 2``.
    ceil_mode : bool, default False
        Round the output length up instead of down.

    Shapes
    ------
    input (N, C, L) → output (N, C, L_out), ``L_out = floor_or_ceil((L + 2*padding - K) / stride) + 1``.

    Raises
    ------
    TypeError, ValueError
        Bad arguments; an input that is not 3-D, has the wrong dtype, or is shorter than a window.

    Notes
    -----
    The kernels of :class:`MaxPool2d` on (N*C, 1, L) planes: ties go to the first maximum, NaN propagates.
    Reference: ``torch.nn.MaxPool1d`` (without ``dilation``/``return_indices``).
    """

    def forward(self, x, *, training=False, rng=None):
        planes, lo = self._geometry(x)
        y, idx = K.max_pool2d_forward(planes, *self._args(), 1, lo)
        return y.reshape(x.shape[0], x.shape[1], lo), (idx, x.shape)

    def backward(self, cache, grad_y, grad_params):
        idx, shape = cache
        gy = np.ascontiguousarray(grad_y).reshape(idx.shape)
        return K.max_pool2d_backward(gy, idx, 1, shape[2], *self._args()).reshape(shape)


class AvgPool1d(_WindowPool1d):
    r"""Mean over sliding windows of a sequence.

    Parameters
    ----------
    kernel_size, stride, padding, ceil_mode
        As in :class:`MaxPool1d` (padding cells hold zeros).
    count_include_pad : bool, default True
        Divide each window's sum by ``kernel_size`` (True) or by the number of input cells it covers.

    Shapes
    ------
    input (N, C, L) → output (N, C, L_out), lengths as in :class:`MaxPool1d`.

    Raises
    ------
    TypeError, ValueError
        A ``count_include_pad`` that is not a bool, the errors of :class:`MaxPool1d`'s arguments; an input
        that is not 3-D, has the wrong dtype, or is shorter than a window.

    Notes
    -----
    Reference: ``torch.nn.AvgPool1d``.
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__(kernel_size, stride, padding, ceil_mode)
        self.count_include_pad = check_bool("AvgPool1d", "count_include_pad", count_include_pad)

    def forward(self, x, *, training=False, rng=None):
        planes, lo = self._geometry(x)
        y = K.avg_pool2d_forward(planes, *self._args(), 1, lo, self.count_include_pad)
        return y.reshape(x.shape[0], x.shape[1], lo), x.shape

    def backward(self, cache, grad_y, grad_params):
        shape = cache
        gy = np.ascontiguousarray(grad_y).reshape(shape[0] * shape[1], 1, grad_y.shape[2])
        gx = K.avg_pool2d_backward(gy, 1, shape[2], *self._args(), self.count_include_pad)
        return gx.reshape(shape)

    def get_config(self):
        return {**super().get_config(), "count_include_pad": self.count_include_pad}
