"""Which models may have a training batch's rows split across threads: those that compute every row on its own,
and those whose only coupling of rows is BatchNorm's batch statistics.

:func:`sparkdl.step.task_gradient_sum` splits a batch only for models :func:`rows_splittable` accepts: a whitelist
of exact layer and loss types (no layer that mixes rows; attention and recurrent layers only with ``batch_first``,
since the split cuts axis 0 of the batch) plus BatchNorm, whose parts exchange their statistics
(:mod:`sparkdl.nn.row_parts`). :func:`rows_independent` is the same whitelist without BatchNorm.
Graphs (imported ONNX files) qualify when their batch is not fixed (``batch_size`` None) and every node does; of the
ONNX operator nodes, only the elementwise ``Add``/``Sub``/``Mul``/``Div`` of two values computed in the graph (a
squeeze-excitation's scaling): with constant operands or reshapes, the batch may sit on another axis.
"""
from __future__ import annotations

from sparkdl import nn
from sparkdl.nn.activation import _Elementwise
from sparkdl.nn.loss import SampleWeightedLoss
from sparkdl.nn.onnx_op import OnnxOp

__all__ = ["rows_independent", "rows_splittable", "batch_statistics_layers"]


def _sparkdl_subclasses(cls) -> set:
    found = set()
    for sub in cls.__subclasses__():
        if sub.__module__.startswith("sparkdl."):
            found |= {sub} | _sparkdl_subclasses(sub)
    return found


# Matched by exact type, as the losses are: a user subclass of a listed layer may redefine forward and couple rows.
# The activations are every sparkdl subclass of _Elementwise, direct or not (ReLU6 is a Hardtanh).
_ROWWISE = frozenset({
    nn.Sequential, nn.Residual, nn.Concat, nn.Add, nn.Concatenate, nn.Linear, nn.Conv2d, nn.Conv1d, nn.PReLU,
    nn.MaxPool2d, nn.MaxPool1d, nn.AvgPool2d, nn.AvgPool1d, nn.AdaptiveAvgPool2d, nn.Identity, nn.LayerNorm,
    nn.GroupNorm, nn.Embedding, nn.Dropout, nn.TransformerEncoderLayer, nn.TransformerEncoder,
    nn.TransformerClassifier, nn.SequenceLengths, nn.RNNOutput}) | _sparkdl_subclasses(_Elementwise)

# Row-independent only when the batch is axis 0 of their input: the split cuts axis 0 of the batch, and with
# (L, N, E) / (T, N, D) inputs axis 0 is time, along which attention and recurrences couple the positions.
_ROWWISE_BATCH_FIRST = frozenset({nn.MultiheadAttention, nn.RNN, nn.LSTM, nn.GRU})

#: ONNX operator nodes that are row-wise when every input is computed in the graph (all batch-first there).
_ROWWISE_ONNX_BINARY = frozenset({"Add", "Sub", "Mul", "Div"})

_BATCH_STATISTICS = frozenset({nn.BatchNorm1d, nn.BatchNorm2d})

_ROWWISE_LOSSES = (nn.CrossEntropyLoss, nn.NLLLoss, nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.BCEWithLogitsLoss,
                   nn.BCELoss)


def rows_independent(model, loss=None) -> bool:
    """Whether every module of ``model`` (and ``loss``, if given) computes each row of a training batch on its
    own, so that splitting the rows changes nothing but float rounding. A whitelist of exact types (a subclass
    may redefine ``forward``, so user subclasses of listed layers are not split either): layer types not listed
    here (BatchNorm, ...), attention and recurrent layers without ``batch_first``, graphs of a fixed batch size,
    ONNX operator nodes other than elementwise arithmetic on computed values, and losses other than sparkdl's
    per-row losses (a user loss may couple rows, e.g. in-batch negatives) are refused. Random draws are
    allowed: the dropout masks of sparkdl's layers do not depend on the split (:mod:`sparkdl.nn.dropout_masks`)."""
    return _accepted(model, loss, ())


def rows_splittable(model, loss=None) -> bool:
    """:func:`rows_independent`, or its whitelist plus ``BatchNorm1d``/``BatchNorm2d``: the layers whose rows are
    coupled only through batch statistics, which the row parts of a split batch exchange
    (:mod:`sparkdl.nn.row_parts`), so that the split step still equals the whole batch's to float rounding."""
    return _accepted(model, loss, _BATCH_STATISTICS)


def batch_statistics_layers(model) -> int:
    """Number of BatchNorm layers (``BatchNorm1d``/``BatchNorm2d``, exact types) in ``model``."""
    return sum(type(m) in _BATCH_STATISTICS for _, m in model.named_modules())


def _accepted(model, loss, also) -> bool:
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
        elif type(m) is nn.Graph:
            if m.batch_size is not None:  # its nodes compute exactly that many rows
                return False
        elif type(m) is OnnxOp:
            if m.op_type not in _ROWWISE_ONNX_BINARY or any(i != "x" for i in m.inputs):
                return False
        elif type(m) not in _ROWWISE and type(m) not in also:
            return False
    return True
