"""Which algorithm a 2-D convolution runs: one deterministic rule over the layer's shape (no run-time autotuning).

First, kernel taps that only ever read zero padding are dropped (:func:`live_taps`) when what remains is a
symmetric window: a 3x3 convolution with padding 1 on a 1x1 map is a 1x1 convolution of its centre tap
(ResNet-18's last stage at 32x32 input). The rule, :func:`choose_algorithm`, then runs on that shape, top to
bottom; the first row whose condition holds wins:

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
``winograd``   3x3, stride 1, dilation 1, one group, ``in_channels >= WINOGRAD_MIN_CHANNELS`` and at
               least ``WINOGRAD_MIN_TILE_USE`` of the 2x2 output tiles' GEMM columns are real outputs
               (:func:`winograd_tile_use`: 8x8 maps 0.80, 14x14 0.88, 7x7 0.61, 4x4 0.67, 1x1 0.13)
               (:mod:`sparkdl.nn.conv_winograd`)
``im2col``     everything else: im2col + BLAS GEMM (strided layers, small maps with many channels, first
               layers with more output channels) (:mod:`sparkdl.nn.conv_im2col`)
=============  ==========================================================================================

The forward pass has one more row, above the table (:func:`forward_algorithm`): ``direct`` also computes the
forward of stride-1, one-group layers with at most ``DIRECT_FORWARD_MAX_TAPS`` taps (``in_channels * kh * kw``)
and ``DIRECT_FORWARD_MAX_OUT_CHANNELS`` output channels (ResNet-20's 3 -> 16 stem and 16 -> 16 stage, the small
CNN's 3 -> 32, LeNet-5's 6 -> 16), while their backward keeps the table's algorithm (Winograd or im2col). The
two passes need not agree: the backward reads the input and the output gradient, not the forward's output.

The choice depends only on the arguments below: the same layer shape gives the same algorithm, and so the
same bits, on every host. ``batch`` and ``threads`` are part of the signature so a measured dependence can be
added as a row; no threshold depends on them today (the thresholds were measured at 1 thread, and at 2
threads the training step splits the batch into per-thread shares that each run the same rule, and a call with
several threads deals its chunks to them, :mod:`sparkdl.nn.conv_chunks`, or cuts its GEMMs across them,
:mod:`sparkdl.nn.gemm`, without changing the bits).

How the thresholds were measured: ``bench/conv_algos.py`` times every applicable algorithm's forward and
backward (input and weight gradients) on the zoo's layer shapes in one process, 1 thread, the algorithms
interleaved round by round and the median of the rounds kept; each threshold sits where the faster
algorithm changes along a shape series. Figures beside each constant.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

__all__ = ["ALGORITHMS", "ConvShape", "choose_algorithm", "eligible_algorithms", "forward_algorithm", "live_taps",
           "plan", "thresholds", "winograd_tile_use"]

#: Every algorithm, in the order the rule tries them.
ALGORITHMS = ("depthwise", "direct", "pointwise", "winograd", "im2col")

#: The direct forward kernel is used up to this many output channels. Measured against im2col (1 thread, the
#: two interleaved, medians of 11; im2col time / direct time): 1 -> 6 channels 5x5 (LeNet-5's first layer) 1.64,
#: 1 -> 8 3x3 1.27, 3 -> 8 3x3 1.22; at 16 output channels im2col's GEMM, which reuses each column once per
#: output channel, wins or ties (1 -> 16 0.96, 3 -> 16 0.95, 6 -> 16 5x5 0.72, 16 -> 16 5x5 0.79).
DIRECT_MAX_OUT_CHANNELS = 8

#: The direct kernel computes the forward of stride-1 one-group layers up to this many taps and output channels
#: (:func:`forward_algorithm`). Measured forward times (1 thread, interleaved, medians of 7; direct vs the
#: table's algorithm, ms): ResNet-20 3 -> 16 @32 batch 128 2.1-2.9 vs 4.1-4.3 (im2col), 16 -> 16 @32 (144 taps)
#: 9.2-9.8 vs 11.0-12.0 (Winograd); small CNN 3 -> 32 @32 batch 64 2.1-2.8 vs 3.1 (im2col); LeNet-5 6 -> 16 5x5
#: @14 (150 taps) 1.8 vs 2.2 (im2col). Beyond them it loses: 32 -> 32 @16 (288 taps) 9.7-10.0 vs 8.3-9.1,
#: 3 -> 64 @64 (VGG-11) 30 vs 13, 16 -> 64 @55 (SqueezeNet) 9.8 vs 6.4; stride 2 ties or loses (MobileNetV3's
#: 3 -> 16 stem 1.5-2.2 vs 1.7, MobileNetV2's 3 -> 32 2.6-3.5 vs 2.4).
DIRECT_FORWARD_MAX_TAPS = 150
DIRECT_FORWARD_MAX_OUT_CHANNELS = 32

#: Winograd needs at least this many input channels to beat im2col: below it the 16 GEMMs are too thin to pay
#: for the transforms (measured with bench/kernels.py on the small CNN).
WINOGRAD_MIN_CHANNELS = 8

#: Winograd needs at least this fraction of its tile columns to be real outputs. Measured with
#: ``bench/conv_algos.py``'s timing (float32, 1 thread, the algorithms interleaved, medians of 7, on a shared
#: machine under load 7-28; forward / backward ms, Winograd vs im2col): 8x8 maps (use 0.80): 64 ch batch 128
#: 9.9 vs 13.9 / 23.7 vs 29.8, 64 ch batch 64 7.8 vs 10.1 / 20.9 vs 19.7, 512 ch batch 32 126 vs 199 / 409 vs
#: 403; 14x14 (0.88) 256 ch batch 4 22.5 vs 26.9 / 67.9 vs 52.5 (backward lost); 16x16 to 56x56: Winograd
#: 1.25-1.7x faster both ways (small CNN, VGG-11, ResNet-18 at 224). 7x7 (0.61) 512 ch batch 4 47.9 vs 20.7 /
#: 130 vs 70; 4x4 (0.67) 128 ch batch 64 10.7 vs 7.4 / 15.3 vs 13.5, 512 ch batch 32 51.6 vs 44.8 / 116 vs 108;
#: 2x2 (0.33) 256 ch batch 64: im2col 2.6x faster forward + backward.
WINOGRAD_MIN_TILE_USE = 0.75


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


def _live_range(size, out, k, stride, pad, dil):
    """First and last kernel tap (along one axis) that reads the input for some output position."""
    def is_live(i):  # some o in [0, out) with 0 <= o*stride + i*dil - pad < size
        lo = pad - i * dil
        o = max(0, -(-lo // stride))
        return o < out and o * stride <= size - 1 + lo
    live = [i for i in range(k) if is_live(i)]
    return (live[0], live[-1]) if live else (0, k - 1)


def live_taps(s: ConvShape) -> tuple:
    """``((i0, i1), (j0, j1))``: the kernel rows ``i0..i1`` and columns ``j0..j1`` the layer keeps, and the
    shape of the layer cut to them (kernel and padding shrink; output size unchanged). Taps outside read only
    zero padding; they are cut only where the rest is a symmetric window with non-negative padding (the
    drivers take symmetric padding), else every tap is kept."""
    ho, wo = s.output_size()
    keep, kernel, padding = [], [], []
    for size, out, k, st, p, d in zip((s.height, s.width), (ho, wo), s.kernel_size, s.stride, s.padding,
                                      s.dilation):
        a, b = _live_range(size, out, k, st, p, d)
        if a != k - 1 - b or p - a * d < 0:
            a, b = 0, k - 1
        keep.append((a, b))
        kernel.append(b - a + 1)
        padding.append(p - a * d)
    return tuple(keep), s._replace(kernel_size=tuple(kernel), padding=tuple(padding))


def winograd_tile_use(s: ConvShape) -> float:
    """The fraction of Winograd F(2x2, 3x3)'s GEMM columns that are real outputs: ``H_out*W_out`` over 4 times
    the tiles, ``ceil(H_out/2) * (ceil(W_out/2) + 1)`` (one padding tile per tile row)."""
    ho, wo = s.output_size()
    return ho * wo / (4 * ((ho + 1) // 2) * ((wo + 1) // 2 + 1))


def _winograd_kernel(s: ConvShape) -> bool:
    """3x3, stride 1, dilation 1, one group, enough input channels (the map size aside)."""
    return (tuple(s.kernel_size) == (3, 3) and tuple(s.stride) == (1, 1) and tuple(s.dilation) == (1, 1)
            and s.groups == 1 and s.in_channels >= WINOGRAD_MIN_CHANNELS)


def _taps(s: ConvShape) -> int:
    return s.in_channels // s.groups * s.kernel_size[0] * s.kernel_size[1]


def eligible_algorithms(s: ConvShape) -> tuple:
    """The algorithms that can compute the layer ``s``, in :data:`ALGORITHMS` order (``im2col`` always; ``direct``
    only up to twice its thresholds of taps and output channels: far beyond them it is never a contender)."""
    out = []
    if s.groups > 1 and s.groups == s.in_channels == s.out_channels:
        out.append("depthwise")
    if s.groups == 1 and (s.out_channels <= 2 * DIRECT_MAX_OUT_CHANNELS or (
            _taps(s) <= 2 * DIRECT_FORWARD_MAX_TAPS and s.out_channels <= 2 * DIRECT_FORWARD_MAX_OUT_CHANNELS)):
        out.append("direct")
    if tuple(s.kernel_size) == (1, 1) and tuple(s.padding) == (0, 0) and s.groups == 1:
        out.append("pointwise")
    if _winograd_kernel(s):
        out.append("winograd")
    out.append("im2col")
    return tuple(out)


def plan(s: ConvShape) -> tuple:
    """``(algorithm, taps, shape)`` of layer shape ``s``: :func:`live_taps` and then :func:`choose_algorithm` on
    the cut shape. Memoised per shape and thresholds (a layer asks on every call)."""
    return _plan(s, *thresholds())


def thresholds() -> tuple:
    """The rule's thresholds as they are now (a memo key: tests and benchmarks may change them)."""
    return (DIRECT_MAX_OUT_CHANNELS, DIRECT_FORWARD_MAX_TAPS, DIRECT_FORWARD_MAX_OUT_CHANNELS, WINOGRAD_MIN_CHANNELS,
            WINOGRAD_MIN_TILE_USE)


