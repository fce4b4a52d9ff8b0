"""The model zoo written in PyTorch: one twin per builder of :mod:`sparkdl.models`, same names, same keyword
arguments, same ``state_dict`` keys and shapes (so weights saved from a twin with safetensors load into the sparkdl
model with :func:`sparkdl.io.load_safetensors`).

``TORCH_ZOO[name](**kwargs)`` builds the twin of ``sparkdl.models.MODELS[name](**kwargs)``.
``SHAPES[name]`` describes a small test input and the builder keyword arguments that go with it:

- ``input``: the input shape, or a tuple of shapes for a model with several inputs (``ncf``: user and item ids;
  ``bert_mini``: token ids and the attention mask, 1 = token, 0 = padding);
- ``dtype``: ``"float32"`` (images) or ``"int64"`` (ids), one per input when there are several;
- ``high``: exclusive upper bound of integer inputs (one per input), absent for float inputs;
- ``kwargs``: builder keyword arguments for that input size (small class counts, vocabularies and widths).

:func:`example_inputs` draws such an input. Call a twin with ``twin(*map(torch.from_numpy, xs))`` and the sparkdl
model with ``model(xs[0] if len(xs) == 1 else xs)``.
"""
from __future__ import annotations

import numpy as np

from tests import zoo_classic, zoo_text
from tests.zoo_cnn import MobileNetV2, MobileNetV3Small, randomize_bn

__all__ = ["TORCH_ZOO", "SHAPES", "example_inputs", "model_inputs", "randomize_bn"]


def mobilenet_v2(num_classes=1000, width_mult=1.0, dropout=0.2, in_channels=3, setting=None):
    return MobileNetV2(num_classes, width_mult, dropout, setting, in_channels)


def mobilenet_v3_small(num_classes=1000, dropout=0.2, in_channels=3, setting=None):
    return MobileNetV3Small(num_classes, dropout, setting, in_channels)


#: PyTorch builder by sparkdl.models name.
TORCH_ZOO = {
    "resnet18": zoo_classic.resnet18, "resnet34": zoo_classic.resnet34, "resnet50": zoo_classic.resnet50,
    "resnet20": zoo_classic.resnet20, "mobilenet_v2": mobilenet_v2, "mobilenet_v3_small": mobilenet_v3_small,
    "vgg11_bn": zoo_classic.vgg11_bn, "squeezenet1_1": zoo_classic.squeezenet1_1, "bert_mini": zoo_text.bert_mini,
    "rnn_classifier": zoo_text.rnn_classifier, "ncf": zoo_text.ncf,
}

_IMAGE = dict(input=(2, 3, 32, 32), dtype="float32")
#: A small test input per model, with the builder arguments that go with it (see the module docstring).
SHAPES = {
    "resnet18": dict(_IMAGE, kwargs=dict(num_classes=10)),
    "resnet34": dict(_IMAGE, kwargs=dict(num_classes=10)),
    "resnet50": dict(_IMAGE, kwargs=dict(num_classes=10)),
    "resnet20": dict(_IMAGE, kwargs=dict(num_classes=10)),
    "mobilenet_v2": dict(_IMAGE, kwargs=dict(num_classes=10)),
    "mobilenet_v3_small": dict(_IMAGE, kwargs=dict(num_classes=10)),
    "vgg11_bn": dict(_IMAGE, kwargs=dict(num_classes=10, hidden=128, pool_size=1)),
    "squeezenet1_1": dict(_IMAGE, kwargs=dict(num_classes=10)),
    "bert_mini": dict(input=((2, 16), (2, 16)), dtype=("int64", "int64"), high=(1000, 2),
                      kwargs=dict(vocab_size=1000, num_classes=2, max_length=16)),
    "rnn_classifier": dict(input=(2, 12), dtype="int64", high=500,
                           kwargs=dict(vocab=500, embed=32, hidden=32, num_classes=2, cell="gru")),
    "ncf": dict(input=((2,), (2,)), dtype=("int64", "int64"), high=(1000, 2000),
                kwargs=dict(num_users=1000, num_items=2000, factors=8, mlp_layers=(64, 32, 16))),
}


def example_inputs(name: str, batch: int | None = None, seed: int = 0) -> tuple:
    """A random input of ``SHAPES[name]`` (batch size ``batch`` if given) as a tuple of numpy arrays, one per
    model input. Images are standard normal float32; ids uniform in [0, high); a BERT attention mask keeps the
    first row whole and pads the others after a random length (at least 1 token)."""
    spec = SHAPES[name]
    multi = isinstance(spec["input"][0], tuple)
    shapes = spec["input"] if multi else (spec["input"],)
    dtypes = spec["dtype"] if multi else (spec["dtype"],)
    highs = spec.get("high") if multi else (spec.get("high"),)
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype, high in zip(shapes, dtypes, highs or (None,) * len(shapes)):
        shape = ((batch,) if batch else shape[:1]) + tuple(shape[1:])
        if dtype == "float32":
            out.append(rng.standard_normal(shape).astype(np.float32))
        else:
            out.append(rng.integers(0, high, shape).astype(np.int64))
    if name == "bert_mini":
        ids, _ = out
        lengths = rng.integers(1, ids.shape[1] + 1, ids.shape[0])
        lengths[0] = ids.shape[1]
        out[1] = (np.arange(ids.shape[1]) < lengths[:, None]).astype(np.int64)
        out[0] = np.where(out[1] == 1, np.maximum(ids, 1), 0)  # padding id 0 at padded positions
    return tuple(out)


def model_inputs(xs: tuple):
    """What a sparkdl model takes for :func:`example_inputs` ``xs``: the array, or the tuple for several inputs."""
    return xs[0] if len(xs) == 1 else tuple(xs)
