"""Sentiment of Rotten Tomatoes review snippets: sparkdl networks on token-id sequences -- an Embedding +
bidirectional LSTM and a Transformer encoder -- trained on Spark, against PySpark's LogisticRegression on TF-IDF
features of the same split.

All models share the text processing: ``RegexTokenizer`` (lower case, words of letters, digits and
apostrophes) and a ``CountVectorizer`` fitted on the training split. The vocabulary (words in at least
``--min-df`` training snippets, at most ``--vocab-size``) maps every word to a token id (1 + its index; 0 for
words outside it), giving an ``array<int>`` column of variable length that :class:`sparkdl.ml.DLClassifier`
reads directly: each network starts with ``SequenceLengths``, so rows are padded (to ``--max-length``) and the
padding contributes nothing -- the LSTM skips the padded steps, :class:`sparkdl.nn.TransformerClassifier` masks
them as attention keys and leaves them out of its mean. The baseline is ``IDF`` on the CountVectorizer counts
followed by ``LogisticRegression``. Accuracy is measured on the held-out split with
``MulticlassClassificationEvaluator``.

    python examples/text_classification.py                       # all 12,808 snippets, 80/20 split, both networks
    python examples/text_classification.py --network transformer --rows 2000 --epochs 2

Measured on all snippets (10,231 train / 2,577 test): LogisticRegression 0.7598 test
accuracy, Transformer encoder 0.7482 (-1.2 points), Embedding + BiLSTM 0.7439 (-1.6 points). The
networks lose: ~10k short snippets are few for word embeddings learnt from scratch, while TF-IDF + a regularised
linear model uses every vocabulary word from the start (details in bench/RESULTS.md, "Text pipeline"). The
defaults in :data:`CONFIGS` are the best settings found on a validation split of the training rows.

The last line printed is one JSON object with the accuracies, settings and timings.
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


#: Per network: training settings and builder arguments (the defaults are the best found, see the docstring).
CONFIGS = {
    "lstm": {"epochs": 6, "lr": 2e-3, "embedding_dim": 64, "hidden": 64, "dropout": 0.5},
    "transformer": {"epochs": 3, "lr": 5e-3, "d_model": 64, "nhead": 4, "num_layers": 1, "dim_feedforward": 128,
                    "dropout": 0.1},
}
NETWORKS = tuple(CONFIGS)


def lstm_network(vocab: int, max_length: int, seed: int, embedding_dim: int, hidden: int, dropout: float):
    """SequenceLengths -> Embedding -> bidirectional LSTM -> both final states -> Dropout -> Linear(2)."""
    from sparkdl import nn
    return nn.Sequential(nn.SequenceLengths(), nn.Embedding(vocab, embedding_dim),
                         nn.LSTM(embedding_dim, hidden, batch_first=True, bidirectional=True),
                         nn.RNNOutput("last"), nn.Dropout(dropout), nn.Linear(2 * hidden, 2)).initialize(seed)


def transformer_network(vocab: int, max_length: int, seed: int, **kw):
    """SequenceLengths -> TransformerClassifier: token + position embeddings, Transformer encoder layers with the
    padding masked, mean over the valid tokens, Linear(2)."""
    from sparkdl import nn
    return nn.Sequential(nn.SequenceLengths(), nn.TransformerClassifier(vocab, 2, max_length, **kw)).initialize(seed)


BUILDERS = {"lstm": lstm_network, "transformer": transformer_network}
LABELS = {"lstm": "Embedding+BiLSTM", "transformer": "Transformer encoder"}


def run(spark, rows=None, networks=NETWORKS, batch_size=64, vocab_size=10000, min_df=2, max_length=48, seed=0,
        num_partitions=None, logreg_max_iter=100, reg_param=0.05, **configs) -> dict:
    """Fit LogisticRegression and each of ``networks`` on the same split; returns the results as a dict.

    ``configs`` override :data:`CONFIGS` per network, e.g. ``lstm={"epochs": 2}``."""
    from pyspark.ml import Pipeline
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.feature import IDF, CountVectorizer, RegexTokenizer

    from sparkdl.ml import DLClassifier

    unknown = sorted(set(networks) - set(CONFIGS)) + sorted(set(configs) - set(CONFIGS))
    if unknown:
        raise ValueError(f"networks and per-network settings must be among {NETWORKS}, got {unknown}")
    train, test = load_frames(spark, rows, seed=seed)
    text = Pipeline(stages=[RegexTokenizer(inputCol="text", outputCol="words", pattern="[^a-z0-9']+"),
                            CountVectorizer(inputCol="words", outputCol="tf", vocabSize=vocab_size, minDF=min_df)])
    text_model = text.fit(train)
    vocabulary = text_model.stages[-1].vocabulary
    train = token_ids(text_model.transform(train), vocabulary).cache()
    test = token_ids(text_model.transform(test), vocabulary).cache()
    res = {"train_rows": train.count(), "test_rows": test.count(), "vocabulary": len(vocabulary),
           "max_length": max_length}
    accuracy = MulticlassClassificationEvaluator(metricName="accuracy")

    t0 = time.perf_counter()
    baseline = Pipeline(stages=[IDF(inputCol="tf", outputCol="tfidf"),
                                LogisticRegression(featuresCol="tfidf", maxIter=logreg_max_iter,
                                                   regParam=reg_param)]).fit(train)
    res["logreg_tfidf_accuracy"] = round(accuracy.evaluate(baseline.transform(test)), 4)
    res["logreg_fit_s"] = round(time.perf_counter() - t0, 1)

    for name in networks:
        cfg = {**CONFIGS[name], **configs.get(name, {})}
        epochs, lr = cfg.pop("epochs"), cfg.pop("lr")
        t0 = time.perf_counter()
        clf = DLClassifier(network=BUILDERS[name](len(vocabulary) + 1, max_length, seed, **cfg), featuresCol="ids",
                           maxLength=max_length, maxEpoch=epochs, batchSize=batch_size, learningRate=lr, seed=seed,
                           numPartitions=num_partitions)
        model = clf.fit(train)
        fit_s = time.perf_counter() - t0
        acc = round(accuracy.evaluate(model.transform(test)), 4)
        losses = model.summary.loss
        res[f"sparkdl_{name}"] = {
            "accuracy": acc, "difference": round(acc - res["logreg_tfidf_accuracy"], 4),
            "epochs": epochs, "lr": lr, **cfg, "fit_s": round(fit_s, 1), "first_loss": round(float(losses[0]), 4),
            "last_epoch_loss": round(float(np.mean(losses[-max(1, len(losses) // epochs):])), 4)}
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, help="random subset of the 12,808 snippets (default: all)")
    ap.add_argument("--network", choices=NETWORKS + ("both",), default="both")
    ap.add_argument("--epochs", type=int, help="training epochs (default: per network, see CONFIGS)")
    ap.add_argument("--lr", type=float, help="Adam learning rate (default: per network, see CONFIGS)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=48, help="tokens per row (longer snippets are truncated)")
    ap.add_argument("--vocab-size", type=int, default=10000, help="most frequent training words kept")
    ap.add_argument("--min-df", type=int, default=2, help="training snippets a vocabulary word must occur in")
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args(argv)
    networks = NETWORKS if args.network == "both" else (args.network,)
    override = {k: v for k, v in (("epochs", args.epochs), ("lr", args.lr)) if v is not None}
    from sparkdl.engine import get_or_create_session
    spark = get_or_create_session(args.master, app_name="sparkdl-text-classification")
    res = run(spark, rows=args.rows, networks=networks, batch_size=args.batch_size, max_length=args.max_length,
              vocab_size=args.vocab_size, min_df=args.min_df, **{name: override for name in networks})
    print(f"train {res['train_rows']} / test {res['test_rows']} snippets, vocabulary {res['vocabulary']} words")
    print(f"LogisticRegression on TF-IDF test accuracy {res['logreg_tfidf_accuracy']:.4f} "
          f"(fit {res['logreg_fit_s']:.0f} s)")
    for name in networks:
        r = res[f"sparkdl_{name}"]
        print(f"sparkdl {LABELS[name]:<26} test accuracy {r['accuracy']:.4f} ({r['difference']:+.4f} vs logreg; "
              f"fit {r['fit_s']:.0f} s, loss {r['first_loss']:.3f} -> {r['last_epoch_loss']:.3f})")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
