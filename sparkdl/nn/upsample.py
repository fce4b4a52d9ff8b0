"""Spatial upsampling: :class:`Upsample` (nearest neighbour, bilinear), no parameters."""
from __future__ import annotations

import math
import numbers

import numpy as np

from sparkdl.kernels import upsample as K
from sparkdl.nn._checks import check_input, check_positive_int
from sparkdl.nn.module import Module

__all__ = ["Upsample"]

_MODES = ("nearest", "bilinear")


def _axis_nearest(n_in: int, n_out: int, scale, dtype):
    """PyTorch's ``nearest_idx``: ``min(floor(i * s), n_in - 1)`` in the input dtype, ``s = 1/scale_factor``
    when a scale factor was given, else ``n_in / n_out``; exact shortcuts for equal and doubled sizes."""
    i = np.arange(n_out)
    if n_out == n_in:
        return i
    if n_out == 2 * n_in:
        return i >> 1
    s = dtype.type(1.0 / scale) if scale else dtype.type(n_in) / dtype.type(n_out)
    return np.minimum(np.floor(i.astype(dtype) * s).astype(np.int64), n_in - 1)


def _axis_linear(n_in: int, n_out: int, scale, align_corners: bool, dtype):
    """PyTorch's ``area_pixel_compute_scale`` / ``compute_indices_weights_linear``, in the input dtype:
    source indices ``i0``, ``i1`` and weights ``l0``, ``l1``."""
    t = dtype.type
    if align_corners:
        s = t(n_in - 1) / t(n_out - 1) if n_out > 1 else t(0)
        src = np.arange(n_out).astype(dtype) * s
    else:
        s = t(1.0 / scale) if scale else t(n_in) / t(n_out)
        src = s * (np.arange(n_out).astype(dtype) + t(0.5)) - t(0.5)
        src = np.maximum(src, t(0))
    i0 = src.astype(np.int64)  # src >= 0: truncation is floor
    l1 = np.clip(src - i0.astype(dtype), t(0), t(1)).astype(dtype)
    i1 = i0 + (i0 < n_in - 1)
    return i0, i1, (t(1) - l1).astype(dtype), l1


class Upsample(Module):
    r"""Upsample (N, C, H, W) images by nearest-neighbour or bilinear interpolation.

    Parameters
    ----------
    size : int or (int, int), optional
        Output size (H_out, W_out). Exactly one of ``size`` and ``scale_factor``.
    scale_factor : float or (float, float), optional
        Multiplier of H and W; ``H_out = floor(H * scale_factor[0])`` (W likewise). The source coordinate
        of an output pixel then uses ``1 / scale_factor`` (PyTorch with ``recompute_scale_factor=None``).
    mode : {'nearest', 'bilinear'}, default 'nearest'
        Nearest: output ``(i, j)`` copies input ``(floor(i * H / H_out), floor(j * W / W_out))``.
        Bilinear: weighted mean of the 4 nearest input pixels.
    align_corners : bool, optional
        Bilinear only (default False): True maps the corner pixels' centres onto each other
        (``src = i * (H - 1) / (H_out - 1)``); False maps pixel areas (``src = (i + 0.5) * H / H_out - 0.5``,
        clamped at 0).

    Shapes
    ------
    input (N, C, H, W) → output (N, C, H_out, W_out).

    Raises
    ------
    TypeError, ValueError
        Both or neither of ``size``/``scale_factor``; non-positive sizes or factors; an unknown ``mode``;
        ``align_corners`` with ``mode='nearest'``; an input that is not 4-D or has the wrong dtype.

    Notes
    -----
    Source indices and weights are computed per axis in the input's dtype exactly as PyTorch's CPU kernels
    do, so outputs match to float rounding. Reference: ``torch.nn.Upsample``.
    """

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners: bool | None = None):
        super().__init__()
        if (size is None) == (scale_factor is None):
            raise ValueError(f"Upsample: give exactly one of size and scale_factor, got size={size!r}, "
                             f"scale_factor={scale_factor!r}")
        if mode not in _MODES:
            raise ValueError(f"Upsample: mode must be one of {list(_MODES)}, got {mode!r}")
        if mode == "nearest" and align_corners is not None:
            raise ValueError("Upsample: align_corners can only be set with mode='bilinear', got "
                             f"align_corners={align_corners!r} with mode='nearest'")
        if align_corners is not None and not isinstance(align_corners, (bool, np.bool_)):
            raise TypeError(f"Upsample: align_corners must be a bool or None, got {type(align_corners).__name__}")
        self.mode = mode
        self.align_corners = None if align_corners is None else bool(align_corners)
        self.size = None if size is None else self._pair(size, "size", check_positive_int)
        self.scale_factor = None if scale_factor is None else self._pair(scale_factor, "scale_factor", _factor)

    @staticmethod
    def _pair(value, arg, check):
        values = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
        if len(values) != 2:
            raise ValueError(f"Upsample: {arg} must be a number or a pair, got {value!r}")
        return tuple(check("Upsample", arg, v) for v in values)

    def output_size(self, h: int, w: int) -> tuple[int, int]:
        """``(H_out, W_out)`` for an input of spatial size ``(h, w)``."""
        if self.size is not None:
            return self.size
        return math.floor(h * self.scale_factor[0]), math.floor(w * self.scale_factor[1])

    def _tables(self, h, w, dtype):
        ho, wo = self.output_size(h, w)
        scales = self.scale_factor or (None, None)
        if self.mode == "nearest":
            hi, wi = _axis_nearest(h, ho, scales[0], dtype), _axis_nearest(w, wo, scales[1], dtype)
            empty = np.zeros(0, dtype)
            return hi, hi, empty, empty, wi, wi, empty, empty
        corners = bool(self.align_corners)
        return _axis_linear(h, ho, scales[0], corners, dtype) + _axis_linear(w, wo, scales[1], corners, dtype)

    def forward(self, x, *, training=False, rng=None):
        check_input(self, x, 4)
        n, c, h, w = x.shape
        ho, wo = self.output_size(h, w)
        if ho < 1 or wo < 1:
            raise ValueError(f"Upsample: input spatial size ({h}, {w}) with scale_factor={self.scale_factor} "
                             f"gives output size ({ho}, {wo}); it must be at least 1")
        tables = self._tables(h, w, x.dtype)
        planes = np.ascontiguousarray(x).reshape(n * c, h, w)
        y = K.upsample_forward(planes, *tables, self.mode == "nearest")
        return y.reshape(n, c, ho, wo), (x.shape, tables)

    def backward(self, cache, grad_y, grad_params):
        shape, tables = cache
        gy = np.ascontiguousarray(grad_y).reshape(-1, grad_y.shape[2], grad_y.shape[3])
        return K.upsample_backward(gy, shape[2], shape[3], *tables, self.mode == "nearest").reshape(shape)

    def get_config(self):
        return {"size": None if self.size is None else list(self.size),
                "scale_factor": None if self.scale_factor is None else list(self.scale_factor),
                "mode": self.mode, "align_corners": self.align_corners}


def _factor(layer: str, arg: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{layer}: {arg} must be a positive real number, got {type(value).__name__}")
    if not value > 0:
        raise ValueError(f"{layer}: {arg} must be > 0, got {value!r}")
    return float(value)
