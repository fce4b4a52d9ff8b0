"""Losses over class indices: cross-entropy (from logits) and negative log-likelihood (from log-probabilities)."""
from __future__ import annotations

import numbers

import numpy as np

from sparkdl.kernels import loss as K
from sparkdl.nn.loss.base import Loss, _check_float_input, _float_vector

__all__ = ["CrossEntropyLoss", "NLLLoss"]

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
