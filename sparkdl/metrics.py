"""Validation metrics as mergeable accumulators (BigDL's ``ValidationMethod``\\ s).

Every metric splits its computation into four pure functions over a plain-data *state* (numbers and
numpy arrays, no objects), so distributed evaluation is one ``treeReduce``::

    state = m.zero()
    state = m.update(state, output, target)     # once per batch, on each partition
    state = m.merge(state_a, state_b)           # associative: any merge tree gives the same result
    value = m.result(state)                     # a float

Merging the states of any partition of the data equals computing the state on all of it: counts and
sums add, and :class:`BinaryAUC` keeps exact per-distinct-score counts, not a histogram. ``update`` and
``merge`` never modify their arguments.

Metrics: :class:`Top1Accuracy`, :class:`TopKAccuracy`, :class:`Loss`, :class:`MAE`, :class:`MSE`,
:class:`BinaryAUC`. Class targets are 0-based integer class indices (PyTorch's convention, not BigDL's
1-based labels).
"""
from __future__ import annotations

import numpy as np

__all__ = ["ValidationMethod", "Top1Accuracy", "TopKAccuracy", "Loss", "MAE", "MSE", "BinaryAUC"]


def _as_array(metric: str, what: str, x) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{metric}: {what} must be a numpy.ndarray, got {type(x).__name__}")
    return x


def _class_targets(metric: str, target, n: int, num_classes: int | None = None) -> np.ndarray:
    """Validate class-index targets of shape (N,) (or (N, 1)) and return them as int64."""
    target = _as_array(metric, "target", target)
    if target.ndim == 2 and target.shape[1] == 1:
        target = target[:, 0]
    if target.ndim != 1 or target.shape[0] != n:
        raise ValueError(f"{metric}: target must have shape ({n},) (one class index per output row), "
                         f"got {target.shape}")
    if target.dtype.kind not in "iuf":
        raise TypeError(f"{metric}: target must hold class indices (integers), got dtype {target.dtype}")
    t = target.astype(np.int64)
    if target.dtype.kind == "f" and not np.array_equal(t, target):
        raise ValueError(f"{metric}: target must hold integer class indices, got non-integer values")
    if num_classes is not None and t.size and (t.min() < 0 or t.max() >= num_classes):
        raise ValueError(f"{metric}: class indices must be in [0, {num_classes}), got values in "
                         f"[{t.min()}, {t.max()}]")
    return t


class ValidationMethod:
    """Base class: a metric as a mergeable accumulator. Subclasses implement the four functions."""

    name = "ValidationMethod"

    def zero(self):
        """The empty state (a metric of no data)."""
        raise NotImplementedError

    def update(self, state, output: np.ndarray, target: np.ndarray):
        """A new state: ``state`` plus one batch (``output`` from the model, ``target`` from the data)."""
        raise NotImplementedError

    def merge(self, a, b):
        """The state of the union of the data behind ``a`` and ``b``."""
        raise NotImplementedError

    def result(self, state) -> float:
        """The metric's value; ``nan`` when it is undefined (e.g. no data)."""
        raise NotImplementedError

    def compute(self, output: np.ndarray, target: np.ndarray) -> float:
        """The metric of one batch: ``result(update(zero(), output, target))``."""
        return self.result(self.update(self.zero(), output, target))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _CountingMetric(ValidationMethod):
    """State ``{"total": float, "count": int}``; result ``total / count``."""

    def zero(self):
        return {"total": 0.0, "count": 0}

    def merge(self, a, b):
        return {"total": a["total"] + b["total"], "count": a["count"] + b["count"]}

    def result(self, state) -> float:
        return state["total"] / state["count"] if state["count"] else float("nan")


