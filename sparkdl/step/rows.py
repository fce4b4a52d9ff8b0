"""Which models may have a training batch's rows split across threads: those that compute every row on its own.

:func:`sparkdl.step.task_gradient_sum` splits a batch only for models :func:`rows_independent` accepts: a whitelist
of exact layer and loss types (no batch statistics such as BatchNorm, no layer that mixes rows; attention and
recurrent layers only with ``batch_first``, since the split cuts axis 0 of the batch).
"""
from __future__ import annotations

from sparkdl import nn
from sparkdl.nn.activation import _Elementwise
from sparkdl.nn.loss import SampleWeightedLoss

__all__ = ["rows_independent"]

# Matched by exact type, as the losses are: a user subclass of a listed layer may redefine forward and couple rows.
# The activations are every sparkdl subclass of _Elementwise.
_ROWWISE = frozenset({
    nn.Sequential, nn.Residual, nn.Concat, nn.Linear, nn.Conv2d, nn.Conv1d, nn.PReLU, nn.MaxPool2d, nn.MaxPool1d,
    nn.AvgPool2d, nn.AvgPool1d, nn.AdaptiveAvgPool2d, nn.Identity, nn.LayerNorm, nn.GroupNorm, nn.Embedding,
    nn.Dropout, nn.TransformerEncoderLayer, nn.TransformerEncoder, nn.TransformerClassifier, nn.SequenceLengths,
    nn.RNNOutput}) | {c for c in _Elementwise.__subclasses__() if c.__module__.startswith("sparkdl.")}

# Row-independent only when the batch is axis 0 of their input: the split cuts axis 0 of the batch, and with
# (L, N, E) / (T, N, D) inputs axis 0 is time, along which attention and recurrences couple the positions.
_ROWWISE_BATCH_FIRST = frozenset({nn.MultiheadAttention, nn.RNN, nn.LSTM, nn.GRU})

_ROWWISE_LOSSES = (nn.CrossEntropyLoss, nn.NLLLoss, nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.BCEWithLogitsLoss,
                   nn.BCELoss)


def rows_independent(model, loss=None) -> bool:
    """Whether every module of ``model`` (and ``loss``, if given) computes each row of a training batch on its
    own, so that splitting the rows changes nothing but float rounding. A whitelist of exact types (a subclass
    may redefine ``forward``, so user subclasses of listed layers are not split either): layer types not listed
    here (BatchNorm, imported ONNX graphs, ...), attention and recurrent layers without ``batch_first``, and
    losses other than sparkdl's per-row losses (a user loss may couple rows, e.g. in-batch negatives) are
    never split. Random draws are allowed: the dropout masks of sparkdl's layers do not depend on the split
    (:mod:`sparkdl.nn.dropout_masks`)."""
    if loss is not None:
        inner = loss.loss if isinstance(loss, SampleWeightedLoss) else loss
        if type(inner) not in _ROWWISE_LOSSES:  # exactly these: a subclass may redefine forward
            return False
    for _, m in model.named_modules():
        if type(m) is nn.Flatten:
            if m.start_dim <= 0:  # 0, or negative (counted from the end, may reach the batch axis)
                return False
        elif type(m) in _ROWWISE_BATCH_FIRST:
            if not m.batch_first:
                return False
        elif type(m) not in _ROWWISE:
            return False
    return True
