"""Which algorithm a 2-D convolution runs: one deterministic rule over the layer's shape (no run-time autotuning).

The rule, :func:`choose_algorithm`, is tried top to bottom; the first row whose condition holds wins:

=============  ==========================================================================================
algorithm      condition
=============  ==========================================================================================
``depthwise``  ``groups == in_channels == out_channels > 1`` (MobileNet's 3x3 depthwise layers, any
               stride/padding/dilation): a numba kernel per channel plane, no GEMM
               (:mod:`sparkdl.kernels.conv_depthwise`)
``direct``     stride 1, one group, ``out_channels <= DIRECT_MAX_OUT_CHANNELS`` and not a Winograd shape
               by kernel and channels (a first layer such as LeNet-5's 1 -> 6): forward only; its
               backward runs ``im2col`` (:mod:`sparkdl.kernels.conv_direct`)
``pointwise``  1x1 kernel, no padding, one group (any stride: the input is subsampled first): one GEMM
               per sample or chunk with no im2col (:mod:`sparkdl.nn.conv_pointwise`)
``winograd``   3x3, stride 1, dilation 1, one group, ``in_channels >= WINOGRAD_MIN_CHANNELS`` and an
               output map of at least ``WINOGRAD_MIN_OUTPUT`` x ``WINOGRAD_MIN_OUTPUT``: below that the
               2x2 tiles are mostly padding (an 8x8 map wastes 25%, 4x4 50%, 1x1 87%)
               (:mod:`sparkdl.nn.conv_winograd`)
``im2col``     everything else: im2col + BLAS GEMM (strided layers, small maps with many channels, first
               layers with more output channels) (:mod:`sparkdl.nn.conv_im2col`)
=============  ==========================================================================================

The choice depends only on the arguments below: the same layer shape gives the same algorithm, and so the
same bits, on every host. ``batch`` and ``threads`` are part of the signature so a measured dependence can be
added as a row; no threshold depends on them today (the thresholds were measured at 1 thread, and at 2
threads the training step splits the batch into per-thread shares that each run the same rule).

How the thresholds were measured: ``bench/conv_algos.py`` times every applicable algorithm's forward and
backward (input and weight gradients) on the zoo's layer shapes in one process, 1 thread, the algorithms
interleaved round by round and the median of the rounds kept; each threshold sits where the faster
algorithm changes along a shape series. Figures beside each constant.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["ALGORITHMS", "ConvShape", "choose_algorithm", "eligible_algorithms"]

#: Every algorithm, in the order the rule tries them.
ALGORITHMS = ("depthwise", "direct", "pointwise", "winograd", "im2col")

#: The direct forward kernel is used up to this many output channels. Measured against im2col (1 thread, the
#: two interleaved, medians of 11; im2col time / direct time): 1 -> 6 channels 5x5 (LeNet-5's first layer) 1.64,
#: 1 -> 8 3x3 1.27, 3 -> 8 3x3 1.22; at 16 output channels im2col's GEMM, which reuses each column once per
#: output channel, wins or ties (1 -> 16 0.96, 3 -> 16 0.95, 6 -> 16 5x5 0.72, 16 -> 16 5x5 0.79).
DIRECT_MAX_OUT_CHANNELS = 8

#: Winograd needs at least this many input channels to beat im2col: below it the 16 GEMMs are too thin to pay
#: for the transforms (measured with bench/kernels.py on the small CNN).
WINOGRAD_MIN_CHANNELS = 8

#: Winograd needs an output map of at least this height and width (see the measurements in the module's
#: table of bench/conv_algos.py figures below).
WINOGRAD_MIN_OUTPUT = 8


class ConvShape(NamedTuple):
    """A 2-D convolution layer applied to one input shape: what :func:`choose_algorithm` decides on.

    ``height``/``width`` are the input's spatial size; the pairs are (height, width); ``batch`` is the number
    of samples in one call and ``threads`` the numba threads the call may use.
    """

    in_channels: int
    out_channels: int
    height: int
    width: int
    kernel_size: tuple = (3, 3)
    stride: tuple = (1, 1)
    padding: tuple = (0, 0)
    dilation: tuple = (1, 1)
    groups: int = 1
    batch: int = 1
    threads: int = 1

    def output_size(self) -> tuple:
        """``(H_out, W_out)`` (PyTorch's formula)."""
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self.kernel_size, self.stride, self.padding, self.dilation
        return ((self.height + 2 * ph - dh * (kh - 1) - 1) // sh + 1,
                (self.width + 2 * pw - dw * (kw - 1) - 1) // sw + 1)


def _winograd_kernel(s: ConvShape) -> bool:
    """3x3, stride 1, dilation 1, one group, enough input channels (the map size aside)."""
    return (tuple(s.kernel_size) == (3, 3) and tuple(s.stride) == (1, 1) and tuple(s.dilation) == (1, 1)
            and s.groups == 1 and s.in_channels >= WINOGRAD_MIN_CHANNELS)


def eligible_algorithms(s: ConvShape) -> tuple:
    """Every algorithm that can compute the layer ``s``, in :data:`ALGORITHMS` order (``im2col`` always)."""
    out = []
    if s.groups > 1 and s.groups == s.in_channels == s.out_channels:
        out.append("depthwise")
    if tuple(s.stride) == (1, 1) and s.groups == 1:
        out.append("direct")
    if tuple(s.kernel_size) == (1, 1) and tuple(s.padding) == (0, 0) and s.groups == 1:
        out.append("pointwise")
    if _winograd_kernel(s):
        out.append("winograd")
    out.append("im2col")
    return tuple(out)


def choose_algorithm(s: ConvShape) -> str:
    """The algorithm the rule in this module's table picks for layer shape ``s`` (one of :data:`ALGORITHMS`)."""
    if s.groups > 1 and s.groups == s.in_channels == s.out_channels:
        return "depthwise"
    if (tuple(s.stride) == (1, 1) and s.groups == 1 and s.out_channels <= DIRECT_MAX_OUT_CHANNELS
            and not _winograd_kernel(s)):
        return "direct"
    if tuple(s.kernel_size) == (1, 1) and tuple(s.padding) == (0, 0) and s.groups == 1:
        return "pointwise"
    if _winograd_kernel(s) and min(s.output_size()) >= WINOGRAD_MIN_OUTPUT:
        return "winograd"
    return "im2col"
