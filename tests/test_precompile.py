"""``python -m sparkdl.precompile`` fills numba's on-disk cache with the kernels a workload needs: a later process
that trains and evaluates the same kind of model with the library's own trainer compiles nothing new."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkdl import precompile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: A different use of an MLP than the workload's own step: sparkdl.trainer.fit with validation, then predict.
FIT = """
import numpy as np
from sparkdl import models, nn, trainer
from sparkdl.optim import Adam
x = np.random.default_rng(1).standard_normal((96, 784)).astype(np.float32)
y = (x[:, 0] > 0).astype(np.int64)
model = models.mlp(hidden=(32,), num_classes=2).initialize(1)
trainer.fit(model, nn.CrossEntropyLoss(), Adam(lr=1e-2), x, y, batch_size=32, epochs=2, seed=0,
            validation_data=(x[:32], y[:32]))
print(float(model(x[:4]).sum()))
"""


def _entries(cache: Path) -> set:
    return {p.relative_to(cache) for p in cache.rglob("*") if p.suffix in (".nbi", ".nbc")}


def _python(cache, *args):
    out = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "NUMBA_CACHE_DIR": str(cache)})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.mark.slow
def test_a_precompiled_cache_serves_a_later_process_without_compiling(tmp_path):
    cache = tmp_path / "numba"
    printed = _python(cache, "-m", "sparkdl.precompile", "--models", "mlp")
    assert printed.split()[0] == "mlp" and printed.split()[-1] == "s"
    compiled = _entries(cache)
    kernels = {p.name.split("-")[0] for p in compiled if p.suffix == ".nbc"}  # module.function
    assert {"activation.relu_forward", "activation.relu_backward", "loss.cross_entropy_forward",
            "loss.cross_entropy_backward", "sgd._sgd_kernel", "adam._adam_kernel"} <= kernels
    _python(cache, "-c", FIT)
    assert _entries(cache) == compiled  # nothing compiled (an added signature adds a .nbc file)


def test_unknown_workloads_are_named_before_anything_runs():
    with pytest.raises(ValueError, match=r"unknown workload\(s\) \['resnet9'\]; expected names from"):
        precompile.precompile(["mlp", "resnet9"])


def test_list_names_every_workload():
    out = subprocess.run([sys.executable, "-m", "sparkdl.precompile", "--list"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out.split() == list(precompile.WORKLOADS)
