"""The forward work of one row of a batch, from the layers' shapes alone: what a split of a batch across threads
weighs against the synchronisations it costs (:func:`sparkdl.step.threads.task_gradient_sum`).

:func:`forward_flops_per_row` follows an image's height and width through the network (convolutions and pools
change them, every other layer keeps them) and adds the multiply-adds of every ``Conv2d`` and ``Linear`` (2 FLOPs
each). Other layers count nothing: in the networks this weighs they are a small share of the work. The figure
depends only on the model's layer shapes and the row's shape, so every decision taken from it is deterministic.
"""
from __future__ import annotations

import math

from sparkdl import nn

__all__ = ["forward_flops_per_row"]


def _out(size, kernel, stride, padding, dilation=1, ceil_mode=False):
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    return (math.ceil if ceil_mode else math.floor)(span / stride) + 1


def _flops(m, hw):
    """``(output height and width or None, FLOPs)`` of module ``m`` on one row whose spatial size is ``hw``."""
    t = type(m)
    if isinstance(m, nn.Conv2d):
        if hw is None:
            return None, 0
        out = tuple(_out(s, k, st, p, d) for s, k, st, p, d in zip(hw, m.kernel_size, m.stride, m.padding,
                                                                     m.dilation))
        macs = m.out_channels * (m.in_channels // m.groups) * m.kernel_size[0] * m.kernel_size[1]
        return out, 2 * macs * out[0] * out[1]
    if t in (nn.MaxPool2d, nn.AvgPool2d) and hw is not None:
        return tuple(_out(s, k, st, p, ceil_mode=m.ceil_mode) for s, k, st, p in
                     zip(hw, m.kernel_size, m.stride, m.padding)), 0
    if t is nn.AdaptiveAvgPool2d and hw is not None:
        return tuple(s if o is None else o for s, o in zip(hw, m.output_size)), 0
    if t is nn.Linear:
        return None, 2 * m.in_features * m.out_features
    if t is nn.Flatten:
        return None, 0
    if t is nn.Sequential:
        total = 0
        for child in m._modules.values():
            hw, f = _flops(child, hw)
            total += f
        return hw, total
    if t is nn.Graph:
        sizes = dict.fromkeys(m.input_names, hw)
        total = 0
        for name, child in m._modules.items():
            # a join broadcasts (a squeeze-excitation's 1 x 1 scale times the feature map): the largest input size
            known = [sizes[a] for a in m.node_inputs[name] if sizes[a] is not None]
            sizes[name], f = _flops(child, max(known, key=lambda s: s[0] * s[1]) if known else None)
            total += f
        return sizes[m.output_names[0]], total
    children = list(m._modules.values())
    if children:  # Residual, Concat and other containers: every branch on the input, the first one's size out
        results = [_flops(c, hw) for c in children]
        return results[0][0], sum(f for _, f in results)
    return hw, 0


def forward_flops_per_row(model, row_shape) -> int:
    """Floating-point operations of ``model``'s forward pass on one row of shape ``row_shape`` (the input's shape
    without the batch axis), counting the multiply-adds of ``Conv2d`` and ``Linear`` layers twice each.

    Parameters
    ----------
    model : Module
    row_shape : tuple of int
        E.g. ``(3, 32, 32)`` for (N, 3, 32, 32) images; for inputs that are not images only ``Linear`` layers count.

    Returns
    -------
    int
        FLOPs, >= 0.
    """
    hw = tuple(row_shape[-2:]) if len(row_shape) == 3 else None
    return int(_flops(model, hw)[1])
