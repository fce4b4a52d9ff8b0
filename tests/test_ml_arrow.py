"""The Arrow <-> numpy conversions of sparkdl.ml (no Spark needed): every supported column kind, sliced
arrays, invalid rows, and the classification output post-processing."""
import numpy as np
import pyarrow as pa
import pytest

from sparkdl.ml.arrow import FeatureSpec, decode_features, decode_labels, dense_vectors, npy_bytes, npy_load
from sparkdl.ml.classifier import classification_outputs
from sparkdl.ml.estimator import regression_outputs


def _vector_array(rows):
    """VectorUDT's Arrow form from Python rows: list (dense), (size, indices, values) (sparse) or None."""
    types, sizes, indices, values = [], [], [], []
    for r in rows:
        if r is None:
            types.append(None), sizes.append(None), indices.append(None), values.append(None)
        elif isinstance(r, tuple):
            types.append(0), sizes.append(r[0]), indices.append(list(r[1])), values.append(list(r[2]))
        else:
            types.append(1), sizes.append(None), indices.append(None), values.append(list(r))
    mask = pa.array([r is None for r in rows])
    return pa.StructArray.from_arrays(
        [pa.array(types, pa.int8()), pa.array(sizes, pa.int32()), pa.array(indices, pa.list_(pa.int32())),
         pa.array(values, pa.list_(pa.float64()))], names=["type", "size", "indices", "values"], mask=mask)


def _spec(kind, size, sample=None, columns=("f",)):
    shape = (size,) if isinstance(size, int) else tuple(size)
    return FeatureSpec(kind, columns, shape, sample or (int(np.prod(shape)),))


def test_dense_vectors_and_reshape():
    arr = _vector_array([[1, 2, 3, 4], [5, 6, 7, 8]])
    x, ok = decode_features(_spec("vector", 4, (1, 2, 2)), [arr])
    assert x.dtype == np.float32 and x.shape == (2, 1, 2, 2)
    np.testing.assert_array_equal(x.reshape(2, 4), [[1, 2, 3, 4], [5, 6, 7, 8]])
    assert ok.tolist() == [True, True]


def test_sparse_and_dense_mixed_equals_densified():
    rows = [[1.0, 0.0, 2.0], (3, [1], [5.0]), (3, [0, 2], [-1.0, 4.0]), [0.5, 0.5, 0.5], (3, [], [])]
    x, ok = decode_features(_spec("vector", 3), [_vector_array(rows)])
    expected = [[1, 0, 2], [0, 5, 0], [-1, 0, 4], [0.5, 0.5, 0.5], [0, 0, 0]]
    np.testing.assert_array_equal(x, expected)
    assert ok.all()


def test_sliced_arrays_use_their_offset():
    arr = _vector_array([[9, 9], (2, [1], [7.0]), [1, 2], [3, 4]])
    x, ok = decode_features(_spec("vector", 2), [arr.slice(1, 3)])
    np.testing.assert_array_equal(x, [[0, 7], [1, 2], [3, 4]])
    lists = pa.array([[0.0, 0.0], [1.0, 2.0], [3.0, 4.0]], pa.list_(pa.float32()))
    x, _ = decode_features(_spec("array", 2), [lists.slice(1)])
    np.testing.assert_array_equal(x, [[1, 2], [3, 4]])


def test_invalid_vector_rows_are_flagged():
    rows = [[1.0, 2.0], None, [1.0, 2.0, 3.0], (3, [0], [1.0]), [np.nan, 1.0], [np.inf, 0.0], (2, [1], [8.0])]
    x, ok = decode_features(_spec("vector", 2), [_vector_array(rows)])
    assert ok.tolist() == [True, False, False, False, False, False, True]
    np.testing.assert_array_equal(x[[0, 6]], [[1, 2], [0, 8]])
    assert np.isnan(x[~ok]).all()


def test_arrays_with_nulls_and_wrong_lengths():
    arr = pa.array([[1, 2], None, [3, None], [4, 5, 6], [7, 8]], pa.list_(pa.int64()))
    x, ok = decode_features(_spec("array", 2), [arr])
    assert ok.tolist() == [True, False, False, False, True]
    np.testing.assert_array_equal(x[ok], [[1, 2], [7, 8]])


def test_scalar_columns():
    cols = [pa.array([1.0, 2.0, None]), pa.array([3.0, 4.0, 5.0])]
    x, ok = decode_features(_spec("scalar", 2, columns=("a", "b")), cols)
    np.testing.assert_array_equal(x[:2], [[1, 3], [2, 4]])
    assert ok.tolist() == [True, True, False]


def _image_array(images, modes=None):
    """Spark's image struct from (H, W, C) uint8 arrays (or None)."""
    n = len(images)
    modes = modes or [{1: 0, 3: 16, 4: 24}[im.shape[2]] if im is not None else None for im in images]
    return pa.StructArray.from_arrays(
        [pa.array(["origin"] * n), pa.array([im.shape[0] if im is not None else None for im in images], pa.int32()),
         pa.array([im.shape[1] if im is not None else None for im in images], pa.int32()),
         pa.array([im.shape[2] if im is not None else None for im in images], pa.int32()),
         pa.array(modes, pa.int32()),
         pa.array([im.tobytes() if im is not None else None for im in images], pa.binary())],
        names=["origin", "height", "width", "nChannels", "mode", "data"],
        mask=pa.array([im is None for im in images]))


