"""Fine-tune a PyTorch CNN on Spark through ONNX, then hand it back as ONNX.

1. A small CNN (two conv + BatchNorm blocks, two fully connected layers) is trained briefly in PyTorch on a
   part of Fashion-MNIST -- here, in the script, since nothing can be downloaded from a model hub.
2. It is exported with ``torch.onnx.export(dynamo=False)`` (eval mode: BatchNorm folds into the convs) and
   imported with :func:`sparkdl.onnx.load`; the imported network reproduces PyTorch's outputs.
3. It is fine-tuned on Spark with :class:`sparkdl.ml.DLClassifier` on other training images, the imported
   convolutions frozen (an optimizer parameter group ``{"params": "^conv", "frozen": True}``).
4. The fine-tuned network is evaluated on the test set, exported with :func:`sparkdl.onnx.save` and checked in
   onnxruntime (same outputs within 1e-5, same accuracy).

    python examples/finetune_onnx.py                          # 10,000 PyTorch + 20,000 Spark images
    python examples/finetune_onnx.py --pretrain-rows 3000 --finetune-rows 5000 --epochs 1

Needs ``pip install 'sparkdl[onnx]' onnxruntime torch``. The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training pixel mean and standard deviation (0..1 scale)
FROZEN = {"params": "^conv", "frozen": True}  # the imported feature extractor


def load_fashion_mnist():
    """Fashion-MNIST standardized, as float32 (N, 1, 28, 28) images and int64 labels."""
    from sparkdl.datasets import fetch_fashion_mnist
    (x, y), (xt, yt) = fetch_fashion_mnist()
    prep = lambda a: ((a.astype(np.float32) / 255.0 - MEAN) / STD).reshape(len(a), 1, 28, 28)
    return (prep(x), y.astype(np.int64)), (prep(xt), yt.astype(np.int64))


def torch_cnn():
    """The PyTorch network (conv1/bn1, conv2/bn2, fc1, fc2), defined here so the example is self-contained."""
    import torch
    from torch import nn

    class FashionCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
            self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
            self.fc1, self.fc2 = nn.Linear(16 * 7 * 7, 64), nn.Linear(64, 10)
            self.dropout = nn.Dropout(0.25)

        def forward(self, x):
            x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
            x = torch.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
            return self.fc2(self.dropout(torch.relu(self.fc1(torch.flatten(x, 1)))))

    return FashionCNN()


def train_torch(x, y, *, epochs=1, batch_size=64, lr=2e-3, seed=0):
    """Train :func:`torch_cnn` with Adam on (x, y); returns it in eval mode."""
    import torch
    torch.manual_seed(seed)
    net = torch_cnn()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for epoch in range(epochs):
        order = torch.randperm(len(x))
        for i in range(0, len(x), batch_size):
            ids = order[i:i + batch_size]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(xt[ids]), yt[ids]).backward()
            opt.step()
    return net.eval()


def to_onnx(net, path):
    """``torch.onnx.export`` with the legacy exporter (works offline) and a dynamic batch axis."""
    import torch
    torch.onnx.export(net, (torch.zeros(1, 1, 28, 28),), path, dynamo=False, input_names=["x"],
                      output_names=["logits"], dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})
    return path


def torch_logits(net, x):
    import torch
    with torch.no_grad():
        return net(torch.from_numpy(x)).numpy()


def frozen_adam(network, lr, freeze=True):
    """Adam over the network's layout; the imported convolutions frozen when ``freeze``."""
    from sparkdl.optim import Adam
    return Adam(lr=lr).configure(network.parameter_layout(), [FROZEN] if freeze else None)


def frame(spark, x, y, num_partitions=2):
    """A DataFrame of flat ``array<float>`` features and double labels (through Arrow, no per-row objects)."""
    import pandas as pd
    pdf = pd.DataFrame({"features": list(x.reshape(len(x), -1)), "label": y.astype(np.float64)})
    return spark.createDataFrame(pdf).repartition(num_partitions)


def onnxruntime_logits(path, x):
    import onnxruntime as ort
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def run(spark, *, pretrain_rows=10000, finetune_rows=20000, test_rows=None, torch_epochs=1, epochs=2,
        batch_size=128, lr=1e-3, freeze=True, seed=0, workdir=None) -> dict:
    """The whole round trip; returns accuracies and checks as a dict."""
    import sparkdl.onnx
    from sparkdl.ml import DLClassifier

    (x, y), (xt, yt) = load_fashion_mnist()
    if test_rows:
        xt, yt = xt[:test_rows], yt[:test_rows]
    workdir = workdir or tempfile.mkdtemp(prefix="finetune-onnx-")
    net = train_torch(x[:pretrain_rows], y[:pretrain_rows], epochs=torch_epochs, seed=seed)
    imported = sparkdl.onnx.load(to_onnx(net, os.path.join(workdir, "pytorch.onnx")))
    import_error = float(np.abs(imported(xt[:256]) - torch_logits(net, xt[:256])).max())
    accuracy = lambda logits: float(np.mean(logits.argmax(axis=1) == yt))
    before = accuracy(imported(xt))

    lo, hi = pretrain_rows, pretrain_rows + finetune_rows  # images PyTorch did not see
    frozen_before = {k: v.copy() for k, v in imported.state_dict().items() if k.startswith("conv")}
    clf = DLClassifier(network=imported, featureShape=[1, 28, 28], optimizer=frozen_adam(imported, lr, freeze),
                       batchSize=batch_size, maxEpoch=epochs, seed=seed)
    model = clf.fit(frame(spark, x[lo:hi], y[lo:hi]))
    tuned = model.network
    predictions = model.transform(frame(spark, xt, yt)).select("label", "prediction").toPandas()
    after = float(np.mean(predictions["label"] == predictions["prediction"]))
    frozen_kept = all(np.array_equal(tuned.state_dict()[k], v) for k, v in frozen_before.items())

    path = sparkdl.onnx.save(tuned, os.path.join(workdir, "finetuned.onnx"), input_shape=(1, 28, 28))
    ort_logits = onnxruntime_logits(path, xt)
    return {"pretrain_rows": pretrain_rows, "finetune_rows": hi - lo, "test_rows": len(xt),
            "torch_accuracy": accuracy(torch_logits(net, xt)), "imported_accuracy": before,
            "import_max_abs_error": import_error, "finetuned_accuracy": after, "frozen_layers_unchanged": frozen_kept,
            "onnxruntime_accuracy": accuracy(ort_logits),
            "onnxruntime_max_abs_error": float(np.abs(ort_logits - tuned(xt)).max()),
            "parameters": list(imported.state_dict()), "onnx_file": path}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pretrain-rows", type=int, default=10000)
    p.add_argument("--finetune-rows", type=int, default=20000)
    p.add_argument("--test-rows", type=int, default=None)
    p.add_argument("--torch-epochs", type=int, default=1)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--no-freeze", action="store_true", help="fine-tune the imported convolutions too")
    p.add_argument("--master", default="local[2]")
    args = p.parse_args(argv)
    from sparkdl.engine import get_or_create_session
    spark = get_or_create_session(args.master, app_name="sparkdl finetune_onnx")
    res = run(spark, pretrain_rows=args.pretrain_rows, finetune_rows=args.finetune_rows, test_rows=args.test_rows,
              torch_epochs=args.torch_epochs, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
              freeze=not args.no_freeze)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
