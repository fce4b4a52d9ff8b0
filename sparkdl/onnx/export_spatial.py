"""ONNX exporters of the image layers beyond convolution and pooling, registered into
:data:`sparkdl.onnx.export_ops.EXPORTERS`, as ``torch.onnx.export`` writes the PyTorch layers:

- :class:`~sparkdl.nn.ConvTranspose2d` -> ``ConvTranspose`` (symmetric pads, output_padding);
- :class:`~sparkdl.nn.GroupNorm` -> ``InstanceNormalization`` when every channel is its own group, else
  ``Reshape(N, G, -1)`` -> ``InstanceNormalization`` (unit scale) -> ``Reshape`` back -> ``Mul``/``Add`` by
  the per-channel weight and bias;
- :class:`~sparkdl.nn.Upsample` -> ``Resize``: nearest as ``asymmetric``/``floor``, bilinear as
  ``half_pixel`` or ``align_corners``; a ``scale_factor`` as constant scales, a ``size`` as sizes over
  axes (2, 3) (opset 18 and later: earlier Resize needs the batch size in ``sizes``).
"""
from __future__ import annotations

import numpy as np

from sparkdl import nn
from sparkdl.onnx.export_ops import EXPORTERS, _join, _param

__all__: list[str] = []  # exporters register themselves


def _conv_transpose(m, path, x, shape, em):
    args = [x, _param(em, m, path, "weight")] + ([_param(em, m, path, "bias")] if m.use_bias else [])
    (ph, pw) = m.padding
    return em.node("ConvTranspose", args, path, kernel_shape=list(m.kernel_size), strides=list(m.stride),
                   pads=[ph, pw, ph, pw], output_padding=list(m.output_padding), dilations=list(m.dilation),
                   group=m.groups)


def _group_norm(m, path, x, shape, em):
    c, g = m.num_channels, m.num_groups
    weight = _param(em, m, path, "weight") if m.affine else None
    bias = _param(em, m, path, "bias") if m.affine else None
    if g == c:
        scale = weight or em.tensor(_join(path, "ones"), np.ones(c))  # not named as weights: imports non-affine
        return em.node("InstanceNormalization", [x, scale, bias or em.tensor(_join(path, "zeros"), np.zeros(c))],
                       path, epsilon=m.eps)
    grouped = em.node("Reshape", [x, em.tensor(_join(path, "group_shape"), np.array([0, g, -1]))], path)
    y = em.node("InstanceNormalization", [grouped, em.tensor(_join(path, "ones"), np.ones(g)),
                                          em.tensor(_join(path, "zeros"), np.zeros(g))], path, epsilon=m.eps)
    y = em.node("Reshape", [y, em.tensor(_join(path, "shape"), np.array([0, *shape[1:]]))], path)
    if not m.affine:
        return y
    per_channel = (c,) + (1,) * (len(shape) - 2)
    y = em.node("Mul", [y, em.tensor(_join(path, "weight"), np.asarray(m.weight).reshape(per_channel))], path)
    return em.node("Add", [y, em.tensor(_join(path, "bias"), np.asarray(m.bias).reshape(per_channel))], path)


def _upsample(m, path, x, shape, em):
    if m.mode == "nearest":
        attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    else:
        attrs = {"mode": "linear", "coordinate_transformation_mode": "align_corners" if m.align_corners
                 else "half_pixel"}
    if m.scale_factor is not None:
        scales = em.tensor(_join(path, "scales"), np.array([1.0, 1.0, *m.scale_factor]))
        return em.node("Resize", [x, "", scales], path, **attrs)
    if em.opset < 18:
        raise ValueError(f"sparkdl.onnx.save: {path} (Upsample with size={m.size}) needs opset >= 18 (Resize over "
                         f"axes), got {em.opset}; or use scale_factor")
    sizes = em.tensor(_join(path, "sizes"), np.array(m.size))
    return em.node("Resize", [x, "", "", sizes], path, axes=[2, 3], **attrs)


EXPORTERS.update({nn.ConvTranspose2d: _conv_transpose, nn.GroupNorm: _group_norm, nn.Upsample: _upsample})
