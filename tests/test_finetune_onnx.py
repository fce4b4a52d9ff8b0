"""Fine-tuning an imported ONNX network on Spark: the example on a subset (PyTorch -> ONNX -> sparkdl ->
DLClassifier -> ONNX -> onnxruntime), and DistributedTrainer fine-tuning (frozen or not) equal to the
same steps in-process. On Fashion-MNIST, fetched into the dataset cache once per machine (tests/conftest.py)."""

import numpy as np
import pytest

from tests.examples import load_example

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
sonnx = pytest.importorskip("sparkdl.onnx")

from sparkdl import nn  # noqa: E402
from sparkdl.engine import DistributedTrainer, MaxEpoch  # noqa: E402
from sparkdl.engine.plan import global_batch  # noqa: E402
from sparkdl.trainer import train_step  # noqa: E402


def _example():
    return load_example("finetune_onnx")


@pytest.fixture(scope="module")
def example(fashion_mnist_cached):
    return _example()


@pytest.mark.slow
def test_example_on_a_subset(spark, example, tmp_path):
    res = example.run(spark, pretrain_rows=1000, finetune_rows=1000, test_rows=500, epochs=1, batch_size=100,
                      workdir=str(tmp_path))
    assert res["import_max_abs_error"] < 1e-5
    # measured 0.658 -> 0.73; a constant predictor scores 0.13 on these 500 test images
    assert res["imported_accuracy"] == res["torch_accuracy"] > 0.5
    assert res["frozen_layers_unchanged"] is True
    assert res["finetuned_accuracy"] > res["imported_accuracy"]
    assert res["onnxruntime_max_abs_error"] < 1e-5 and res["onnxruntime_accuracy"] == res["finetuned_accuracy"]
    assert res["parameters"] == ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight",
                                 "fc1.bias", "fc2.weight", "fc2.bias"]


def _reference(model, opt, x, y, batch_size, epochs, seed):
    """In-process steps (sparkdl.trainer.train_step) on exactly the engine's global batches."""
    loss = nn.CrossEntropyLoss()
    state = opt.init_state(0, model.num_parameters())
    for epoch in range(epochs):
        for i in range(-(-len(x) // batch_size)):
            ids = np.sort(global_batch(seed, epoch, len(x), batch_size, i))
            train_step(model, loss, opt, state, x[ids], y[ids], None, None)


@pytest.mark.parametrize("freeze", [True, False], ids=["frozen-convs", "all-layers"])
def test_spark_finetuning_equals_in_process(spark, example, tmp_path, freeze):
    (x, y), (xt, yt) = example.load_fashion_mnist()
    net = example.train_torch(x[:500], y[:500], seed=1)
    data = open(example.to_onnx(net, str(tmp_path / "cnn.onnx")), "rb").read()
    x, y, xt, yt = x[500:850], y[500:850], xt[:300], yt[:300]
    ref, dist = sonnx.load(data), sonnx.load(data)
    start = ref.state_dict()
    _reference(ref, example.frozen_adam(ref, 2e-3, freeze), x, y, batch_size=50, epochs=2, seed=3)
    rdd = spark.sparkContext.parallelize(list(zip(x, y)), 2)
    DistributedTrainer(dist, nn.CrossEntropyLoss(), example.frozen_adam(dist, 2e-3, freeze), batch_size=50,
                       end_trigger=MaxEpoch(2), seed=3, progress=False).fit(rdd)
    np.testing.assert_allclose(dist.flat_parameters, ref.flat_parameters, rtol=1e-4, atol=1e-6)
    acc = [float(np.mean(m(xt).argmax(axis=1) == yt)) for m in (ref, dist)]
    assert acc[0] == acc[1]
    for name, value in dist.state_dict().items():
        unchanged = np.array_equal(value, start[name])
        assert unchanged == (freeze and name.startswith("conv")), name
