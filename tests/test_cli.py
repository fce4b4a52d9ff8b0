"""The README's main job, short version: train LeNet-5 on 20,000 MNIST images for one epoch on Spark,
then reload the saved model with `sparkdl evaluate` and get the same accuracy."""
import json
import subprocess
import sys

import pytest


def _run(args, cwd):
    out = subprocess.run([sys.executable, "-m", "sparkdl.cli", *args, "--json"], cwd=cwd, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("cli")
    result = _run(["train", "--model", "lenet5", "--dataset", "mnist", "--limit", "20000", "--epochs", "1",
                   "--batch-size", "128", "--lr", "0.003", "--warmup-epochs", "0", "--master", "local[2]",
                   "--output", str(cwd / "run"), "--no-progress"], cwd)
    return cwd, result


def test_train_short_mnist_reaches_95_percent(trained):
    cwd, result = trained
    assert result["test_accuracy"] >= 0.95
    assert result["epochs"] == 1
    assert result["samples_per_s"] > 0
    assert (cwd / "run" / "model" / "metadata.json").exists()
    assert (cwd / "run" / "checkpoints" / "latest").exists()
    assert any((cwd / "run" / "tensorboard").iterdir())


def test_evaluate_reloaded_model_gives_same_accuracy(trained):
    cwd, result = trained
    again = _run(["evaluate", "--model", result["model_path"], "--dataset", "mnist", "--master", "local[2]"], cwd)
    assert again["test_accuracy"] == pytest.approx(result["test_accuracy"], abs=1e-12)
    assert again["test_loss"] == pytest.approx(result["test_loss"], rel=1e-5)
