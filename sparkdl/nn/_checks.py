"""Input validation shared by layers and losses: errors name the layer, what was expected and what came."""
from __future__ import annotations

import numpy as np

__all__ = ["check_array", "check_input", "check_positive_int", "check_pair", "check_bool"]


def check_array(layer, x, what: str = "input") -> None:
    """Check that a layer input ``x`` is a numpy array of the layer's dtype.

    Raises
    ------
    TypeError
        If ``x`` is not a numpy array or its dtype differs from the layer's parameter dtype (the message names
        the layer's class and ``what``).
    """
    name = type(layer).__name__
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name}: {what} must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype != layer.dtype:
        raise TypeError(f"{name}: {what} dtype must be {layer.dtype} (the layer's dtype), got {x.dtype}; "
                        f"convert with x.astype(np.{layer.dtype})")


def check_input(layer, x, ndims, *, axis: int | None = None, size: int | None = None, what: str = "input"):
    """Validate a layer input's type, dtype, rank and (optionally) one axis size.

    Parameters
    ----------
    layer : Module
        The layer doing the check (its class name goes into the message).
    x : array
        The input.
    ndims : int or tuple of int
        Allowed ranks.
    axis, size : int, optional
        If given, ``x.shape[axis]`` must equal ``size``.

    Raises
    ------
    TypeError
        If ``x`` is not a numpy array or its dtype differs from the layer's parameter dtype.
    ValueError
        If the rank or the checked axis size is wrong.
    """
    check_array(layer, x, what)
    name = type(layer).__name__
    ndims = (ndims,) if isinstance(ndims, int) else tuple(ndims)
    if x.ndim not in ndims:
        expect = " or ".join(f"{d}-D" for d in ndims)
        raise ValueError(f"{name}: expected {expect} {what}, got {x.ndim}-D with shape {x.shape}")
    if axis is not None and x.shape[axis] != size:
        raise ValueError(f"{name}: expected {what}.shape[{axis}] == {size}, got shape {x.shape}")


def check_positive_int(layer_name: str, arg: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{layer_name}: {arg} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{layer_name}: {arg} must be >= {minimum}, got {value}")
    return int(value)


def check_pair(layer_name: str, arg: str, value, minimum: int = 1) -> tuple[int, int]:
    """Normalise an int or a pair of ints (PyTorch's ``_pair``) and range-check both entries."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{layer_name}: {arg} must be an int or a pair of ints, got {value!r}")
        return (check_positive_int(layer_name, arg, value[0], minimum),
                check_positive_int(layer_name, arg, value[1], minimum))
    v = check_positive_int(layer_name, arg, value, minimum)
    return (v, v)


def check_bool(layer_name: str, arg: str, value) -> bool:
    """``bool(value)`` after checking it is a bool (Python or numpy); TypeError naming ``arg`` otherwise."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{layer_name}: {arg} must be a bool, got {type(value).__name__}")
    return bool(value)