class TopKAccuracy(_CountingMetric):
    """Fraction of samples whose target class is among the ``k`` highest scores.

    Parameters
    ----------
    k : int
        How many top classes count as a hit (``k >= 1``).

    Shapes: ``output`` (N, C) scores (logits or probabilities); ``target`` (N,) class indices in [0, C).
    Ties are broken by the lower class index (a stable descending sort), so ``k=1`` agrees with
    ``argmax``. Name: ``"Top<k>Accuracy"``. Reference: BigDL ``Top5Accuracy``.

    Raises
    ------
    TypeError, ValueError
        On a bad ``k``, non-array inputs, mismatched shapes or out-of-range class indices.
    """

    def __init__(self, k: int = 5):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"TopKAccuracy: k must be an int, got {type(k).__name__}")
        if k < 1:
            raise ValueError(f"TopKAccuracy: k must be >= 1, got {k}")
        self.k = int(k)
        self.name = f"Top{self.k}Accuracy"

    def _scores(self, output):
        output = _as_array(self.name, "output", output)
        if output.ndim != 2:
            raise ValueError(f"{self.name}: output must have shape (N, C) (class scores), got {output.shape}")
        return output

    def update(self, state, output, target):
        output = self._scores(output)
        t = _class_targets(self.name, target, output.shape[0], output.shape[1])
        s_t = np.take_along_axis(output, t[:, None], axis=1)
        cols = np.arange(output.shape[1])
        rank = (output > s_t).sum(axis=1) + ((output == s_t) & (cols < t[:, None])).sum(axis=1)
        hits = int(np.count_nonzero(rank < self.k))
        return {"total": state["total"] + hits, "count": state["count"] + int(t.size)}

    def __repr__(self):
        return f"TopKAccuracy(k={self.k})"


class Top1Accuracy(TopKAccuracy):
    """Fraction of samples whose ``argmax`` over the (N, C) scores equals the target class.

    With a single score per sample (output (N,) or (N, 1)), the prediction is ``output > threshold``
    against 0/1 targets (use ``threshold=0`` for logits, 0.5 for probabilities).
    Name: ``"Top1Accuracy"``. Reference: BigDL ``Top1Accuracy``.

    Raises
    ------
    TypeError, ValueError
        On non-array inputs, mismatched shapes or out-of-range class indices.
    """

    def __init__(self, threshold: float = 0.5):
        super().__init__(1)
        self.threshold = float(threshold)

    def update(self, state, output, target):
        output = _as_array(self.name, "output", output)
        if output.ndim == 1 or (output.ndim == 2 and output.shape[1] == 1):
            pred = (output.reshape(-1) > self.threshold).astype(np.int64)
            t = _class_targets(self.name, target, pred.shape[0], 2)
        else:
            output = self._scores(output)
            t = _class_targets(self.name, target, output.shape[0], output.shape[1])
            pred = np.argmax(output, axis=1)
        hits = int(np.count_nonzero(pred == t))
        return {"total": state["total"] + hits, "count": state["count"] + int(t.size)}

    def __repr__(self):
        return f"Top1Accuracy(threshold={self.threshold})"


def _regression_pair(metric: str, output, target):
    output = _as_array(metric, "output", output)
    target = _as_array(metric, "target", target)
    if output.ndim == target.ndim + 1 and output.shape[-1] == 1 and output.shape[:-1] == target.shape:
        output = output[..., 0]  # (N, 1) model output against (N,) targets
    if output.shape != target.shape:
        raise ValueError(f"{metric}: output shape {output.shape} != target shape {target.shape}; reshape one "
                         "of them (only (N, 1) output against (N,) target is matched automatically)")
    return output.astype(np.float64), target.astype(np.float64)


class MAE(_CountingMetric):
    """Mean absolute error over all elements, ``mean(|output - target|)``. Name ``"MAE"``.

    Shapes: ``output`` and ``target`` equal shapes (or (N, 1) output with (N,) target). Sums run in float64.

    Raises
    ------
    TypeError, ValueError
        On non-array inputs or mismatched shapes.
    """

    name = "MAE"

    def update(self, state, output, target):
        o, t = _regression_pair(self.name, output, target)
        return {"total": state["total"] + float(np.abs(o - t).sum()), "count": state["count"] + int(o.size)}


class MSE(_CountingMetric):
    """Mean squared error over all elements, ``mean((output - target)^2)``. Name ``"MSE"``.

    Shapes: as :class:`MAE`.

    Raises
    ------
    TypeError, ValueError
        On non-array inputs or mismatched shapes.
    """

    name = "MSE"

    def update(self, state, output, target):
        o, t = _regression_pair(self.name, output, target)
        return {"total": state["total"] + float(np.square(o - t).sum()), "count": state["count"] + int(o.size)}


