"""Per-row sample weights of the estimators (``weightCol``, ``classWeights``), as Spark SQL.

A row's weight is ``weightCol`` (1 when unset) times ``classWeights[label]`` (when set). The training data carry
it next to the label: the label column becomes ``[label values..., weight]`` (an array per row), which
:class:`~sparkdl.nn.loss.SampleWeightedLoss` splits again inside the loss. So neither the data path nor the
engine knows about weights, and the loss is PySpark's weighted mean ``sum_i w_i loss_i / sum_i w_i``.
"""
from __future__ import annotations

from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DoubleType

from sparkdl.ml import validation as V
from sparkdl.ml.data import LabelSpec

__all__ = ["check_weight_column", "weight_checks", "weight_expr", "weighted_label", "weighted_loss"]


def check_weight_column(schema, stage: str, name: str) -> None:
    """``weightCol`` must be a numeric column (TypeError/ValueError naming it otherwise)."""
    f = V.field(schema, stage, "weightCol", name)
    if V.column_kind(f.dataType) != "scalar":
        raise TypeError(f"{stage}: weightCol {name!r} must be a numeric column of weights >= 0, got "
                        f"{f.dataType.simpleString()}")


def weight_checks(name: str) -> list:
    """Bad weights: null, NaN or infinite, negative."""
    col = F.col(V.quote(name)).cast(DoubleType())
    return [V.Check(name, "null weights", col.isNull()),
            V.Check(name, "NaN or infinite weights", F.isnan(col) | (F.abs(col) == F.lit(float("inf")))),
            V.Check(name, "negative weights (sample weights must be >= 0)", col < 0)]


def weight_expr(weight_col: str | None, class_weights, label_col: str):
    """The weight of each row as a double column."""
    w = F.col(V.quote(weight_col)).cast(DoubleType()) if weight_col else F.lit(1.0)
    if class_weights:
        table = F.array(*[F.lit(float(c)) for c in class_weights])
        w = w * F.element_at(table, F.col(V.quote(label_col)).cast("int") + 1)
    return w


def weighted_label(label: LabelSpec, kind: str, name: str, weight) -> tuple[LabelSpec, object]:
    """The label spec and column of ``[label values..., weight]`` rows for :class:`SampleWeightedLoss`."""
    col = F.col(V.quote(name))
    if kind == "scalar":
        values = F.array(col.cast(DoubleType()))
    else:
        values = V.values(kind, col).cast(ArrayType(DoubleType()))
    size = label.size + 1
    return LabelSpec("array", size, (size,), "float32"), F.concat(values, F.array(weight)).alias(name)


def weighted_loss(loss, label: LabelSpec, stage: str):
    """``loss`` wrapped in :class:`SampleWeightedLoss` for labels of ``label``'s shape and dtype.

    Raises
    ------
    ValueError
        If ``loss`` cannot weight its samples (a custom loss without ``normalizer_weights``).
    """
    from sparkdl.nn.loss import SampleWeightedLoss
    if not callable(getattr(loss, "normalizer_weights", None)):
        raise ValueError(f"{stage}: weightCol/classWeights need a loss that supports per-sample weights (the sparkdl "
                         f"losses do), but {type(loss).__name__} has no normalizer_weights method")
    return SampleWeightedLoss(loss, label.shape, label.dtype)
