"""Score images on Spark with a CNN written in PyTorch: PyTorch -> ONNX -> sparkdl -> ``transform``.

1. A MobileNetV2 (torchvision's architecture, defined below so the example is self-contained) with random
   weights -- nothing can be downloaded from a model hub here; load a trained ``state_dict`` instead if you have
   one -- is wrapped with its preprocessing, so that it takes Spark's image struct as it is: BGR channels, values
   0..255, (3, H, W). The wrapper turns them into RGB and standardizes with the ImageNet mean and deviation.
2. It is exported with ``torch.onnx.export`` (``dynamo=True``, PyTorch's default exporter, or ``dynamo=False``)
   and imported with :func:`sparkdl.onnx.load`.
3. PNG images in a directory are read with Spark's image data source (``spark.read.format("image")``) and
   scored with :class:`sparkdl.ml.DLModel` ``transform``: the network is broadcast once, rows are decoded from
   Arrow in batches on the executors, and the ``prediction`` column holds the 1000 (or ``--classes``) logits.
4. The same ONNX file is run in onnxruntime on the same images, decoded on the driver; the largest absolute
   difference of the logits is printed (and PyTorch's, for the import).

    python examples/score_onnx_cnn.py                          # 64 images of 224x224, MobileNetV2 width 1.0
    python examples/score_onnx_cnn.py --images 16 --size 64 --width-mult 0.5 --exporter legacy

torch, onnxruntime and Pillow (to write the PNG files) are only needed by this example -- they are test extras of
sparkdl, not runtime dependencies: ``pip install 'sparkdl[onnx]' torch onnxruntime pillow``. The last line
printed is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile

import numpy as np

#: torchvision's MobileNetV2 table: expansion t, output channels c, blocks n, first stride s.
SETTING = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2], [6, 320, 1, 1]]
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # ImageNet, RGB, 0..1 scale


def mobilenet_v2(num_classes=1000, width_mult=1.0):
    """torchvision's ``mobilenet_v2`` (same module and parameter names, so its ``state_dict`` loads), behind an
    input layer that takes Spark's image layout (BGR, 0..255)."""
    import torch
    from torch import nn

    def divisible(v, d=8):
        new = max(d, int(v + d / 2) // d * d)
        return new + d if new < 0.9 * v else new

    def conv_bn(cin, cout, k=3, stride=1, groups=1):
        return nn.Sequential(nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU6())

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, t):
            super().__init__()
            hidden = int(round(cin * t))
            self.use_res_connect = stride == 1 and cin == cout
            layers = ([conv_bn(cin, hidden, 1)] if t != 1 else []) + [conv_bn(hidden, hidden, 3, stride, hidden),
                                                                       nn.Conv2d(hidden, cout, 1, bias=False),
                                                                       nn.BatchNorm2d(cout)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            cin, last = divisible(32 * width_mult), divisible(1280 * max(1.0, width_mult))
            features = [conv_bn(3, cin, stride=2)]
            for t, c, n, s in SETTING:
                for i in range(n):
                    features.append(InvertedResidual(cin, divisible(c * width_mult), s if i == 0 else 1, t))
                    cin = divisible(c * width_mult)
            self.features = nn.Sequential(*features, conv_bn(cin, last, 1))
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))
            # not in the state_dict (torchvision's weights load as they are); exported as constants
            self.register_buffer("mean", torch.tensor(MEAN).view(1, 3, 1, 1) * 255, persistent=False)
            self.register_buffer("std", torch.tensor(STD).view(1, 3, 1, 1) * 255, persistent=False)

        def forward(self, bgr):
            x = (bgr.flip(1) - self.mean) / self.std  # Spark's BGR 0..255 -> standardized RGB
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
            return self.classifier(torch.flatten(x, 1))

    return MobileNetV2()