class Loss(_CountingMetric):
    """Average of a loss over the whole data set. Name ``"Loss"``.

    Parameters
    ----------
    loss_fn : sparkdl loss
        Any loss with ``value, cache = loss_fn.forward(output, target)`` and ``loss_fn.normalizer(target)``
        (the denominator of its ``'mean'`` reduction, e.g. N for CrossEntropyLoss, N*D for MSELoss).

    The state keeps the summed loss and the summed normalizer, so the result is what ``reduction='mean'``
    would give on all the data at once, whatever ``loss_fn.reduction`` is. Reference: BigDL ``Loss``.
    """

    name = "Loss"

    def __init__(self, loss_fn):
        for attr in ("forward", "normalizer"):
            if not callable(getattr(loss_fn, attr, None)):
                raise TypeError(f"Loss: loss_fn must be a sparkdl loss with .{attr}(), got {type(loss_fn).__name__}")
        self.loss_fn = loss_fn
        self._sum_fn = loss_fn  # the same loss with reduction='sum' when it can be rebuilt from its config
        if getattr(loss_fn, "reduction", "mean") == "mean" and callable(getattr(loss_fn, "get_config", None)):
            self._sum_fn = type(loss_fn)(**{**loss_fn.get_config(), "reduction": "sum"})

    def update(self, state, output, target):
        value, _ = self._sum_fn.forward(output, target)
        count = float(self.loss_fn.normalizer(target))
        if getattr(self._sum_fn, "reduction", "mean") == "mean":  # a loss without get_config()
            total = float(value) * count if count else 0.0
        else:  # 'sum', or 'none' (per-sample values)
            total = float(np.sum(value, dtype=np.float64))
        return {"total": state["total"] + total, "count": state["count"] + count}

    def __repr__(self):
        return f"Loss({self.loss_fn!r})"


class BinaryAUC(ValidationMethod):
    """Exact area under the ROC curve for binary targets (ties count 1/2, as ``sklearn.metrics.roc_auc_score``).

    Shapes: ``output`` (N,) or (N, 1) scores (any monotone score: logits or probabilities), or (N, 2) whose
    column 1 is the positive-class score; ``target`` (N,) or (N, 1) with values in {0, 1}.

    State: ``{"scores": float64 (S,) sorted distinct scores, "pos": int64 (S,), "neg": int64 (S,)}`` —
    positive and negative counts per distinct score. Memory is 24 bytes per *distinct* score, i.e. O(N) for
    continuous scores (24 MB per million validation samples), far less for quantised scores. Merging unions
    the score sets and adds counts, so it is exact and associative. Result:
    ``(sum_i pos_i * (negatives below score_i) + pos_i * neg_i / 2) / (P * N)``; ``nan`` when the data hold
    only one class. Name ``"AUC"``.

    Raises
    ------
    TypeError, ValueError
        On non-array inputs, mismatched shapes, NaN scores or targets other than 0/1.
    """

    name = "AUC"

    def zero(self):
        return {"scores": np.zeros(0, np.float64), "pos": np.zeros(0, np.int64), "neg": np.zeros(0, np.int64)}

    @staticmethod
    def _combine(scores, pos, neg):
        uniq, inv = np.unique(scores, return_inverse=True)
        return {"scores": uniq,
                "pos": np.bincount(inv, weights=pos, minlength=uniq.size).astype(np.int64),
                "neg": np.bincount(inv, weights=neg, minlength=uniq.size).astype(np.int64)}

    def update(self, state, output, target):
        output = _as_array(self.name, "output", output)
        if output.ndim == 2 and output.shape[1] == 2:
            output = output[:, 1]
        elif output.ndim == 2 and output.shape[1] == 1:
            output = output[:, 0]
        if output.ndim != 1:
            raise ValueError(f"{self.name}: output must have shape (N,), (N, 1) or (N, 2), got {output.shape}")
        t = _class_targets(self.name, target, output.shape[0], 2)
        s = output.astype(np.float64)
        if np.isnan(s).any():
            raise ValueError(f"{self.name}: output contains NaN scores")
        return self._combine(np.concatenate([state["scores"], s]),
                             np.concatenate([state["pos"], t]),
                             np.concatenate([state["neg"], 1 - t]))

    def merge(self, a, b):
        return self._combine(np.concatenate([a["scores"], b["scores"]]),
                             np.concatenate([a["pos"], b["pos"]]), np.concatenate([a["neg"], b["neg"]]))

    def result(self, state) -> float:
        pos, neg = np.asarray(state["pos"], np.int64), np.asarray(state["neg"], np.int64)
        n_pos, n_neg = int(pos.sum()), int(neg.sum())
        if n_pos == 0 or n_neg == 0:
            return float("nan")
        neg_below = np.cumsum(neg) - neg
        # integer arithmetic (doubled to keep the tie half exact) avoids float round-off
        twice = int(np.sum(pos * (2 * neg_below + neg), dtype=np.int64)) if n_pos * n_neg < 2 ** 61 \
            else sum(int(p) * (2 * int(b) + int(n)) for p, b, n in zip(pos, neg_below, neg))
        return twice / (2.0 * n_pos * n_neg)
