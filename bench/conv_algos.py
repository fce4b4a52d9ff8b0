"""Convolution algorithm table check: every eligible algorithm's time on the model zoo's layer shapes, and the rule's
choice (:func:`sparkdl.nn.conv_algorithm.plan`), so the table of thresholds can be verified.

For each layer shape (ResNet-18 at 32x32 training and 224x224 inference, ResNet-50's bottleneck 1x1s, the
CIFAR ResNet-20, MobileNetV2's depthwise and 1x1 layers, VGG-11 at 64x64, LeNet-5, the small CNN) and each
algorithm that can compute it, one step is a forward pass plus the backward pass (input and weight
gradients), float32, on 1 numba thread and 1 BLAS thread. The algorithms of one shape are interleaved round
by round (``--repeats`` rounds, each timing ``--block`` steps of every algorithm in turn, the first algorithm
rotating from round to round) so that load from other processes hits them alike; a number is the median over
the rounds of the time per pass, in milliseconds, forward and backward apiece. Times are of the layer as it
runs: after the taps that read only padding are cut (:func:`sparkdl.nn.conv_algorithm.live_taps`; a row marked
``cut`` is a 3x3 layer on a 1x1 map, timed as the 1x1 convolution it becomes).

Prints one row per shape: the rule's choice, forward and backward times (``*`` marks the fastest of a pass),
the rule's forward+backward time over the fastest's (1.00 when the rule picks the fastest), and the forward
pass's own algorithm (:func:`sparkdl.nn.conv_algorithm.forward_algorithm`: ``direct`` on some layers whose backward
runs another) with its forward time over the fastest forward's. Run it on an
idle machine; the machine-readable last line is ``{"rows": [{"layer": ..., "rule": ..., "fastest": ...,
"rule_over_fastest": ..., "forward_rule": ..., "forward_rule_over_fastest": ..., "times_ms": {"forward": {...},
"backward": {...}}}, ...]}``.

Usage: ``python bench/conv_algos.py [--repeats 7] [--block 3] [--only SUBSTRING]``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from sparkdl.config import set_num_threads
from sparkdl.nn.conv import conv2d_backward, conv2d_forward
from sparkdl.nn.conv_algorithm import ConvShape, eligible_algorithms, forward_algorithm, plan
from sparkdl.nn.conv_im2col import ConvGeometry


def _c(name, batch, cin, cout, hw, k=3, s=1, p=None, g=1):
    """One row: (name, ConvShape) of a square layer; padding defaults to 'same' ((k - 1) // 2)."""
    p = (k - 1) // 2 if p is None else p
    return name, ConvShape(cin, cout, hw, hw, (k, k), (s, s), (p, p), (1, 1), g, batch, 1)


def zoo_shapes():
    """The zoo's distinct convolution shapes, with the batch each is trained (or served) at."""
    rows = [_c("lenet5.conv1", 128, 1, 6, 28, 5, p=2), _c("lenet5.conv2", 128, 6, 16, 14, 5, p=0)]
    rows += [_c("small_cnn.conv1", 64, 3, 32, 32), _c("small_cnn.conv2", 64, 32, 32, 32),
             _c("small_cnn.conv3", 64, 32, 64, 16), _c("small_cnn.conv4", 64, 64, 64, 16)]
    rows += [_c("resnet20.stem", 128, 3, 16, 32), _c("resnet20.16@32", 128, 16, 16, 32),
             _c("resnet20.32@16", 128, 32, 32, 16),
             _c("resnet20.64@8", 128, 64, 64, 8), _c("resnet20.down32", 128, 16, 32, 32, s=2)]
    for tag, batch, hw in (("r18@32", 64, 32), ("r18@224", 4, 224)):
        m = hw // 4  # after the 7x7/2 stem and the 3x3/2 max pool
        rows.append(_c(f"{tag}.conv1", batch, 3, 64, hw, 7, s=2))
        rows.append(_c(f"{tag}.layer1", batch, 64, 64, m))
        for i, c in enumerate((128, 256, 512)):
            rows += [_c(f"{tag}.layer{i + 2}.0.conv1", batch, c // 2, c, m >> i, s=2),
                     _c(f"{tag}.layer{i + 2}.conv", batch, c, c, m >> (i + 1)),
                     _c(f"{tag}.layer{i + 2}.0.down", batch, c // 2, c, m >> i, 1, s=2)]
    rows += [_c("r50@224.l1.reduce", 4, 256, 64, 56, 1), _c("r50@224.l1.expand", 4, 64, 256, 56, 1),
             _c("r50@224.l3.reduce", 4, 1024, 256, 14, 1), _c("r50@224.l4.expand", 4, 512, 2048, 7, 1)]
    for hw, c, s in ((112, 32, 1), (112, 96, 2), (56, 144, 1), (56, 144, 2), (28, 192, 1), (28, 192, 2),
                     (14, 384, 1), (14, 576, 1), (14, 576, 2), (7, 960, 1)):
        rows.append(_c(f"mbv2@224.dw{c}@{hw}/{s}", 4, c, c, hw, 3, s=s, g=c))
    rows += [_c("mbv2@224.stem", 4, 3, 32, 224, s=2), _c("mbv3@224.stem", 4, 3, 16, 224, s=2)]
    rows += [_c("mbv2@224.pw32-16@112", 4, 32, 16, 112, 1), _c("mbv2@224.pw16-96@112", 4, 16, 96, 112, 1),
             _c("mbv2@224.pw144-24@56", 4, 144, 24, 56, 1), _c("mbv2@224.pw192-64@14", 4, 384, 64, 14, 1),
             _c("mbv2@224.pw960-320@7", 4, 960, 320, 7, 1), _c("mbv2@224.pw320-1280@7", 4, 320, 1280, 7, 1)]
    rows += [_c(f"sq11@224.expand3x3.{c}@{hw}", 8, c // 4, c, hw)
             for c, hw in ((64, 55), (128, 27), (192, 13), (256, 13))]
    rows += [_c("vgg11@64.conv1", 32, 3, 64, 64), _c("vgg11@64.conv2", 32, 64, 128, 32),
             _c("vgg11@64.conv4", 32, 256, 256, 16), _c("vgg11@64.conv6", 32, 512, 512, 8),
             _c("vgg11@64.conv8", 32, 512, 512, 4)]
    return rows


def _forward(algorithm, x, w, b, geom, ho, wo, gy, gw):
    conv2d_forward(algorithm, x, w, b, geom, ho, wo)


def _backward(algorithm, x, w, b, geom, ho, wo, gy, gw):
    conv2d_backward(algorithm, x, w, gy, geom, gw, True)


def _block(fn, algorithm, args, block):
    t0 = time.perf_counter()
    for _ in range(block):
        fn(algorithm, *args)
    return (time.perf_counter() - t0) / block * 1e3


def time_shape(shape: ConvShape, repeats: int, block: int) -> dict:
    """``{"forward": {algorithm: median ms}, "backward": {...}}`` for every algorithm eligible for ``shape``
    (interleaved rounds; backward is the input and weight gradients)."""
    rng = np.random.default_rng(0)
    ho, wo = shape.output_size()
    geom = ConvGeometry(shape.kernel_size, shape.stride, shape.padding, shape.dilation, shape.groups)
    x = rng.standard_normal((shape.batch, shape.in_channels, shape.height, shape.width)).astype(np.float32)
    w = (0.1 * rng.standard_normal((shape.out_channels, shape.in_channels // shape.groups)
                                   + tuple(shape.kernel_size))).astype(np.float32)
    b = np.zeros(shape.out_channels, np.float32)
    gy = rng.standard_normal((shape.batch, shape.out_channels, ho, wo)).astype(np.float32)
    gw = np.empty_like(w)
    algorithms = list(eligible_algorithms(shape))
    args = (x, w, b, geom, ho, wo, gy, gw)
    for a in algorithms:  # compile and warm up
        _forward(a, *args)
        _backward(a, *args)
    times = {p: {a: [] for a in algorithms} for p in ("forward", "backward")}
    for r in range(repeats):
        for a in algorithms[r % len(algorithms):] + algorithms[:r % len(algorithms)]:
            times["forward"][a].append(_block(_forward, a, args, block))
            times["backward"][a].append(_block(_backward, a, args, block))
    return {p: {a: statistics.median(t) for a, t in ts.items()} for p, ts in times.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7, help="interleaved rounds per shape (median kept)")
    ap.add_argument("--block", type=int, default=3, help="steps per algorithm and pass per round")
    ap.add_argument("--only", default="", help="only layers whose name contains this substring")
    args = ap.parse_args(argv)
    set_num_threads(1)
    rows = []
    print(f"{'layer':26s} {'batch':>5s} {'rule':>9s}  forward ms | backward ms (1 thread; * fastest)  "
          f"rule/fastest fwd+bwd  forward rule/fastest")
    for name, shape in zoo_shapes():
        if args.only not in name:
            continue
        rule, _, cut = plan(shape)
        times = time_shape(cut, args.repeats, args.block)
        total = {a: times["forward"][a] + times["backward"][a] for a in times["forward"]}
        fastest = min(total, key=total.get)
        ratio = total[rule] / total[fastest]
        frule = forward_algorithm(cut)
        fratio = times["forward"][frule] / min(times["forward"].values())
        rows.append({"layer": name, "batch": shape.batch, "rule": rule, "fastest": fastest,
                     "rule_over_fastest": round(ratio, 3), "forward_rule": frule,
                     "forward_rule_over_fastest": round(fratio, 3),
                     "times_ms": {p: {a: round(t, 3) for a, t in d.items()} for p, d in times.items()}})
        cells = " | ".join(" ".join(f"{a[:5]}{'*' if a == min(d, key=d.get) else ' '}{t:8.2f}" for a, t in d.items())
                           for d in times.values())
        mark = " cut" if cut != shape else ""
        print(f"{name + mark:26s} {shape.batch:5d} {rule:>9s}  {cells}  {ratio:.2f}  {frule:>9s} {fratio:.2f}",
              flush=True)
    print(json.dumps({"rows": rows, "repeats": args.repeats, "block": args.block}))


if __name__ == "__main__":
    main()
