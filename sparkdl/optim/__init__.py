"""Optimizers, gradient clipping and learning-rate schedules over shards of the flat parameter vector.

Every optimizer updates a shard ``params = flat[lo:hi]`` in place from the averaged gradient shard, with
per-shard state that is plain numpy data (see :mod:`sparkdl.optim.base`)::

    opt = Adam(lr=1e-3).configure(model.parameter_layout, no_weight_decay_on_bias_and_norm(model.parameter_layout))
    state = opt.init_state(lo, hi)
    opt.update(flat[lo:hi], grad[lo:hi], state, lo=lo, lr=opt.lr_at(iteration=i, epoch=e))
"""
from sparkdl.optim import clip, schedules
from sparkdl.optim.adadelta import Adadelta
from sparkdl.optim.adagrad import Adagrad
from sparkdl.optim.adam import Adam, AdamW
from sparkdl.optim.adamax import Adamax
from sparkdl.optim.base import OPTIMIZER_REGISTRY, Optimizer, optimizer_config, optimizer_from_config
from sparkdl.optim.clip import clip_coef, clip_grad_norm, clip_grad_value, partial_sq_norm
from sparkdl.optim.groups import no_weight_decay_on_bias_and_norm
from sparkdl.optim.lamb import LAMB
from sparkdl.optim.lars import LARS
from sparkdl.optim.rmsprop import RMSprop
from sparkdl.optim.schedules import (CosineAnnealingLR, ExponentialLR, LinearWarmup, MultiStepLR, PolynomialLR,
                                     ReduceLROnPlateau, Schedule, SequentialLR, StepLR, schedule_config,
                                     schedule_from_config)
from sparkdl.optim.sgd import SGD
from sparkdl.optim.trust import TrustRatioOptimizer, combine_tensor_norms

__all__ = [
    "Optimizer", "SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Adadelta", "Adamax", "LARS", "LAMB",
    "TrustRatioOptimizer", "combine_tensor_norms",
    "OPTIMIZER_REGISTRY", "optimizer_config", "optimizer_from_config", "no_weight_decay_on_bias_and_norm",
    "clip", "partial_sq_norm", "clip_coef", "clip_grad_norm", "clip_grad_value",
    "schedules", "Schedule", "StepLR", "MultiStepLR", "ExponentialLR", "PolynomialLR", "CosineAnnealingLR",
    "LinearWarmup", "SequentialLR", "ReduceLROnPlateau", "schedule_config", "schedule_from_config",
]
