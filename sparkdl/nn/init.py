"""Parameter initializers with an explicit generator.

Each initializer fills ``array`` **in place** from a ``numpy.random.Generator`` and returns it. Fan-in and
fan-out follow PyTorch's ``torch.nn.init._calculate_fan_in_and_fan_out``: for a weight of shape
``(out, in, *kernel)``, ``fan_in = in * prod(kernel)`` and ``fan_out = out * prod(kernel)``.

References
----------
Glorot & Bengio (2010), "Understanding the difficulty of training deep feedforward neural networks".
He et al. (2015), "Delving Deep into Rectifiers", arXiv:1502.01852.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["calculate_fan_in_and_fan_out", "calculate_gain", "zeros_", "ones_", "constant_", "normal_",
           "uniform_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
           "default_layer_init_"]


def _check(array, rng, name, random=False):
    if not isinstance(array, np.ndarray) or array.dtype.kind != "f":
        raise TypeError(f"{name}: array must be a floating-point numpy.ndarray, got "
                        f"{type(array).__name__}{'' if not isinstance(array, np.ndarray) else ' of ' + str(array.dtype)}")
    if (random or rng is not None) and not isinstance(rng, np.random.Generator):
        raise TypeError(f"{name}: rng must be a numpy.random.Generator, got {type(rng).__name__}")


def _skip(array, rng, name) -> bool:
    """Validate a fan-based initializer's arguments; True for a zero-element array (a no-op, as PyTorch)."""
    _check(array, rng, name, random=True)
    if array.ndim < 2:
        raise ValueError(f"{name}: fan in/out need an array with >= 2 dimensions, got shape {array.shape}")
    return array.size == 0


def calculate_fan_in_and_fan_out(shape) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight shape ``(out, in, *kernel)``.

    Raises
    ------
    ValueError
        For shapes with fewer than 2 dimensions.
    """
    if len(shape) < 2:
        raise ValueError(f"fan in/out need a weight with >= 2 dimensions, got shape {tuple(shape)}")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return int(shape[1]) * receptive, int(shape[0]) * receptive


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """Recommended gain for a nonlinearity (PyTorch's table): linear/conv*/conv_transpose*/sigmoid 1,
    tanh 5/3, relu sqrt(2), leaky_relu sqrt(2/(1+slope^2)) with default slope 0.01, selu 3/4."""
    table = {"linear": 1.0, "conv1d": 1.0, "conv2d": 1.0, "conv3d": 1.0, "conv_transpose1d": 1.0,
             "conv_transpose2d": 1.0, "conv_transpose3d": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3,
             "relu": math.sqrt(2.0), "selu": 0.75}
    if nonlinearity == "leaky_relu":
        if param is not None and (isinstance(param, bool) or not isinstance(param, (int, float, np.number))):
            raise ValueError(f"calculate_gain: leaky_relu negative slope must be a number, got {param!r}")
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity not in table:
        raise ValueError(f"calculate_gain: nonlinearity must be one of {sorted(table) + ['leaky_relu']}, "
                         f"got {nonlinearity!r}")
    return table[nonlinearity]


def zeros_(array: np.ndarray, rng=None) -> np.ndarray:
    """Fill with 0."""
    _check(array, rng, "zeros_")
    array[...] = 0
    return array


def ones_(array: np.ndarray, rng=None) -> np.ndarray:
    """Fill with 1."""
    _check(array, rng, "ones_")
    array[...] = 1
    return array


def constant_(array: np.ndarray, value: float, rng=None) -> np.ndarray:
    """Fill with ``value``."""
    _check(array, rng, "constant_")
    array[...] = value
    return array


def uniform_(array: np.ndarray, rng: np.random.Generator, a: float = 0.0, b: float = 1.0) -> np.ndarray:
    """Fill with samples of U(a, b)."""
    _check(array, rng, "uniform_", random=True)
    if not b >= a:
        raise ValueError(f"uniform_: need a <= b, got a={a}, b={b}")
    array[...] = rng.uniform(a, b, size=array.shape)
    return array


def normal_(array: np.ndarray, rng: np.random.Generator, mean: float = 0.0, std: float = 1.0) -> np.ndarray:
    """Fill with samples of N(mean, std^2)."""
    _check(array, rng, "normal_", random=True)
    if not std >= 0:
        raise ValueError(f"normal_: std must be >= 0, got {std}")
    array[...] = rng.normal(mean, std, size=array.shape)
    return array


def xavier_uniform_(array: np.ndarray, rng: np.random.Generator, gain: float = 1.0) -> np.ndarray:
    """Glorot uniform: U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))``."""
    if _skip(array, rng, "xavier_uniform_"):
        return array
    fan_in, fan_out = calculate_fan_in_and_fan_out(array.shape)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(array, rng, -a, a)


def xavier_normal_(array: np.ndarray, rng: np.random.Generator, gain: float = 1.0) -> np.ndarray:
    """Glorot normal: N(0, std^2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    if _skip(array, rng, "xavier_normal_"):
        return array
    fan_in, fan_out = calculate_fan_in_and_fan_out(array.shape)
    return normal_(array, rng, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _kaiming_std(shape, a, mode, nonlinearity):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"kaiming: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = calculate_fan_in_and_fan_out(shape)
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(array: np.ndarray, rng: np.random.Generator, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu") -> np.ndarray:
    """He uniform: U(-b, b) with ``b = gain * sqrt(3 / fan)``, ``gain = calculate_gain(nonlinearity, a)``.

    PyTorch's default ``Linear``/``Conv2d`` weight init is ``kaiming_uniform_(w, a=sqrt(5))``, i.e.
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    """
    if _skip(array, rng, "kaiming_uniform_"):
        return array
    bound = math.sqrt(3.0) * _kaiming_std(array.shape, a, mode, nonlinearity)
    return uniform_(array, rng, -bound, bound)


def kaiming_normal_(array: np.ndarray, rng: np.random.Generator, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu") -> np.ndarray:
    """He normal: N(0, std^2) with ``std = gain / sqrt(fan)``."""
    if _skip(array, rng, "kaiming_normal_"):
        return array
    return normal_(array, rng, 0.0, _kaiming_std(array.shape, a, mode, nonlinearity))


def default_layer_init_(weight: np.ndarray, bias: np.ndarray | None, rng: np.random.Generator) -> None:
    """PyTorch's default ``reset_parameters`` of ``Linear`` and the ``Conv*``/``ConvTranspose*`` layers, in place:
    ``kaiming_uniform_(weight, a=sqrt(5))`` and the bias (if any) from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
    ``fan_in`` computed from the weight's shape."""
    kaiming_uniform_(weight, rng, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = calculate_fan_in_and_fan_out(weight.shape)
        bound = 1.0 / math.sqrt(fan_in)
        uniform_(bias, rng, -bound, bound)
