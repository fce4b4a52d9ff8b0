"""Layers, containers, losses and initializers over one flat parameter vector (see :mod:`sparkdl.nn.module`)."""
from sparkdl.nn import init
from sparkdl.nn.activation import (ELU, GELU, LeakyReLU, LogSoftmax, PReLU, ReLU, Sigmoid, SiLU, Softmax, Softplus,
                                   Tanh)
from sparkdl.nn.activation_hard import Hardsigmoid, Hardswish, Hardtanh, ReLU6
from sparkdl.nn.attention import MultiheadAttention
from sparkdl.nn.conv import Conv2d
from sparkdl.nn.conv1d import Conv1d
from sparkdl.nn.conv_transpose import ConvTranspose2d
from sparkdl.nn.containers import Concat, Residual, Sequential
from sparkdl.nn.dropout import Dropout
from sparkdl.nn.graph import Graph
from sparkdl.nn.layer_norm import GroupNorm, LayerNorm
from sparkdl.nn.embedding import Embedding, EmbeddingBag
from sparkdl.nn.layout import Layout
from sparkdl.nn.linear import Linear
from sparkdl.nn.loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, Loss, MSELoss, NLLLoss,
                             SmoothL1Loss)
from sparkdl.nn.merge import Add, Concatenate
from sparkdl.nn.module import Module
from sparkdl.nn.normalization import BatchNorm1d, BatchNorm2d
from sparkdl.nn.onnx_op import OnnxOp
from sparkdl.nn.pooling import AdaptiveAvgPool2d, AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d
from sparkdl.nn.recurrent import GRU, LSTM, RNN, RecurrentPart
from sparkdl.nn.sequence import PaddedSequence, RNNOutput, SequenceLengths
from sparkdl.nn.shape import Flatten, Identity, Reshape
from sparkdl.nn.transformer import TransformerEncoder, TransformerEncoderLayer
from sparkdl.nn.transformer_classifier import TransformerClassifier
from sparkdl.nn.upsample import Upsample

__all__ = ["init", "Module", "Layout", "Linear", "ReLU", "Sequential", "Residual", "Concat", "Graph", "Add",
           "Concatenate", "Conv2d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "LeakyReLU", "ELU", "GELU", "Tanh",
           "Sigmoid", "Softmax", "LogSoftmax", "BatchNorm1d", "BatchNorm2d", "Dropout", "Flatten", "Reshape", "Identity",
           "SiLU", "Softplus", "PReLU", "Hardtanh", "ReLU6", "Hardsigmoid", "Hardswish", "LayerNorm", "GroupNorm",
           "Conv1d", "MaxPool1d", "AvgPool1d",
           "ConvTranspose2d", "Upsample", "MultiheadAttention", "TransformerEncoderLayer",
           "TransformerEncoder", "TransformerClassifier",
           "Embedding", "EmbeddingBag", "RNN", "LSTM", "GRU", "PaddedSequence", "SequenceLengths", "RNNOutput",
           "OnnxOp", "RecurrentPart",
           "Loss", "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "BCEWithLogitsLoss",
           "BCELoss"]
