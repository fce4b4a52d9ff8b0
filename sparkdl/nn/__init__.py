"""Layers, containers, losses and initializers over one flat parameter vector (see :mod:`sparkdl.nn.module`)."""
from sparkdl.nn import init
from sparkdl.nn.activation import ELU, GELU, LeakyReLU, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh
from sparkdl.nn.conv import Conv2d
from sparkdl.nn.containers import Concat, Residual, Sequential
from sparkdl.nn.dropout import Dropout
from sparkdl.nn.layout import Layout
from sparkdl.nn.linear import Linear
from sparkdl.nn.loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, Loss, MSELoss, NLLLoss,
                             SmoothL1Loss)
from sparkdl.nn.module import Module
from sparkdl.nn.normalization import BatchNorm1d, BatchNorm2d
from sparkdl.nn.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from sparkdl.nn.shape import Flatten, Identity, Reshape

__all__ = ["init", "Module", "Layout", "Linear", "ReLU", "Sequential", "Residual", "Concat", "Conv2d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
           "LeakyReLU", "ELU", "GELU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "BatchNorm1d", "BatchNorm2d",
           "Dropout", "Flatten", "Reshape", "Identity",
           "Loss", "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "BCEWithLogitsLoss",
           "BCELoss"]
