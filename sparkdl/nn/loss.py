"""Loss functions with PyTorch semantics and an explicit cache: ``value, cache = loss.forward(input, target)``,
``grad_input = loss.backward(cache, grad=1.0)``.

Reductions: ``'mean'`` divides the summed loss by :meth:`Loss.normalizer` (N for unweighted
cross-entropy, the summed target-class weights with ``weight``, the element count for element-wise losses),
``'sum'`` returns the sum, ``'none'`` the per-sample (per-element) losses. ``mean == sum / normalizer`` holds
exactly, which is what the distributed engine relies on: every partition computes the ``'sum'`` loss and its
normalizer, the driver divides the global sums. Values are Python floats (``'none'``: arrays of the input's
dtype); sums accumulate in float64.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from sparkdl.kernels import loss as K

__all__ = ["Loss", "LOSS_REGISTRY", "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss",
           "BCEWithLogitsLoss", "BCELoss", "SampleWeightedLoss"]

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


class _ClassIndexLoss(Loss):
    """Shared validation for losses over class scores (N, C, *d) and integer labels (N, *d)."""

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean"):
        super().__init__(reduction)
        name = type(self).__name__
        self.weight = _float_vector(name, "weight", weight)
        if isinstance(ignore_index, bool) or not isinstance(ignore_index, (int, np.integer)):
            raise TypeError(f"{name}: ignore_index must be an int, got {type(ignore_index).__name__}")
        self.ignore_index = int(ignore_index)

    def _check_labels(self, target, shape=None):
        name = type(self).__name__
        if not isinstance(target, np.ndarray):
            raise TypeError(f"{name}: target must be a numpy.ndarray of class indices, got {type(target).__name__}")
        if target.dtype.kind not in "iu":
            raise TypeError(f"{name}: target must hold integer class indices, got dtype {target.dtype}; "
                            f"convert with target.astype(np.int64)")
        if shape is not None and target.shape != shape:
            raise ValueError(f"{name}: target shape must be {shape} (input shape without the class axis 1), "
                             f"got {target.shape}")
        if target.ndim < 1:
            raise ValueError(f"{name}: target must have at least 1 dimension (N,), got shape {target.shape}")
        labels = target.astype(np.int64, copy=False)
        num_classes = None if self.weight is None else self.weight.size
        return labels, num_classes

    def _check_range(self, labels, num_classes, source):
        bad = ((labels < 0) | (labels >= num_classes)) & (labels != self.ignore_index)
        if bad.any():
            first = int(np.argmax(bad.reshape(-1)))
            index = ", ".join(str(int(i)) for i in np.unravel_index(first, labels.shape))
            raise ValueError(f"{type(self).__name__}: target[{index}] = {labels.reshape(-1)[first]} is not a class "
                             f"index in [0, {num_classes - 1}] ({source}) nor ignore_index={self.ignore_index}")

    def _norm(self, labels) -> float:
        valid = labels != self.ignore_index
        if self.weight is None:
            return float(np.count_nonzero(valid))
        return float(np.sum(self.weight[labels[valid]]))

    def normalizer(self, target: np.ndarray) -> float:
        """Number of non-ignored targets, or their summed class weights when ``weight`` is given."""
        labels, num_classes = self._check_labels(target)
        if num_classes is not None:
            self._check_range(labels, num_classes, "C = len(weight)")
        return self._norm(labels)

    def normalizer_weights(self, target: np.ndarray) -> np.ndarray:
        """1 per non-ignored target (its class weight when ``weight`` is given), 0 per ignored one."""
        labels, num_classes = self._check_labels(target)
        if num_classes is not None:
            self._check_range(labels, num_classes, "C = len(weight)")
        valid = labels != self.ignore_index
        if self.weight is None:
            return valid.astype(np.float64)
        return np.where(valid, self.weight[np.where(valid, labels, 0)], 0.0)

    def _prepare(self, input, target):
        """Validate; return (scores as contiguous (M, C), labels (M,) int64, class weights (C,) float64)."""
        name = type(self).__name__
        _check_float_input(name, input, 2)
        c = input.shape[1]
        labels, _ = self._check_labels(target, input.shape[:1] + input.shape[2:])
        if self.weight is not None and self.weight.size != c:
            raise ValueError(f"{name}: weight has {self.weight.size} entries but the input has C = {c} classes "
                             f"(input.shape[1])")
        self._check_range(labels, c, "C = input.shape[1]")
        z = np.ascontiguousarray(np.moveaxis(input, 1, -1)).reshape(-1, c)
        weight = np.ones(c, np.float64) if self.weight is None else self.weight
        return z, labels.reshape(-1), weight

    @staticmethod
    def _restore(grad2, input_shape):
        """(M, C) gradient back to the input layout (N, C, *d)."""
        moved = grad2.reshape(input_shape[:1] + input_shape[2:] + input_shape[1:2])
        return np.ascontiguousarray(np.moveaxis(moved, -1, 1))

    @staticmethod
    def _row_scale(g, m):
        return np.full(m, g, np.float64) if np.ndim(g) == 0 else np.ascontiguousarray(g, np.float64).reshape(-1)

    def get_config(self):
        return {"weight": None if self.weight is None else self.weight.tolist(), "ignore_index": self.ignore_index,
                "reduction": self.reduction}


class CrossEntropyLoss(_ClassIndexLoss):
    r"""Softmax cross-entropy between logits and integer class labels.

    :math:`\ell_i = (1-\varepsilon)\, w_{y_i} (\mathrm{lse}(z_i) - z_{i,y_i})
    + \frac{\varepsilon}{C} \sum_c w_c (\mathrm{lse}(z_i) - z_{i,c})`, with ``lse`` the log-sum-exp
    (computed stably in float64, so logits of 1e4 give exact finite values).

    Parameters
    ----------
    weight : sequence of C floats, optional
        Class weights :math:`w` (default all ones).
    ignore_index : int, default -100
        Targets equal to it contribute neither loss nor normalizer.
    label_smoothing : float in [0, 1], default 0
        :math:`\varepsilon`: the target mixes the one-hot label with the uniform distribution.
    reduction : {'mean', 'sum', 'none'}, default 'mean'
        ``'mean'`` divides by :math:`\sum_i w_{y_i}` over non-ignored targets (N without weights).

    Shapes
    ------
    - input: (N, C) or (N, C, d1, ...) float32/float64 logits
    - target: (N,) or (N, d1, ...) integer labels in [0, C) (or ``ignore_index``)
    - ``'none'`` value: target's shape

    Raises
    ------
    TypeError
        Non-float input, non-integer target.
    ValueError
        Bad rank or shape, wrong ``weight`` length, a label out of range (the first offending index and value
        are named), invalid ``reduction`` / ``label_smoothing``.

    References
    ----------
    ``torch.nn.CrossEntropyLoss``; Szegedy et al. (2016), "Rethinking the Inception Architecture" (label
    smoothing).
    """

    def __init__(self, weight=None, ignore_index: int = -100, label_smoothing: float = 0.0,
                 reduction: str = "mean"):
        super().__init__(weight, ignore_index, reduction)
        if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, numbers.Real):
            raise TypeError(f"CrossEntropyLoss: label_smoothing must be a float, got {type(label_smoothing).__name__}")
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"CrossEntropyLoss: label_smoothing must be in [0, 1], got {label_smoothing}")
        self.label_smoothing = float(label_smoothing)

    def _compute(self, input, target):
        z, labels, weight = self._prepare(input, target)
        losses, lse = K.cross_entropy_forward(z, labels, weight, self.ignore_index, self.label_smoothing)
        return losses.reshape(target.shape), self._norm(labels), (z, lse, labels, weight, input.shape)

    def _backward(self, state, g):
        z, lse, labels, weight, shape = state
        grad = K.cross_entropy_backward(z, lse, labels, weight, self.ignore_index, self.label_smoothing,
                                        self._row_scale(g, labels.size))
        return self._restore(grad, shape)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}


class NLLLoss(_ClassIndexLoss):
    r"""Negative log-likelihood of log-probabilities: :math:`\ell_i = -w_{y_i}\, x_{i, y_i}`.

    Use after a LogSoftmax layer (``CrossEntropyLoss`` on logits is the fused, stabler form).
    Parameters, shapes, reductions and errors as :class:`CrossEntropyLoss` (without ``label_smoothing``).
    Reference: ``torch.nn.NLLLoss``.
    """

    def _compute(self, input, target):
        x, labels, weight = self._prepare(input, target)
        rows = np.flatnonzero(labels != self.ignore_index)
        cols = labels[rows]
        losses = np.zeros(labels.size, np.float64)
        losses[rows] = -weight[cols] * x[rows, cols]
        return losses.reshape(target.shape), self._norm(labels), (x.shape, x.dtype, rows, cols, weight[cols],
                                                                 input.shape)

    def _backward(self, state, g):
        shape2, dtype, rows, cols, w, shape = state
        grad = np.zeros(shape2, dtype)
        grad[rows, cols] = -w * (g if np.ndim(g) == 0 else np.asarray(g).reshape(-1)[rows])
        return self._restore(grad, shape)


class _ElementwiseLoss(Loss):
    """Losses on input and target of one shape, averaged over all elements."""

    def _pair(self, input, target):
        name = type(self).__name__
        _check_float_input(name, input, 1)
        if not isinstance(target, np.ndarray) or target.dtype.kind not in "fiub":
            what = target.dtype if isinstance(target, np.ndarray) else type(target).__name__
            raise TypeError(f"{name}: target must be a real-valued numpy.ndarray, got {what}")
        if target.shape != input.shape:
            raise ValueError(f"{name}: target shape {target.shape} must equal input shape {input.shape} "
                             f"(no broadcasting; reshape one of them)")
        return np.ascontiguousarray(target, dtype=input.dtype)

    def normalizer(self, target: np.ndarray) -> float:
        """Number of elements of ``target``."""
        if not isinstance(target, np.ndarray):
            raise TypeError(f"{type(self).__name__}: target must be a numpy.ndarray, got {type(target).__name__}")
        return float(target.size)

    def normalizer_weights(self, target: np.ndarray) -> np.ndarray:
        """1 per element."""
        if not isinstance(target, np.ndarray):
            raise TypeError(f"{type(self).__name__}: target must be a numpy.ndarray, got {type(target).__name__}")
        return np.ones(target.shape, np.float64)

    def _compute(self, input, target):
        t = self._pair(input, target)
        d = input - t
        losses, state = self._elementwise(d)
        return losses, float(d.size), state

    @staticmethod
    def _scaled(local_grad, g):
        return (local_grad * g).astype(local_grad.dtype, copy=False)


class MSELoss(_ElementwiseLoss):
    r"""Squared error :math:`\ell = (x - y)^2` per element. Shapes: input (*), target (*) of the same shape,
    float input. ``'mean'`` divides by the element count. Reference: ``torch.nn.MSELoss``."""

    def _elementwise(self, d):
        return np.square(d, dtype=np.float64), d

    def _backward(self, d, g):
        return self._scaled(d, 2.0 * g)


class L1Loss(_ElementwiseLoss):
    r"""Absolute error :math:`\ell = |x - y|` per element (gradient ``sign(x - y)``, 0 at 0).
    Shapes and reduction as :class:`MSELoss`. Reference: ``torch.nn.L1Loss``."""

    def _elementwise(self, d):
        return np.abs(d, dtype=np.float64), d

    def _backward(self, d, g):
        return self._scaled(np.sign(d), g)


class SmoothL1Loss(_ElementwiseLoss):
    r"""Huber-like loss: :math:`\ell = 0.5\, d^2 / \beta` if :math:`|d| < \beta` else :math:`|d| - 0.5\beta`,
    :math:`d = x - y`; ``beta=0`` is :class:`L1Loss`. Shapes and reduction as :class:`MSELoss`.

    Raises ValueError for ``beta < 0``. References: Girshick (2015), "Fast R-CNN"; ``torch.nn.SmoothL1Loss``.
    """

    def __init__(self, beta: float = 1.0, reduction: str = "mean"):
        super().__init__(reduction)
        if isinstance(beta, bool) or not isinstance(beta, numbers.Real):
            raise TypeError(f"SmoothL1Loss: beta must be a float, got {type(beta).__name__}")
        if not beta >= 0:
            raise ValueError(f"SmoothL1Loss: beta must be >= 0, got {beta}")
        self.beta = float(beta)

    def _elementwise(self, d):
        a = np.abs(d, dtype=np.float64)
        if self.beta == 0.0:
            return a, d
        quad = a < self.beta
        return np.where(quad, 0.5 * a * a / self.beta, a - 0.5 * self.beta), d

    def _backward(self, d, g):
        local = np.sign(d)
        if self.beta > 0.0:
            quad = np.abs(d) < self.beta
            local[quad] = d[quad] / d.dtype.type(self.beta)
        return self._scaled(local, g)

    def get_config(self):
        return {"beta": self.beta, **super().get_config()}


class BCEWithLogitsLoss(_ElementwiseLoss):
    r"""Sigmoid + binary cross-entropy, fused and stable:
    :math:`\ell = w\,[(1 - y)\,x + (1 + (p - 1) y)\,\mathrm{softplus}(-x)]`, i.e.
    :math:`-w\,[p\,y \log\sigma(x) + (1-y) \log(1-\sigma(x))]`.

    Parameters
    ----------
    weight : array_like, optional
        Per-element rescaling :math:`w`, broadcastable to the input shape (it never changes the input shape).
    pos_weight : sequence of C floats, optional
        Weight :math:`p` of positive examples per class, along the input's last axis (size C).
    reduction : {'mean', 'sum', 'none'}
        ``'mean'`` divides by the element count (as PyTorch; not by the weights).

    Shapes: input (*, C) float logits; target of the same shape with values in [0, 1].

    Raises
    ------
    TypeError, ValueError
        Non-float input; shape mismatch; ``weight`` not broadcastable; ``pos_weight`` not of size C.

    Reference: ``torch.nn.BCEWithLogitsLoss``.
    """

    def __init__(self, weight=None, pos_weight=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.weight = None if weight is None else np.array(weight, dtype=np.float64)
        if self.weight is not None and not np.all(np.isfinite(self.weight)):
            raise ValueError("BCEWithLogitsLoss: weight must be finite")
        self.pos_weight = _float_vector("BCEWithLogitsLoss", "pos_weight", pos_weight)

    def _compute(self, input, target):
        t = self._pair(input, target)
        x = np.ascontiguousarray(input)
        if self.weight is not None and not _broadcasts(self.weight, x.shape):
            raise ValueError(f"BCEWithLogitsLoss: weight of shape {self.weight.shape} does not broadcast to "
                             f"the input shape {x.shape}")
        pw = np.zeros(0, np.float64) if self.pos_weight is None else self.pos_weight
        if pw.size and pw.size != x.shape[-1]:
            raise ValueError(f"BCEWithLogitsLoss: pos_weight has {pw.size} entries but the input's last axis "
                             f"has C = {x.shape[-1]}")
        losses = K.bce_with_logits_forward(x.reshape(-1), t.reshape(-1), pw).reshape(x.shape)
        if self.weight is not None:
            losses = losses * self.weight
        return losses, float(x.size), (x, t, pw)

    def _backward(self, state, g):
        x, t, pw = state
        s = np.asarray(g, np.float64)
        if self.weight is not None:
            s = s * self.weight
        s = np.ascontiguousarray(np.broadcast_to(s, x.shape)).reshape(-1) if s.ndim else s.reshape(1)
        return K.bce_with_logits_backward(x.reshape(-1), t.reshape(-1), pw, s).reshape(x.shape)

    def get_config(self):
        return {"weight": None if self.weight is None else self.weight.tolist(),
                "pos_weight": None if self.pos_weight is None else self.pos_weight.tolist(),
                "reduction": self.reduction}


class BCELoss(_ElementwiseLoss):
    r"""Binary cross-entropy of probabilities:
    :math:`\ell = -w\,[y \max(\log x, -100) + (1 - y) \max(\log(1 - x), -100)]`.

    The logarithms are clamped at -100 as in PyTorch, so probabilities of exactly 0 or 1 (a saturated float32
    ``Sigmoid``) give a finite loss; the gradient is PyTorch's :math:`w (x - y) / \max(x (1 - x), 10^{-12})`.
    :class:`BCEWithLogitsLoss` on the logits is the stabler fused form.

    Parameters
    ----------
    weight : array_like, optional
        Per-element rescaling :math:`w`, broadcastable to the input shape.
    reduction : {'mean', 'sum', 'none'}
        ``'mean'`` divides by the element count (as PyTorch; not by the weights).

    Shapes: input (*) float probabilities in [0, 1]; target of the same shape with values in [0, 1].

    Raises
    ------
    TypeError, ValueError
        Non-float input; shape mismatch; ``weight`` not broadcastable or not finite; an input value outside
        [0, 1] (NaN included), naming the first one.

    Reference: ``torch.nn.BCELoss``.
    """

    def __init__(self, weight=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.weight = None if weight is None else np.array(weight, dtype=np.float64)
        if self.weight is not None and not np.all(np.isfinite(self.weight)):
            raise ValueError("BCELoss: weight must be finite")

    def _compute(self, input, target):
        t = self._pair(input, target)
        p = np.ascontiguousarray(input)
        outside = ~((p >= 0) & (p <= 1))
        if outside.any():
            first = int(np.argmax(outside.reshape(-1)))
            index = ", ".join(str(int(i)) for i in np.unravel_index(first, p.shape))
            raise ValueError(f"BCELoss: input must hold probabilities in [0, 1], got input[{index}] = "
                             f"{p.reshape(-1)[first]}; apply a Sigmoid first, or use BCEWithLogitsLoss on the logits")
        if self.weight is not None and not _broadcasts(self.weight, p.shape):
            raise ValueError(f"BCELoss: weight of shape {self.weight.shape} does not broadcast to the input shape "
                             f"{p.shape}")
        losses = K.bce_forward(p.reshape(-1), t.reshape(-1)).reshape(p.shape)
        if self.weight is not None:
            losses = losses * self.weight
        return losses, float(p.size), (p, t)

    def _backward(self, state, g):
        p, t = state
        s = np.asarray(g, np.float64)
        if self.weight is not None:
            s = s * self.weight
        s = np.ascontiguousarray(np.broadcast_to(s, p.shape)).reshape(-1) if s.ndim else s.reshape(1)
        return K.bce_backward(p.reshape(-1), t.reshape(-1), s).reshape(p.shape)

    def get_config(self):
        return {"weight": None if self.weight is None else self.weight.tolist(), "reduction": self.reduction}


def _broadcasts(weight, shape) -> bool:
    try:
        return np.broadcast_shapes(weight.shape, shape) == shape
    except ValueError:
        return False


class SampleWeightedLoss(Loss):
    r"""``loss`` with one weight per sample, for data that carry their weights next to their targets.

    With per-element losses :math:`\ell_{ij}` and normalizer shares :math:`n_{ij}` of the wrapped loss (for
    ``'none'`` and :meth:`Loss.normalizer_weights`: 1 per element, or the class weight of the target), and
    sample weights :math:`w_i \ge 0`:

    * ``'sum'``: :math:`\sum_{ij} w_i \ell_{ij}`;
    * ``'mean'``: :math:`\sum_{ij} w_i \ell_{ij} / \sum_{ij} w_i n_{ij}` — PySpark's weighted mean
      (``sum_i w_i loss_i / sum_i w_i`` for one loss element per sample); with all weights 1 it equals the wrapped
      loss, and an integer weight :math:`k` equals :math:`k` copies of the sample;
    * ``'none'``: :math:`w_i \ell_{ij}`.

    Parameters
    ----------
    loss : Loss or dict
        The wrapped loss (its own ``reduction`` is ignored), or ``{"class": name, "config": {...}}``.
    target_shape : sequence of int, default ()
        Per-sample shape of the wrapped loss's target, e.g. ``()`` for class indices, ``(K,)`` for K targets.
    target_dtype : str, default 'int64'
        dtype the wrapped target is converted to.
    reduction : {'mean', 'sum', 'none'}

    Shapes
    ------
    - input: what the wrapped loss takes, (N, ...)
    - target: (N, prod(target_shape) + 1) float: the flattened targets, then the weight in the last column

    Raises
    ------
    ValueError
        A target of the wrong shape, or a weight that is negative, NaN or infinite (naming the first one).
    """

    def __init__(self, loss, target_shape=(), target_dtype: str = "int64", reduction: str = "mean"):
        super().__init__(reduction)
        if isinstance(loss, dict):
            loss = LOSS_REGISTRY[loss["class"]].from_config(loss["config"])
        if not isinstance(loss, Loss):
            raise TypeError(f"SampleWeightedLoss: loss must be a sparkdl Loss, got {type(loss).__name__}")
        self.loss = loss
        self.target_shape = tuple(int(d) for d in target_shape)
        self.target_dtype = np.dtype(target_dtype).name

    def _split(self, target):
        if not isinstance(target, np.ndarray) or target.dtype.kind not in "fiu":
            raise TypeError(f"SampleWeightedLoss: target must be a numeric numpy.ndarray, got "
                            f"{getattr(target, 'dtype', type(target).__name__)}")
        m = int(np.prod(self.target_shape))
        if target.ndim != 2 or target.shape[1] != m + 1:
            raise ValueError(f"SampleWeightedLoss: target must have shape (N, {m + 1}) (the {m} target values of "
                             f"each sample, then its weight), got {target.shape}")
        w = target[:, m].astype(np.float64)
        bad = ~(np.isfinite(w) & (w >= 0))
        if bad.any():
            r = int(np.argmax(bad))
            raise ValueError(f"SampleWeightedLoss: sample weights must be finite and >= 0, got {w[r]} for sample {r}")
        t = target[:, :m].reshape(len(target), *self.target_shape).astype(self.target_dtype)
        return t, w

    @staticmethod
    def _per_element(w, like):
        return w.reshape(len(w), *([1] * (like.ndim - 1)))

    def normalizer_weights(self, target):
        t, w = self._split(target)
        share = self.loss.normalizer_weights(t)
        return share * self._per_element(w, share)

    def normalizer(self, target):
        """The summed weighted normalizer shares, :math:`\\sum_{ij} w_i n_{ij}`."""
        return float(np.sum(self.normalizer_weights(target)))

    def _compute(self, input, target):
        t, w = self._split(target)
        losses, _, state = self.loss._compute(input, t)
        scale = self._per_element(w, losses)
        share = self.loss.normalizer_weights(t)
        return losses * scale, float(np.sum(share * self._per_element(w, share))), (state, scale, losses.shape)

    def _backward(self, state, g):
        inner, scale, shape = state
        scaled = np.broadcast_to(np.asarray(g, np.float64) * scale, shape)
        return self.loss._backward(inner, np.ascontiguousarray(scaled))

    def get_config(self):
        return {"loss": {"class": type(self.loss).__name__, "config": self.loss.get_config()},
                "target_shape": list(self.target_shape), "target_dtype": self.target_dtype,
                "reduction": self.reduction}
