"""Input checks of the Spark stages, run as Spark SQL before any training: column presence and types from the
schema, then one aggregation job that counts every kind of bad row (null, NaN/inf, wrong length, bad label).
A problem is reported with the column, the count and an example row (fetched by a second, tiny job only when
something is wrong). The same predicates filter rows out for ``handleInvalid='skip'``.
"""
from __future__ import annotations

import logging

from pyspark.ml.functions import vector_to_array
from pyspark.ml.linalg import VectorUDT
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DecimalType, DoubleType, FloatType, LongType, NumericType, StructType

from sparkdl.ml.arrow import IMAGE_MODES

__all__ = ["column_kind", "field", "quote", "values", "feature_kind", "feature_exprs", "label_expr", "Check",
           "feature_checks", "token_checks", "label_checks", "label_range_check", "label_size_check", "run_checks", "describe_row",
           "example_row", "raise_first", "IMAGE_FIELDS"]

log = logging.getLogger("sparkdl.ml")

IMAGE_FIELDS = ("origin", "height", "width", "nChannels", "mode", "data")
_INF = float("inf")


def column_kind(dtype) -> str | None:
    """``'vector'``, ``'array'``, ``'scalar'``, ``'image'`` or None (unsupported) for a Spark data type."""
    if isinstance(dtype, VectorUDT):
        return "vector"
    if isinstance(dtype, ArrayType) and isinstance(dtype.elementType, NumericType):
        return "array"
    if isinstance(dtype, NumericType):
        return "scalar"
    if isinstance(dtype, StructType) and set(IMAGE_FIELDS) <= set(dtype.fieldNames()):
        return "image"
    return None


def field(schema, stage: str, param: str, name: str):
    if name not in schema.fieldNames():
        raise ValueError(f"{stage}: {param} {name!r} is not a column of the DataFrame; columns are "
                         f"{schema.fieldNames()}")
    return schema[name]


def feature_kind(schema, stage: str, features_col: str, features_cols) -> tuple[str, tuple]:
    """The feature kind and column(s), validated against ``schema``.

    Raises
    ------
    ValueError
        If a column is missing.
    TypeError
        If a column's type is not supported (naming the column, its type and what is accepted).
    """
    if features_cols:
        for c in features_cols:
            f = field(schema, stage, "featuresCols column", c)
            if column_kind(f.dataType) != "scalar":
                raise TypeError(f"{stage}: featuresCols column {c!r} must be numeric, got {f.dataType.simpleString()}"
                                "; combine vector columns with VectorAssembler and use featuresCol instead")
        return "scalar", tuple(features_cols)
    f = field(schema, stage, "featuresCol", features_col)
    kind = column_kind(f.dataType)
    if kind is None:
        raise TypeError(f"{stage}: featuresCol {features_col!r} has type {f.dataType.simpleString()}; expected a "
                        "Vector (pyspark.ml.linalg), array<float|double>, a numeric column or Spark's image struct "
                        "(use StringIndexer/OneHotEncoder/VectorAssembler for other columns)")
    return kind, (features_col,)


def feature_exprs(kind: str, cols, schema) -> list:
    """Columns to hand to Arrow: scalars as double, arrays of non-float elements as array<double>."""
    out = []
    for c in cols:
        col, dtype = F.col(quote(c)), schema[c].dataType
        if kind == "scalar":
            col = col.cast(DoubleType())
        elif kind == "array" and not isinstance(dtype.elementType, (FloatType, DoubleType)):
            col = col.cast(ArrayType(DoubleType()))
        elif kind == "tokens":
            col = col.cast(ArrayType(LongType()))
        out.append(col.alias(c))
    return out


def label_expr(kind: str, name: str, schema):
    col = F.col(quote(name))
    if kind == "scalar":
        return col.cast(DoubleType()).alias(name)
    return feature_exprs(kind, [name], schema)[0]


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class Check:
    """One kind of bad row: a predicate (true = bad), the column it concerns and a description."""

    def __init__(self, column: str, what: str, predicate):
        self.column, self.what = column, what
        self.predicate = F.coalesce(predicate, F.lit(False))


def values(kind: str, col):
    """The numeric elements of a vector/array column as an array expression (null for null rows)."""
    return F.when(col.isNotNull(), vector_to_array(col)) if kind == "vector" else col


def _non_finite(x):
    return F.isnan(x) | (F.abs(x) == F.lit(_INF))


