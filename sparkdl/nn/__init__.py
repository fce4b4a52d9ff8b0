"""Layers, containers, losses and initializers over one flat parameter vector (see :mod:`sparkdl.nn.module`)."""
from sparkdl.nn import init
from sparkdl.nn.activation import ReLU
from sparkdl.nn.containers import Concat, Residual, Sequential
from sparkdl.nn.layout import Layout
from sparkdl.nn.linear import Linear
from sparkdl.nn.module import Module

__all__ = ["init", "Module", "Layout", "Linear", "ReLU", "Sequential", "Residual", "Concat"]
