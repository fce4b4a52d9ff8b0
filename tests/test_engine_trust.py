"""LARS and LAMB on Spark (local[2,3]): AllReduce blocks cut parameter tensors, the per-tensor norms are
combined on the driver, and training equals the single-process reference."""
import numpy as np
import pytest

from sparkdl import nn
from sparkdl.optim import LAMB, LARS
from tests.test_engine import _data, _fit, _model, _reference


@pytest.mark.parametrize("make", [lambda: LARS(lr=2.0, momentum=0.9, weight_decay=1e-3, clip_norm=0.5),
                                  lambda: LAMB(lr=0.02, weight_decay=0.01)], ids=["lars-clip-norm", "lamb"])
def test_trust_ratio_optimizers_match_single_process(spark, make):
    x, y = _data()
    ref = _model()
    ref_losses = _reference(ref, nn.CrossEntropyLoss(), make(), x, y, 20, 1, seed=5)
    dist = _model()
    # 163 parameters in 4 blocks: every block boundary falls inside a weight matrix or a bias
    summary, _ = _fit(spark, x, y, 2, dist, make(), epochs=1, num_blocks=4)
    np.testing.assert_allclose(summary.loss, ref_losses, rtol=1e-5)
    np.testing.assert_allclose(dist.flat_parameters, ref.flat_parameters, rtol=1e-5, atol=1e-6)
