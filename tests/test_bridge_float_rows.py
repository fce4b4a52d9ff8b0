"""The JVM bridge's bulk row reader (``sparkdl.jvm.float_rows``): bitwise the float32 values numpy makes of the same
rows, for Vectors (dense, sparse), ``array<float>`` and ``array<double>``, through Spark's generated code and its
interpreted path (Spark's own arrays, not unsafe ones), and null or a clear error for each kind of invalid row."""
import numpy as np
import pytest
from pyspark.errors import IllegalArgumentException
from pyspark.ml.functions import array_to_vector
from pyspark.ml.linalg import Vectors, VectorUDT
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DoubleType, FloatType, LongType, StructField, StructType

from sparkdl import jvm

D = 5
SCHEMA = StructType([StructField("id", LongType()), StructField("v", VectorUDT()),
                     StructField("f", ArrayType(FloatType())), StructField("d", ArrayType(DoubleType()))])


def _unpack(b):
    return None if b is None else np.frombuffer(b, "<f4")


def _packed(spark, df, col, kind, error=None):
    sc = spark.sparkContext
    out = df.select("id", jvm.float_rows(sc, F.col(col), D, error, kind).alias("p")).collect()
    return {r["id"]: _unpack(r["p"]) for r in out}


def test_valid_rows_equal_numpys_float32_bitwise(spark):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, D)) * 10.0 ** rng.integers(-40, 39, size=(40, D))  # narrowing rounds, some to 0
    x[::4, 1:3] = 0.0
    rows = [(i, Vectors.dense(r.tolist()) if i % 2 else Vectors.sparse(D, {j: r[j] for j in np.flatnonzero(r)}),
             r.astype(np.float32).tolist(), r.tolist()) for i, r in enumerate(x)]
    df = spark.createDataFrame(rows, SCHEMA).repartition(3)
    expected = x.astype(np.float32)
    for col, kind in (("v", "vector"), ("f", "float"), ("d", "double")):
        got = _packed(spark, df, col, kind)
        assert sorted(got) == list(range(len(x)))
        np.testing.assert_array_equal(np.stack([got[i] for i in range(len(x))]).view(np.uint32),
                                      expected.view(np.uint32), err_msg=kind)


INVALID = [  # (id, vector, float array, double array): every row invalid in every column
    (0, None, None, None),
    (1, Vectors.dense([1.0] * (D - 1)), [1.0] * (D + 1), [1.0] * (D - 1)),  # wrong size
    (2, Vectors.dense([1.0, float("nan"), 0.0, 0.0, 0.0]), [1.0, float("nan"), 0.0, 0.0, 0.0],
     [0.0, 0.0, 0.0, 0.0, float("nan")]),
    (3, Vectors.dense([float("-inf"), 0.0, 0.0, 0.0, 0.0]), [0.0, 0.0, float("inf"), 0.0, 0.0],
     [1e39, 0.0, 0.0, 0.0, 0.0]),  # finite as a double, infinite as float32
    (4, Vectors.sparse(D + 1, {0: 1.0}), [0.0, None, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, None]),  # size, null
    (5, Vectors.sparse(D, {2: float("inf")}), [float("nan")] * D, [-1e300] * D),
]


def test_invalid_rows_become_null(spark):
    df = spark.createDataFrame(INVALID + [(9, Vectors.dense([0.5] * D), [0.5] * D, [0.5] * D)], SCHEMA)
    for col, kind in (("v", "vector"), ("f", "float"), ("d", "double")):
        got = _packed(spark, df, col, kind)
        assert [i for i, p in sorted(got.items()) if p is None] == [r[0] for r in INVALID], kind
        np.testing.assert_array_equal(got[9], np.full(D, 0.5, np.float32))


@pytest.mark.parametrize("col, kind, shown", [("v", "vector", "[1.0,NaN,0.0,0.0,0.0]"),
                                              ("f", "float", "[1.0, NaN, 0.0, 0.0, 0.0]"),
                                              ("d", "double", "[0.0, 0.0, 0.0, 0.0, NaN]")])
def test_invalid_row_fails_the_task_with_the_message_and_the_row(spark, col, kind, shown):
    df = spark.createDataFrame([INVALID[2]], SCHEMA)
    with pytest.raises(Exception) as e:
        _packed(spark, df, col, kind, error="bad features in row {row}; fix them")
    assert f"bad features in row {shown}; fix them" in str(e.value)


def test_generic_arrays_on_the_interpreted_path(spark):
    """``F.array`` evaluated without generated code gives Spark's generic (boxed) arrays, not unsafe ones, and the
    reader itself is called through reflection (Spark's interpreted ``StaticInvoke``)."""
    spark.conf.set("spark.sql.codegen.factoryMode", "NO_CODEGEN")
    spark.conf.set("spark.sql.codegen.wholeStage", "false")
    try:
        df = spark.range(6).select("id", *(F.array(*[(F.col("id") * 0.1 + j).cast(t) for j in range(D)]).alias(c)
                                           for c, t in (("f", "float"), ("d", "double"))))
        nulls = F.array(*[F.lit(None).cast("float")] * D)
        df = df.withColumn("f", F.when(F.col("id") == 5, nulls).otherwise(F.col("f")))
        df = df.withColumn("v", array_to_vector("d"))
        expected = (np.arange(6)[:, None] * 0.1 + np.arange(D)).astype(np.float32)
        for col, kind in (("f", "float"), ("d", "double"), ("v", "vector")):
            got = _packed(spark, df, col, kind)
            for i in range(5):
                np.testing.assert_array_equal(got[i], expected[i], err_msg=kind)
            assert (got[5] is None) == (kind == "float"), kind  # row 5's float array holds only nulls
    finally:
        spark.conf.unset("spark.sql.codegen.factoryMode")
        spark.conf.unset("spark.sql.codegen.wholeStage")


@pytest.mark.parametrize("kind, size, message", [("int", D, "kind must be 'vector', 'float' or 'double', got 'int'"),
                                                 ("vector", 0, "size must be >= 1, got 0")])
def test_bad_arguments_are_named(spark, kind, size, message):
    with pytest.raises(IllegalArgumentException, match=message):
        jvm.float_rows(spark.sparkContext, F.col("v"), size, None, kind)


@pytest.mark.parametrize("col, kind, actual", [("f", "double", "array<double>"), ("d", "float", "array<float>")])
def test_a_column_of_another_element_type_fails_instead_of_being_misread(spark, col, kind, actual):
    # Through a shuffle, so the rows are Spark's unsafe rows (generic arrays fail with a ClassCastException)
    df = spark.createDataFrame([(0, Vectors.dense([0.5] * D), [0.5] * D, [0.5] * D)], SCHEMA).repartition(1)
    with pytest.raises(Exception, match=f"the feature column is not {actual}"):
        _packed(spark, df, col, kind)
