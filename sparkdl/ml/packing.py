"""The fast column path: vector and array feature columns packed into float32 bytes per row by the JVM bridge.

Spark moves a ``binary`` value to Arrow with one copy per row, while a Vector or an array travels element by
element (and a Vector as a struct of four lists). :func:`packed_features` therefore replaces such a column by
``sparkdl.jvm.float_rows`` of it, so a batch reaches Python as one contiguous float32 buffer
(:func:`sparkdl.ml.arrow.decode_features` views it as a ``(n, size)`` array). Without the bridge in the session the
plain Arrow path is used, with one warning naming the line that adds the bridge.
"""
from __future__ import annotations

import dataclasses

from pyspark.sql.types import FloatType

from sparkdl.ml.arrow import FeatureSpec

__all__ = ["packed_features"]



def packed_features(sc, spec: FeatureSpec, columns: list, schema,
                    error: str | None = None) -> tuple[FeatureSpec, list]:
    """``(spec, columns)`` for the fast path when it applies (vector and array features, bridge loadable), else
    unchanged.

    Parameters
    ----------
    sc : pyspark.SparkContext
    spec : FeatureSpec
    columns : list of Column
        The feature column expressions, in ``spec.columns`` order (:func:`sparkdl.ml.validation.feature_exprs`:
        arrays of other numbers already cast to ``array<double>``).
    schema : pyspark.sql.types.StructType
        The input DataFrame's schema (the element type of an array column picks the bridge's reader).
    error : str, optional
        Message that invalid rows fail the task with (``{row}`` is replaced by the row); None: null rows.
    """
    from sparkdl import jvm
    if spec.kind not in ("vector", "array") or spec.packed:
        return spec, columns
    if jvm.optional_bridge(sc) is None:  # one warning per session, naming the line that adds the bridge
        return spec, columns
    kind = "vector"
    if spec.kind == "array":
        kind = "float" if isinstance(schema[spec.columns[0]].dataType.elementType, FloatType) else "double"
    packed = jvm.float_rows(sc, columns[0], spec.size, error, kind)
    return dataclasses.replace(spec, packed=True), [packed.alias(spec.columns[0])]