def test_images_become_chw_float():
    rng = np.random.default_rng(0)
    ims = [rng.integers(0, 256, (4, 5, 3), dtype=np.uint8) for _ in range(3)]
    arr = _image_array(ims + [None, rng.integers(0, 256, (5, 4, 3), dtype=np.uint8)])
    x, ok = decode_features(FeatureSpec("image", ("image",), (3, 4, 5), (3, 4, 5)), [arr])
    assert ok.tolist() == [True, True, True, False, False]
    for i in range(3):
        np.testing.assert_array_equal(x[i], ims[i].transpose(2, 0, 1).astype(np.float32))
    x, ok = decode_features(FeatureSpec("image", ("image",), (3, 4, 5), (3, 4, 5)), [arr.slice(1, 2)])
    np.testing.assert_array_equal(x[1], ims[2].transpose(2, 0, 1))
    bad_mode = _image_array(ims[:1], modes=[5])
    assert not decode_features(FeatureSpec("image", ("image",), (3, 4, 5), (3, 4, 5)), [bad_mode])[1][0]


def test_labels_and_dense_vector_round_trip():
    np.testing.assert_array_equal(decode_labels("scalar", pa.array([1, None, 3])), [1, np.nan, 3])
    m = np.arange(6.0).reshape(3, 2)
    vec = dense_vectors(m)
    np.testing.assert_array_equal(decode_labels("vector", vec, 2), m)
    x, ok = decode_features(_spec("vector", 2), [vec])
    np.testing.assert_array_equal(x, m)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(npy_load(npy_bytes(a)), a)


def test_transform_outputs_have_the_arrow_schema_spark_expects():
    # an Arrow UDF result of exactly the return type's schema skips pyspark's per-batch cast (enforce_schema)
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import DoubleType, StructField, StructType

    from sparkdl.ml.predict import encode_outputs
    assert dense_vectors(np.zeros((2, 3))).type == to_arrow_type(VectorUDT(), timezone="UTC")
    fields = ["rawPrediction", "probability", "prediction"]
    out = encode_outputs(classification_outputs(np.random.default_rng(0).random((4, 3)), fields), fields)
    rtype = StructType([StructField("rawPrediction", VectorUDT()), StructField("probability", VectorUDT()),
                        StructField("prediction", DoubleType())])
    expected = pa.schema([pa.field("_0", to_arrow_type(rtype, timezone="UTC"))])
    assert pa.schema([pa.field("_0", out.type)]).equals(expected)


def test_classification_outputs_multiclass():
    out = np.array([[1.0, 2.0, 3.0], [1000.0, 0.0, -1000.0], [np.nan, 0.0, 0.0]])
    raw, prob, pred = classification_outputs(out, ["rawPrediction", "probability", "prediction"])
    lse = np.log(np.exp(1.0) + np.exp(2.0) + np.exp(3.0))
    np.testing.assert_allclose(raw[0], [1 - lse, 2 - lse, 3 - lse])
    np.testing.assert_allclose(prob[:2].sum(axis=1), 1.0)
    np.testing.assert_allclose(prob[1], [1, 0, 0])
    assert pred.tolist()[:2] == [2.0, 0.0] and np.isnan(pred[2])
    assert np.isnan(prob[2]).all()


def test_classification_outputs_one_logit_is_binary():
    raw, prob, pred = classification_outputs(np.array([[-2.0], [0.5], [800.0]]),
                                             ["rawPrediction", "probability", "prediction"])
    np.testing.assert_allclose(raw[0], [2.0, -2.0])
    p = prob
    np.testing.assert_allclose(p[:, 1], 1 / (1 + np.exp(-np.array([-2.0, 0.5, 800.0]))))
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert pred.tolist() == [0.0, 1.0, 1.0]
    only = classification_outputs(np.array([[1.0, 0.0]]), ["prediction"])
    assert len(only) == 1 and only[0].tolist() == [0.0]


def test_regression_outputs_scalar_or_vector():
    assert regression_outputs(np.array([[1.5], [2.5]]), ["prediction"])[0].tolist() == [1.5, 2.5]
    vec = regression_outputs(np.array([[1.0, 2.0]]), ["prediction"])[0]
    assert vec.tolist() == [[1.0, 2.0]]


def test_packed_rows_are_viewed_without_copy_and_nulls_become_nan():
    m = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    rows = [r.astype("<f4").tobytes() for r in m]
    spec = FeatureSpec("vector", ("f",), (4,), (2, 2), packed=True)
    x, ok = decode_features(spec, [pa.array(rows, pa.binary())])
    assert x.shape == (3, 2, 2) and ok.all() and not x.flags.owndata  # a view of the Arrow buffer
    np.testing.assert_array_equal(x.reshape(3, 4), m)
    sliced = pa.array([rows[0], None, rows[2], rows[1]], pa.binary()).slice(1, 3)
    x, ok = decode_features(spec, [sliced])
    assert ok.tolist() == [False, True, True]
    assert np.isnan(x[0]).all()
    np.testing.assert_array_equal(x[1:].reshape(2, 4), m[[2, 1]])
    x, ok = decode_features(spec, [pa.array([], pa.binary())])
    assert x.shape == (0, 2, 2) and ok.shape == (0,)
    with pytest.raises(ValueError, match="16 bytes each"):
        decode_features(spec, [pa.array([b"\0" * 12], pa.binary())])


def test_unknown_kind_rejected():
    with pytest.raises(ValueError, match="unknown feature kind"):
        decode_features(FeatureSpec("text", ("t",), (1,), (1,)), [pa.array(["a"])])