def feature_checks(kind: str, cols, schema, size: int | None, image_shape=None, vocab_size=None,
                   size_source: str = "") -> list[Check]:
    """Checks of the feature column(s). ``size``: required number of values per row (None: not checked), with
    ``size_source`` saying where it comes from; ``image_shape``: required ``(C, H, W)`` of images; ``vocab_size``:
    bound of token ids (kind 'tokens')."""
    checks = []
    for c in cols:
        col = F.col(quote(c))
        if kind == "tokens":
            checks += token_checks(c, col, vocab_size)
            continue
        floating = kind != "image"
        if kind == "array":
            floating = isinstance(schema[c].dataType.elementType, (FloatType, DoubleType, DecimalType))
            checks.append(Check(c, "null values", col.isNull() | F.exists(col, lambda x: x.isNull())))
        elif kind == "image":
            checks.append(Check(c, "null images", col.isNull() | col["data"].isNull()))
            checks.append(Check(c, f"images of an unsupported mode (supported: 8-bit modes {list(IMAGE_MODES)})",
                                ~col["mode"].isin(*IMAGE_MODES)))
            checks.append(Check(c, "images whose data length is not nChannels*height*width",
                                F.length(col["data"]) != col["nChannels"] * col["height"] * col["width"]))
            if image_shape is not None:
                ch, h, w = image_shape
                checks.append(Check(c, f"images that are not {h}x{w} with {ch} channels",
                                    (col["nChannels"] != ch) | (col["height"] != h) | (col["width"] != w)))
        else:
            checks.append(Check(c, "null values", col.isNull()))
        if kind in ("vector", "array"):
            if floating:
                checks.append(Check(c, "NaN or infinite values", F.exists(values(kind, col), _non_finite)))
            if size is not None:
                why = f" ({size_source})" if size_source else ""
                checks.append(Check(c, f"a length other than {size}{why}", F.size(values(kind, col)) != size))
        elif kind == "scalar" and isinstance(schema[c].dataType, (FloatType, DoubleType)):
            checks.append(Check(c, "NaN or infinite values", _non_finite(col)))
    return checks


def token_checks(col_name: str, col, vocab_size: int | None) -> list:
    """Checks (true = bad row) of a token-id column: nulls, negative ids, ids >= ``vocab_size``."""
    checks = [Check(col_name, "null values", col.isNull() | F.exists(col, lambda x: x.isNull())),
              Check(col_name, "negative token ids", F.exists(col, lambda x: x < 0))]
    if vocab_size is not None:
        checks.append(Check(col_name, f"token ids >= {vocab_size} (the vocabulary size: num_embeddings of the "
                                      "network's Embedding)", F.exists(col, lambda x: x >= vocab_size)))
    return checks


def label_checks(kind: str, name: str, schema, classification: bool) -> list[Check]:
    """Checks of the label column that need no network: null, NaN/inf, (classification) non-integral values."""
    checks = feature_checks(kind, [name], schema, None)
    if classification:
        col = F.col(quote(name)).cast(DoubleType())
        checks.append(Check(name, "non-integer labels (class indices 0, 1, ... are required; index string labels "
                                  "with StringIndexer)", col != F.floor(col)))
    return checks


def label_range_check(name: str, num_outputs: int) -> Check:
    """Class indices must be in ``[0, num_outputs - 1]`` (``{0, 1}`` for a one-logit binary network)."""
    col = F.col(quote(name)).cast(DoubleType())
    if num_outputs == 1:
        return Check(name, "labels other than 0 and 1 (the network has 1 output: a binary classifier)",
                     (col < 0) | (col > 1))
    return Check(name, f"labels outside [0, {num_outputs - 1}] (the network has {num_outputs} outputs)",
                 (col < 0) | (col > num_outputs - 1))


def label_size_check(kind: str, name: str, size: int) -> Check:
    """Multi-output labels must have ``size`` values (the network's outputs per row)."""
    return Check(name, f"a length other than {size} (the network's outputs per row)",
                 F.size(values(kind, F.col(quote(name)))) != size)


def run_checks(df, checks: list[Check], extra_aggs=()) -> tuple[list[int], int, list]:
    """One job: the number of rows failing each check, the row count and the values of ``extra_aggs``."""
    aggs = [F.count(F.lit(1)).alias("_n")]
    aggs += [F.sum(ch.predicate.cast("long")).alias(f"_c{i}") for i, ch in enumerate(checks)]
    aggs += list(extra_aggs)
    row = df.agg(*aggs).first()
    counts = [int(row[f"_c{i}"] or 0) for i in range(len(checks))]
    return counts, int(row["_n"]), [row[i] for i in range(1 + len(checks), len(row))]


def describe_row(row, limit: int = 300) -> str:
    """A short ``Row(...)`` repr: every field, long values truncated."""
    parts = []
    for k, v in row.asDict().items():
        r = repr(v)
        parts.append(f"{k}={r if len(r) <= 60 else r[:57] + '...'}")
    s = "Row(" + ", ".join(parts) + ")"
    return s if len(s) <= limit else s[:limit - 4] + "...)"


def example_row(df, predicate) -> str:
    rows = df.filter(predicate).limit(1).collect()
    return describe_row(rows[0]) if rows else "(no example found)"


def raise_first(stage: str, df, checks: list[Check], counts: list[int], total: int) -> None:
    """Raise ValueError for the first failing check, with its count and an example row."""
    for ch, k in zip(checks, counts):
        if k:
            raise ValueError(f"{stage}: column {ch.column!r} has {k} of {total} rows with {ch.what}, e.g. "
                             f"{example_row(df, ch.predicate)}. Fix the data, or set handleInvalid='skip' to drop "
                             "such rows.")
