"""Sentiment of Rotten Tomatoes review snippets: a sparkdl Embedding + LSTM classifier on token-id sequences,
trained on Spark, against PySpark's LogisticRegression on TF-IDF features of the same split.

Both models share the text processing: ``RegexTokenizer`` (lower case, words of letters, digits and
apostrophes) and a ``CountVectorizer`` fitted on the training split. The vocabulary (words in at least
``--min-df`` training snippets, at most ``--vocab-size``) maps every word to a token id (1 + its index; 0 for
words outside it), giving an ``array<int>`` column of variable length that :class:`sparkdl.ml.DLClassifier`
reads directly: the network starts with ``SequenceLengths``, so rows are padded (to ``--max-length``) and the
LSTM skips the padding. The baseline is ``IDF`` on the CountVectorizer counts followed by
``LogisticRegression``. Accuracy is measured on the held-out split with ``MulticlassClassificationEvaluator``.

    python examples/text_classification.py                    # all 12,808 snippets, 80/20 split
    python examples/text_classification.py --rows 2000 --epochs 2

The last line printed is one JSON object with both accuracies and the timings.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import pandas as pd  # module level: the pandas_udf's type hints are resolved here


def load_frames(spark, rows=None, test_fraction=0.2, seed=0):
    """Train/test DataFrames with columns ``text`` (str) and ``label`` (double: 1 fresh, 0 rotten); ``rows``
    takes a random subset first. The split is a seeded random split of the snippets."""
    from sparkdl.datasets import fetch_rotten_tomatoes
    pdf = fetch_rotten_tomatoes()[["text", "label"]]
    if rows is not None and rows < len(pdf):
        pdf = pdf.sample(n=rows, random_state=seed)
    pdf = pdf.assign(label=pdf["label"].astype(np.float64))
    test = np.random.default_rng(seed).random(len(pdf)) < test_fraction
    return spark.createDataFrame(pdf[~test]), spark.createDataFrame(pdf[test])


def token_ids(df, vocabulary, words_col="words", ids_col="ids"):
    """``df`` plus ``ids_col`` (array<int>): 1 + the vocabulary index of each word, 0 for other words."""
    from pyspark.sql.functions import pandas_udf
    index = {w: i + 1 for i, w in enumerate(vocabulary)}

    @pandas_udf("array<int>")
    def to_ids(words: pd.Series) -> pd.Series:
        return words.map(lambda ws: np.array([index.get(w, 0) for w in ws], np.int32))
    return df.withColumn(ids_col, to_ids(words_col))


def lstm_network(vocab: int, embedding_dim: int, hidden: int, dropout: float, seed: int):
    """SequenceLengths -> Embedding -> bidirectional LSTM -> both final states -> Dropout -> Linear(2)."""
    from sparkdl import nn
    return nn.Sequential(nn.SequenceLengths(), nn.Embedding(vocab, embedding_dim),
                         nn.LSTM(embedding_dim, hidden, batch_first=True, bidirectional=True),
                         nn.RNNOutput("last"), nn.Dropout(dropout), nn.Linear(2 * hidden, 2)).initialize(seed)


def run(spark, rows=None, epochs=6, batch_size=64, vocab_size=10000, min_df=2, max_length=48, embedding_dim=64,
        hidden=64, dropout=0.5, lr=2e-3, seed=0, num_partitions=None, logreg_max_iter=100, reg_param=0.05) -> dict:
    """Fit both classifiers on the same split; returns the results as a dict."""
    from pyspark.ml import Pipeline
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.feature import IDF, CountVectorizer, RegexTokenizer

    from sparkdl.ml import DLClassifier

    train, test = load_frames(spark, rows, seed=seed)
    text = Pipeline(stages=[RegexTokenizer(inputCol="text", outputCol="words", pattern="[^a-z0-9']+"),
                            CountVectorizer(inputCol="words", outputCol="tf", vocabSize=vocab_size, minDF=min_df)])
    text_model = text.fit(train)
    vocabulary = text_model.stages[-1].vocabulary
    train = token_ids(text_model.transform(train), vocabulary).cache()
    test = token_ids(text_model.transform(test), vocabulary).cache()
    n_train, n_test = train.count(), test.count()
    accuracy = MulticlassClassificationEvaluator(metricName="accuracy")

    t0 = time.perf_counter()
    baseline = Pipeline(stages=[IDF(inputCol="tf", outputCol="tfidf"),
                                LogisticRegression(featuresCol="tfidf", maxIter=logreg_max_iter,
                                                   regParam=reg_param)]).fit(train)
    logreg_acc = accuracy.evaluate(baseline.transform(test))
    logreg_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    clf = DLClassifier(network=lstm_network(len(vocabulary) + 1, embedding_dim, hidden, dropout, seed),
                       featuresCol="ids", maxLength=max_length, maxEpoch=epochs, batchSize=batch_size,
                       learningRate=lr, seed=seed, numPartitions=num_partitions)
    model = clf.fit(train)
    fit_s = time.perf_counter() - t0
    lstm_acc = accuracy.evaluate(model.transform(test))
    losses = model.summary.loss
    return {"train_rows": n_train, "test_rows": n_test, "vocabulary": len(vocabulary), "max_length": max_length,
            "epochs": epochs, "sparkdl_lstm_accuracy": round(lstm_acc, 4),
            "logreg_tfidf_accuracy": round(logreg_acc, 4), "difference": round(lstm_acc - logreg_acc, 4), "sparkdl_fit_s": round(fit_s, 1),
            "logreg_fit_s": round(logreg_s, 1), "first_loss": round(float(losses[0]), 4),
            "last_epoch_loss": round(float(np.mean(losses[-max(1, len(losses) // epochs):])), 4)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, help="random subset of the 12,808 snippets (default: all)")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=48, help="tokens per row (longer snippets are truncated)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args(argv)
    from sparkdl.engine import get_or_create_session
    spark = get_or_create_session(args.master, app_name="sparkdl-text-classification")
    res = run(spark, rows=args.rows, epochs=args.epochs, batch_size=args.batch_size, max_length=args.max_length,
              lr=args.lr)
    print(f"train {res['train_rows']} / test {res['test_rows']} snippets, vocabulary {res['vocabulary']} words")
    print(f"sparkdl Embedding+BiLSTM test accuracy {res['sparkdl_lstm_accuracy']:.4f} "
          f"(fit {res['sparkdl_fit_s']:.0f} s, loss {res['first_loss']:.3f} -> {res['last_epoch_loss']:.3f})")
    print(f"LogisticRegression on TF-IDF accuracy  {res['logreg_tfidf_accuracy']:.4f} "
          f"(fit {res['logreg_fit_s']:.0f} s)")
    print(f"difference (sparkdl - logreg)          {res['difference']:+.4f}")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
