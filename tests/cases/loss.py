"""Loss cases: every configuration here runs through tests/test_losses.py (gradcheck, PyTorch parity,
mean == sum / normalizer, large-logit stability, batch 1, wrong dtype)."""
import numpy as np
import torch

from sparkdl.nn import loss as L
from tests.cases import LossCase

W5 = [0.5, 2.0, 1.0, 0.25, 1.5]


def _t(x):
    return torch.tensor(x, dtype=torch.float32)


def _logits(shape, num_classes=5, ignore=None):
    """Logits of ``shape`` (class axis 1) and int64 labels; ``ignore=(value, every)`` plants ignored labels."""
    def inputs(rng):
        x = rng.standard_normal(shape).astype(np.float32) * 2
        y = rng.integers(0, num_classes, shape[:1] + shape[2:])
        if ignore is not None:
            y.reshape(-1)[::ignore[1]] = ignore[0]
        return x, y
    return inputs


def _log_probs(shape):
    def inputs(rng):
        x, y = _logits(shape)(rng)
        x = x - x.max(axis=1, keepdims=True)
        return (x - np.log(np.exp(x).sum(axis=1, keepdims=True))).astype(np.float32), y
    return inputs


def _regression(shape, scale=1.0):
    def inputs(rng):
        return ((rng.standard_normal(shape) * scale).astype(np.float32),
                (rng.standard_normal(shape) * scale).astype(np.float32))
    return inputs


def _binary(shape, soft=False):
    def inputs(rng):
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        t = rng.uniform(0, 1, shape) if soft else rng.integers(0, 2, shape)
        return x, t.astype(np.float32)
    return inputs


def _probabilities(shape, soft=False):
    def inputs(rng):
        p = rng.uniform(0.03, 0.97, shape).astype(np.float32)
        t = rng.uniform(0, 1, shape) if soft else rng.integers(0, 2, shape)
        return p, t.astype(np.float32)
    return inputs


LOSS_CASES = [
    LossCase("ce", lambda: L.CrossEntropyLoss(), _logits((8, 5)), lambda: torch.nn.CrossEntropyLoss()),
    LossCase("ce-sum", lambda: L.CrossEntropyLoss(reduction="sum"), _logits((6, 3), 3),
             lambda: torch.nn.CrossEntropyLoss(reduction="sum")),
    LossCase("ce-weight", lambda: L.CrossEntropyLoss(weight=W5), _logits((9, 5)),
             lambda: torch.nn.CrossEntropyLoss(weight=_t(W5))),
    LossCase("ce-smoothing", lambda: L.CrossEntropyLoss(label_smoothing=0.1), _logits((7, 5)),
             lambda: torch.nn.CrossEntropyLoss(label_smoothing=0.1)),
    LossCase("ce-weight-smoothing-ignore",
             lambda: L.CrossEntropyLoss(weight=W5, ignore_index=2, label_smoothing=0.3), _logits((10, 5), ignore=(2, 3)),
             lambda: torch.nn.CrossEntropyLoss(weight=_t(W5), ignore_index=2, label_smoothing=0.3)),
    LossCase("ce-ignore-default", lambda: L.CrossEntropyLoss(), _logits((6, 4), 4, ignore=(-100, 4)),
             lambda: torch.nn.CrossEntropyLoss()),
    LossCase("ce-spatial", lambda: L.CrossEntropyLoss(weight=W5[:3], label_smoothing=0.05), _logits((3, 3, 2, 4), 3),
             lambda: torch.nn.CrossEntropyLoss(weight=_t(W5[:3]), label_smoothing=0.05)),
    LossCase("nll", lambda: L.NLLLoss(), _log_probs((8, 5)), lambda: torch.nn.NLLLoss()),
    LossCase("nll-weight-ignore", lambda: L.NLLLoss(weight=W5, ignore_index=0), _log_probs((9, 5)),
             lambda: torch.nn.NLLLoss(weight=_t(W5), ignore_index=0)),
    LossCase("nll-spatial-sum", lambda: L.NLLLoss(reduction="sum"), _log_probs((2, 5, 3)),
             lambda: torch.nn.NLLLoss(reduction="sum")),
    LossCase("mse", lambda: L.MSELoss(), _regression((8, 3)), lambda: torch.nn.MSELoss()),
    LossCase("mse-1d-sum", lambda: L.MSELoss(reduction="sum"), _regression((11,)),
             lambda: torch.nn.MSELoss(reduction="sum")),
    LossCase("mse-4d", lambda: L.MSELoss(), _regression((2, 3, 2, 2)), lambda: torch.nn.MSELoss()),
    LossCase("l1", lambda: L.L1Loss(), _regression((7, 4)), lambda: torch.nn.L1Loss()),
    LossCase("smoothl1", lambda: L.SmoothL1Loss(), _regression((10, 3), 1.5), lambda: torch.nn.SmoothL1Loss()),
    LossCase("smoothl1-beta0.3-sum", lambda: L.SmoothL1Loss(beta=0.3, reduction="sum"), _regression((8, 4), 0.4),
             lambda: torch.nn.SmoothL1Loss(beta=0.3, reduction="sum")),
    LossCase("smoothl1-beta0", lambda: L.SmoothL1Loss(beta=0.0), _regression((5, 3)),
             lambda: torch.nn.SmoothL1Loss(beta=0.0)),
    LossCase("bce", lambda: L.BCEWithLogitsLoss(), _binary((8, 3)), lambda: torch.nn.BCEWithLogitsLoss()),
    LossCase("bce-soft-1d", lambda: L.BCEWithLogitsLoss(), _binary((9,), soft=True),
             lambda: torch.nn.BCEWithLogitsLoss()),
    LossCase("bce-pos-weight", lambda: L.BCEWithLogitsLoss(pos_weight=[3.0, 0.5, 1.0, 2.0]), _binary((6, 4)),
             lambda: torch.nn.BCEWithLogitsLoss(pos_weight=_t([3.0, 0.5, 1.0, 2.0]))),
    LossCase("bce-weight-pos-weight-sum",
             lambda: L.BCEWithLogitsLoss(weight=[[0.2], [1.0], [2.0], [0.7], [1.3]], pos_weight=[2.0, 0.3, 1.5],
                                         reduction="sum"),
             _binary((5, 3), soft=True),
             lambda: torch.nn.BCEWithLogitsLoss(weight=_t([[0.2], [1.0], [2.0], [0.7], [1.3]]),
                                                pos_weight=_t([2.0, 0.3, 1.5]), reduction="sum")),
    LossCase("bce-weight-row", lambda: L.BCEWithLogitsLoss(weight=[0.5, 2.0, 1.0]), _binary((4, 2, 3)),
             lambda: torch.nn.BCEWithLogitsLoss(weight=_t([0.5, 2.0, 1.0]))),
    LossCase("bce-prob", lambda: L.BCELoss(), _probabilities((8, 3)), lambda: torch.nn.BCELoss()),
    LossCase("bce-prob-soft-weight-sum", lambda: L.BCELoss(weight=[[0.2], [1.0], [2.0], [0.7], [1.3]], reduction="sum"),
             _probabilities((5, 3), soft=True),
             lambda: torch.nn.BCELoss(weight=_t([[0.2], [1.0], [2.0], [0.7], [1.3]]), reduction="sum")),
    LossCase("bce-prob-1d", lambda: L.BCELoss(weight=[0.5, 2.0, 1.0, 1.0, 3.0, 0.1]), _probabilities((6,)),
             lambda: torch.nn.BCELoss(weight=_t([0.5, 2.0, 1.0, 1.0, 3.0, 0.1]))),
]
