"""The :class:`Loss` contract (reductions, normalizers, the registry) and the input checks the losses share."""
from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ["Loss", "LOSS_REGISTRY"]

#: Every public Loss subclass by class name (persistence rebuilds a loss from its name and config).
LOSS_REGISTRY: dict[str, type] = {}
_REDUCTIONS = ("mean", "sum", "none")


def _check_float_input(name, x, min_ndim):
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name}: input must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"{name}: input dtype must be float32 or float64, got {x.dtype}; "
                        f"convert with input.astype(np.float32)")
    if x.ndim < min_ndim:
        raise ValueError(f"{name}: input must have at least {min_ndim} dimensions, got shape {x.shape}")


def _float_vector(name, arg, value):
    """Validate an optional 1-D finite weight vector; returns float64 array or None."""
    if value is None:
        return None
    try:
        w = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: {arg} must be a 1-D sequence of floats, got {type(value).__name__}") from None
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)):
        raise ValueError(f"{name}: {arg} must be a non-empty 1-D array of finite floats, got shape {w.shape}")
    return w


class Loss:
    """Base class of every loss.

    Subclasses implement ``_compute(input, target) -> (losses, normalizer, state)`` (float64 per-sample
    losses), ``_backward(state, g) -> grad_input`` (``g`` a float or a float64 array shaped like ``losses``)
    and :meth:`normalizer`, and put their constructor arguments in :meth:`get_config`.

    Parameters
    ----------
    reduction : {'mean', 'sum', 'none'}
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not cls.__name__.startswith("_"):
            LOSS_REGISTRY[cls.__name__] = cls

    def __init__(self, reduction: str = "mean"):
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{type(self).__name__}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        self.reduction = reduction

    def forward(self, input: np.ndarray, target: np.ndarray):
        """Return ``(value, cache)``: the reduced loss (Python float; an array for ``'none'``) and what
        :meth:`backward` needs."""
        losses, norm, state = self._compute(input, target)
        if self.reduction == "none":
            value = losses.astype(input.dtype)
        else:
            total = float(np.sum(losses))
            value = total if self.reduction == "sum" else (total / norm if norm != 0 else math.nan)
        return value, (state, norm, losses.shape)

    def backward(self, cache, grad=1.0) -> np.ndarray:
        """Gradient of ``grad * value`` with respect to ``input`` (same shape and dtype as ``input``).

        ``grad`` is a real scalar; with ``reduction='none'`` it may also be an array shaped like the value.
        """
        state, norm, shape = cache
        if self.reduction == "none":
            g = np.asarray(grad, dtype=np.float64)
            if g.shape not in ((), shape):
                raise ValueError(f"{type(self).__name__}.backward: grad must be a scalar or have the loss "
                                 f"shape {shape}, got shape {g.shape}")
            return self._backward(state, float(g) if g.ndim == 0 else g)
        if not isinstance(grad, numbers.Real) and not (isinstance(grad, np.ndarray) and grad.shape == ()):
            raise TypeError(f"{type(self).__name__}.backward: grad must be a real scalar for reduction="
                            f"{self.reduction!r}, got {type(grad).__name__}")
        g = float(grad)
        if self.reduction == "mean":
            g = g / norm if norm != 0 else math.nan
        return self._backward(state, g)

    def __call__(self, input: np.ndarray, target: np.ndarray):
        """The loss value only."""
        return self.forward(input, target)[0]

    def normalizer(self, target: np.ndarray) -> float:
        """The denominator of ``reduction='mean'`` for this ``target``."""
        raise NotImplementedError

    def normalizer_weights(self, target: np.ndarray) -> np.ndarray:
        """Each loss element's share of :meth:`normalizer` (shaped like the ``'none'`` value; they sum to it).

        :class:`SampleWeightedLoss` scales these by the sample weights."""
        raise NotImplementedError(f"{type(self).__name__} does not define normalizer_weights, so it cannot be "
                                  "used with per-sample weights")

    def _compute(self, input, target):
        raise NotImplementedError

    def _backward(self, state, g):
        raise NotImplementedError

    def get_config(self) -> dict:
        """Constructor keyword arguments (JSON-serialisable)."""
        return {"reduction": self.reduction}

    @classmethod
    def from_config(cls, config: dict) -> "Loss":
        return cls(**config)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{k}={v!r}" for k, v in self.get_config().items()) + ")"



def _broadcasts(weight, shape) -> bool:
    try:
        return np.broadcast_shapes(weight.shape, shape) == shape
    except ValueError:
        return False
