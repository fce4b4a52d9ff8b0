"""The PyTorch side of ``bench/transform.py``: Spark's ``predict_batch_udf`` serving a PyTorch twin of the network,
in a process and Spark session of its own that never import sparkdl, so PyTorch runs in its default environment.

``bench/transform.py`` starts it (with its own environment unchanged) after the sparkdl measurements of the same
master and model, which wrote into ``EXCHANGE``: ``x.npy`` (the distinct rows of the data, repeated here to
``--rows``), ``MODEL.npz`` (the weights) and ``MODEL.json`` (the layers, the feature shape and the Spark settings
of sparkdl's session). The session here gets the same Spark settings, this interpreter for its Python workers
(``spark.pyspark.python``) and PySpark's own worker daemon; its DataFrame is built, partitioned (2 partitions per
core) and cached as in ``bench/transform.py``; each task scores with 1 PyTorch thread. The rate is the best of
``--repeats`` runs after one cold and ``--warmup`` untimed ones, each written to ``noop``.

    python bench/transform_torch.py EXCHANGE MODEL MASTER [--rows N] [--batch B] [--repeats R] [--warmup W]

Prints one JSON object as its last line: ``{"torch_predict_batch_udf_rows_per_s": rows/s, "cores": n}``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from transform import _arrow_table, _best_rate, _noop, _warm  # noqa: E402  (bench/transform.py; no sparkdl import)

#: The ``torch.nn`` layers a spec from ``bench/transform.py``'s ``twin_spec`` may name.
LAYERS = ("Linear", "Conv2d", "MaxPool2d", "ReLU", "Flatten")


def torch_net(layers: list, state: dict):
    """An eval-mode ``torch.nn.Sequential`` of ``layers`` (``[[kind, kwargs], ...]``) holding the weights
    ``state`` (name -> numpy array). Raises ValueError for a kind outside :data:`LAYERS`."""
    import torch
    import torch.nn as tnn
    bad = [kind for kind, _ in layers if kind not in LAYERS]
    if bad:
        raise ValueError(f"torch_net: layers must be among {LAYERS}, got {bad}")
    twin = tnn.Sequential(*[getattr(tnn, kind)(**kwargs) for kind, kwargs in layers])
    twin.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})
    return twin.eval()


def _torch_udf(layers: list, state: dict, shape: list, batch: int):
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql.types import ArrayType, FloatType

    def make_predict_fn():
        import torch
        torch.set_num_threads(1)
        model = torch_net(layers, state)

        def predict(inputs: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return model(torch.from_numpy(inputs.reshape(-1, *shape))).numpy()
        return predict
    return predict_batch_udf(make_predict_fn, return_type=ArrayType(FloatType()), batch_size=batch,
                             input_tensor_shapes=[[784]])


def measure(args) -> dict:
    """Rows/s of ``predict_batch_udf`` + PyTorch for ``args.model`` on ``args.master`` (see the module docstring).
    Raises RuntimeError if sparkdl was imported in this process."""
    from pyspark.sql import SparkSession
    with open(os.path.join(args.exchange, f"{args.model}.json")) as f:
        spec = json.load(f)
    with np.load(os.path.join(args.exchange, f"{args.model}.npz")) as w:
        state = {k: w[k] for k in w.files}
    builder = SparkSession.builder.master(args.master).appName("bench-transform-torch")
    for key, value in {**spec["conf"], "spark.pyspark.python": sys.executable}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    cores = spark.sparkContext.defaultParallelism
    x = np.resize(np.load(os.path.join(args.exchange, "x.npy")), (args.rows, 784))
    df = spark.createDataFrame(_arrow_table(x)).repartition(2 * cores).cache()
    df.count()
    udf = _torch_udf(spec["layers"], state, spec["shape"], args.batch)
    job = (lambda: _noop(df.withColumn("logits", udf("pixels"))))
    job()  # cold: Python workers, the UDF and its weights
    _warm(job, args.warmup)
    rate = _best_rate(job, args.rows, args.repeats)
    spark.stop()
    if "sparkdl" in sys.modules:
        raise RuntimeError("bench/transform_torch.py imported sparkdl: PyTorch must run without it")
    return {"torch_predict_batch_udf_rows_per_s": round(rate, 1), "cores": cores}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("exchange", help="directory bench/transform.py's sparkdl process wrote")
    parser.add_argument("model", help="model name (MODEL.json / MODEL.npz in EXCHANGE)")
    parser.add_argument("master", help="Spark master, e.g. local[2]")
    parser.add_argument("--rows", type=int, default=100000)
    parser.add_argument("--batch", type=int, default=1024, help="predict_batch_udf batch_size")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs after the first")
    print(json.dumps(measure(parser.parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
