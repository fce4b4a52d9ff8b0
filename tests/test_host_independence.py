"""The bits of a result do not depend on the host: not on whether TBB loads (numba's threading layer), and a
convolution's not on the thread count."""
import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

from sparkdl import nn
from sparkdl.config import kernel_threads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
two_threads = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs a numba pool of 2 threads")

GRADIENT = textwrap.dedent("""
    import hashlib
    import numpy as np
    from sparkdl import nn
    from sparkdl.config import kernel_threads, threading_layer
    from sparkdl.engine.worker import local_gradient
    from sparkdl.models import lenet5
    from sparkdl.step import sum_reduction
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((96, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, 96)
    model = lenet5().initialize(0)
    with kernel_threads(2):  # a task with spark.task.cpus = 2
        grad, loss, norm = local_gradient(model, sum_reduction(nn.CrossEntropyLoss()), x, y,
                                          np.random.default_rng(5))
    print(threading_layer(), hashlib.sha256(grad.tobytes()).hexdigest(), repr(loss))
""")


@two_threads
def test_task_gradient_bits_do_not_depend_on_the_threading_layer():
    results = {}
    for layer in ("tbb", "workqueue"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
        env.update(PYTHONPATH=ROOT, NUMBA_THREADING_LAYER=layer)
        out = subprocess.run([sys.executable, "-c", GRADIENT], env=env, capture_output=True, text=True, timeout=600,
                             cwd=ROOT)
        assert out.returncode == 0, out.stderr[-3000:]
        used, digest, loss = out.stdout.split()
        results[used] = (digest, loss)
    assert set(results) == {"tbb", "workqueue"}  # both layers really ran (TBB is a dependency)
    assert results["tbb"] == results["workqueue"]


def _conv_step(m, x, threads):
    """Output, input gradient and parameter gradients of one forward + backward with ``threads`` threads."""
    with kernel_threads(threads):
        y, cache = m.forward(x, training=True)
        grads = m.zeros_like_parameters()
        gx = m.backward(cache, np.cos(y).astype(np.float32), grads)
    return y, gx, grads


@two_threads
@pytest.mark.parametrize("args", [dict(in_channels=3, out_channels=16, kernel_size=5),  # im2col
                                  dict(in_channels=16, out_channels=32, kernel_size=3, padding=1)])  # Winograd
def test_conv2d_bits_do_not_depend_on_the_thread_count(args):
    m = nn.Conv2d(**args).initialize(0)
    x = np.random.default_rng(1).standard_normal((48, args["in_channels"], 20, 20)).astype(np.float32)
    ho, wo = m.output_size(20, 20)
    assert m._plan(x.shape, ho, wo)[-1] < len(x) // 2  # several chunks, so their order is exercised
    for a, b in zip(_conv_step(m, x, 1), _conv_step(m, x, 2)):
        np.testing.assert_array_equal(a, b)