@functools.lru_cache(maxsize=4096)
def _plan(s: ConvShape, *thresholds) -> tuple:
    """:func:`plan`; ``thresholds`` (the module's current values) are part of the key only."""
    taps, cut = live_taps(s)
    return choose_algorithm(cut), taps, cut


def choose_algorithm(s: ConvShape) -> str:
    """The algorithm the rule in this module's table picks for layer shape ``s`` (one of :data:`ALGORITHMS`);
    ``s`` is the shape after :func:`live_taps`."""
    if s.groups > 1 and s.groups == s.in_channels == s.out_channels:
        return "depthwise"
    if (tuple(s.stride) == (1, 1) and s.groups == 1 and s.out_channels <= DIRECT_MAX_OUT_CHANNELS
            and not _winograd_kernel(s)):
        return "direct"
    if tuple(s.kernel_size) == (1, 1) and tuple(s.padding) == (0, 0) and s.groups == 1:
        return "pointwise"
    if _winograd_kernel(s) and winograd_tile_use(s) >= WINOGRAD_MIN_TILE_USE:
        return "winograd"
    return "im2col"


def forward_algorithm(s: ConvShape) -> str:
    """The algorithm the forward pass of layer shape ``s`` (after :func:`live_taps`) runs: ``direct`` where it
    measured faster than the table's algorithm (``DIRECT_FORWARD_MAX_TAPS``), else :func:`choose_algorithm`."""
    if (s.groups == 1 and tuple(s.stride) == (1, 1) and _taps(s) <= DIRECT_FORWARD_MAX_TAPS
            and s.out_channels <= DIRECT_FORWARD_MAX_OUT_CHANNELS):
        return "direct"
    return choose_algorithm(s)
