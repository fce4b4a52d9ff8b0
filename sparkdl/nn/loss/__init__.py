"""Loss functions with PyTorch semantics and an explicit cache: ``value, cache = loss.forward(input, target)``,
``grad_input = loss.backward(cache, grad=1.0)``.

Reductions: ``'mean'`` divides the summed loss by :meth:`Loss.normalizer` (N for unweighted
cross-entropy, the summed target-class weights with ``weight``, the element count for element-wise losses),
``'sum'`` returns the sum, ``'none'`` the per-sample (per-element) losses. ``mean == sum / normalizer`` holds
exactly, which is what the distributed engine relies on: every partition computes the ``'sum'`` loss and its
normalizer, the driver divides the global sums. Values are Python floats (``'none'``: arrays of the input's
dtype); sums accumulate in float64.
"""
from sparkdl.nn.loss.base import LOSS_REGISTRY, Loss
from sparkdl.nn.loss.classification import CrossEntropyLoss, NLLLoss
from sparkdl.nn.loss.elementwise import BCELoss, BCEWithLogitsLoss, L1Loss, MSELoss, SmoothL1Loss
from sparkdl.nn.loss.weighted import SampleWeightedLoss

__all__ = ["Loss", "LOSS_REGISTRY", "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss",
           "BCEWithLogitsLoss", "BCELoss", "SampleWeightedLoss"]
