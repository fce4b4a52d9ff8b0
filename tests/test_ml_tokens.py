"""Token-id sequence columns in DLClassifier: decoding (padding, truncation, invalid rows), SQL validation before
training, training an Embedding + LSTM network on variable-length rows, and transform agreeing with the network
run locally on the same ids."""
import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, DoubleType, IntegerType, LongType, StructField, StructType

from sparkdl import nn
from sparkdl.ml import DLClassificationModel, DLClassifier
from sparkdl.ml.tokens import decode_tokens

VOCAB = 12


def test_decode_pads_truncates_and_marks_invalid_rows():
    arr = pa.array([[1, 2, 3], [], None, [4, 5, 6, 7, 8], [1, None], [11, 12], [-1]], pa.list_(pa.int64()))
    x, ok = decode_tokens(arr, 4, -1, VOCAB, per_batch=False)
    assert ok.tolist() == [True, True, False, True, False, False, False]
    np.testing.assert_array_equal(x[[0, 1, 3]], [[1, 2, 3, -1], [-1, -1, -1, -1], [4, 5, 6, 7]])
    assert np.isnan(x[~ok]).all() and x.dtype == np.float32
    x, ok = decode_tokens(arr.slice(0, 2), 4, -7, None, per_batch=True)  # a sliced batch, padded to its longest
    np.testing.assert_array_equal(x, [[1, 2, 3], [-7, -7, -7]])


def _net(seed=0, hidden=8):
    return nn.Sequential(nn.SequenceLengths(), nn.Embedding(VOCAB, 8, padding_idx=0),
                         nn.LSTM(8, hidden, batch_first=True), nn.RNNOutput("last"), nn.Linear(hidden, 2)).initialize(seed)


def _token_df(spark, n=240, seed=0, element=IntegerType()):
    """Label 1 iff token 3 occurs in the row; rows of 1..9 tokens in [1, VOCAB)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        ids = rng.integers(4, VOCAB, rng.integers(1, 10)).tolist()
        label = i % 2
        if label:
            ids[rng.integers(0, len(ids))] = 3
        rows.append((i, ids, float(label)))
    schema = StructType([StructField("id", LongType()), StructField("tokens", ArrayType(element)),
                         StructField("label", DoubleType())])
    return spark.createDataFrame(rows, schema)


def test_lstm_classifier_learns_from_variable_length_token_rows(spark):
    df = _token_df(spark)
    clf = DLClassifier(network=_net(), featuresCol="tokens", maxEpoch=6, batchSize=120, learningRate=0.05,
                       numPartitions=2)
    model = clf.fit(df)
    assert model.getFeatureShape() == [9]  # padded to the longest training row
    loss = model.summary.loss
    assert len(loss) == 12 and np.mean(loss[-2:]) < 0.8 * np.mean(loss[:2])
    out = model.transform(df).select("id", "tokens", "label", "prediction", "probability").orderBy("id").collect()
    acc = np.mean([r["prediction"] == r["label"] for r in out])
    assert acc > 0.75, acc
    # transform pads each batch to its own longest row; locally every row is padded to 12: same probabilities
    ids = np.full((len(out), 12), -1, np.float32)
    for i, r in enumerate(out):
        ids[i, :len(r["tokens"])] = r["tokens"]
    logits = model.network(ids)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(np.array([r["probability"].toArray() for r in out]), p, rtol=1e-5, atol=1e-6)


def test_max_length_truncates_and_long_ids_work(spark):
    df = _token_df(spark, n=40, seed=1, element=LongType())
    model = DLClassifier(network=_net(1), featuresCol="tokens", maxEpoch=1, maxLength=4, numPartitions=1).fit(df)
    assert model.getFeatureShape() == [4] and model.getMaxLength() == 4
    rows = model.transform(df).select("tokens", "rawPrediction").collect()
    ids = np.full((len(rows), 4), -1, np.float32)
    for i, r in enumerate(rows):
        t = r["tokens"][:4]
        ids[i, :len(t)] = t
    logits = model.network(ids)
    raw = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    np.testing.assert_allclose(np.array([r["rawPrediction"].toArray() for r in rows]), raw, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad,what", [(-2, "negative token ids"), (VOCAB, f"token ids >= {VOCAB}")])
def test_bad_ids_are_reported_before_training_with_an_example_row(spark, bad, what):
    schema = StructType([StructField("tokens", ArrayType(IntegerType())), StructField("label", DoubleType())])
    df = spark.createDataFrame([([1, 2], 0.0), ([3, bad, 4], 1.0), ([5], 0.0)], schema)
    with pytest.raises(ValueError, match=rf"column 'tokens' has 1 of 3 rows with {what}.*e\.g\. "
                                         rf"Row\(tokens=\[3, {bad}, 4\], label=1\.0\)"):
        DLClassifier(network=_net(), featuresCol="tokens", maxEpoch=1).fit(df)
    # 'skip' drops the row and trains on the others; transform with 'keep' outputs NaN for it
    model = DLClassifier(network=_net(), featuresCol="tokens", maxEpoch=1, handleInvalid="skip").fit(df)
    assert model.numSkippedRows == 1
    preds = [r["prediction"] for r in model.setHandleInvalid("keep").transform(df).collect()]
    assert np.isnan(preds[1]) and not np.isnan(preds[0]) and not np.isnan(preds[2])


def test_token_network_needs_an_integer_array_column(spark):
    schema = StructType([StructField("tokens", ArrayType(DoubleType())), StructField("label", DoubleType())])
    df = spark.createDataFrame([([1.0, 2.0], 0.0)], schema)
    with pytest.raises(TypeError, match="starts with SequenceLengths.*array<int> or array<long>.*got array<double>"):
        DLClassifier(network=_net(), featuresCol="tokens").fit(df)
    with pytest.raises(ValueError, match="maxLength must be >= 1"):
        DLClassifier(maxLength=0)
    with pytest.raises(ValueError, match="set maxLength"):
        DLClassificationModel(_net()).setFeaturesCol("tokens").transform(_token_df(spark, n=4))