def random_weights(net, seed=0):
    """Random weights with non-trivial BatchNorm statistics (a trained ``state_dict`` would go here)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.normal_(0, 0.2, generator=g)
                m.running_mean.normal_(0, 0.2, generator=g)
                m.running_var.uniform_(0.5, 2.0, generator=g)
    return net.eval()


def export(net, size, path, exporter="dynamo"):
    """``torch.onnx.export`` with a dynamic batch axis; ``exporter`` 'dynamo' (PyTorch's default) or 'legacy'."""
    import torch
    x = torch.zeros(2, 3, size, size)
    if exporter == "dynamo":  # weights inside the file (sparkdl opens no second file)
        torch.onnx.export(net, (x,), path, dynamo=True, external_data=False, verbose=False, input_names=["image"],
                          dynamic_shapes=({0: torch.export.Dim("N", min=1, max=4096)},))
    else:
        torch.onnx.export(net, (x,), path, dynamo=False, input_names=["image"],
                          dynamic_axes={"image": {0: "N"}})
    return path


def write_images(directory, n, size, seed=0):
    """``n`` synthetic RGB PNG images (a colour gradient and a rectangle), ``img<i>.png``; returns them as
    (n, size, size, 3) uint8."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 1, size)
    images = []
    for i in range(n):
        a, b = rng.uniform(0, 255, (2, 3))
        im = a + (b - a) * (ramp[:, None, None] + ramp[None, :, None]) / 2
        r0, c0 = rng.integers(0, size // 2, 2)
        im[r0:r0 + size // 3, c0:c0 + size // 3] = rng.uniform(0, 255, 3)
        images.append(im.astype(np.uint8))
        Image.fromarray(images[-1]).save(os.path.join(directory, f"img{i}.png"))
    return np.stack(images)


def onnxruntime_logits(path, bgr_chw):
    import onnxruntime as ort
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: bgr_chw})[0]


def run(spark, *, images=64, size=224, width_mult=1.0, num_classes=1000, exporter="dynamo", seed=0,
        workdir=None) -> dict:
    """The whole example; returns the checks as a dict."""
    import torch

    import sparkdl.onnx
    from sparkdl.ml import DLModel

    workdir = workdir or tempfile.mkdtemp(prefix="score-onnx-cnn-")
    image_dir = os.path.join(workdir, "images")
    os.makedirs(image_dir, exist_ok=True)
    rgb = write_images(image_dir, images, size, seed)
    bgr_chw = np.ascontiguousarray(rgb[..., ::-1].transpose(0, 3, 1, 2)).astype(np.float32)  # Spark's layout

    torch.manual_seed(seed)
    net = random_weights(mobilenet_v2(num_classes, width_mult), seed)
    path = export(net, size, os.path.join(workdir, "mobilenet_v2.onnx"), exporter)
    network = sparkdl.onnx.load(path)
    with torch.no_grad():
        torch_logits = net(torch.from_numpy(bgr_chw)).numpy()

    df = spark.read.format("image").load(image_dir)
    model = DLModel(network).setFeaturesCol("image").setFeatureShape([3, size, size])
    rows = model.transform(df).select("image.origin", "prediction").collect()
    index = [int(re.search(r"img(\d+)\.png$", r["origin"]).group(1)) for r in rows]
    spark_logits = np.zeros_like(torch_logits)
    spark_logits[index] = np.stack([r["prediction"].toArray() for r in rows])

    ort_logits = onnxruntime_logits(path, bgr_chw)
    return {"images": images, "size": size, "exporter": exporter, "rows_scored": len(rows),
            "parameters": int(network.num_parameters()),
            "max_abs_diff_onnxruntime": float(np.abs(spark_logits - ort_logits).max()),
            "max_abs_diff_torch": float(np.abs(spark_logits - torch_logits).max()),
            "logit_scale": float(np.abs(ort_logits).max()),
            "same_top_class": float(np.mean(spark_logits.argmax(1) == ort_logits.argmax(1))), "onnx_file": path}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--size", type=int, default=224, help="image height and width (default 224)")
    p.add_argument("--width-mult", type=float, default=1.0, help="MobileNetV2 width multiplier (default 1.0)")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--exporter", choices=("dynamo", "legacy"), default="dynamo")
    p.add_argument("--master", default="local[2]")
    args = p.parse_args(argv)
    from sparkdl.engine import get_or_create_session
    spark = get_or_create_session(args.master, app_name="sparkdl score_onnx_cnn")
    try:
        res = run(spark, images=args.images, size=args.size, width_mult=args.width_mult, num_classes=args.classes,
                  exporter=args.exporter)
    finally:
        spark.stop()
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
