"""The TensorFlow operators, one module per family; :mod:`d5_plugin_tensorflow.operators`
collects them into the two backends."""

from d5_plugin_tensorflow.ops._base import Layout, Plan, Slot, TFOperator
from d5_plugin_tensorflow.ops.activation import (
    LeakyRelu,
    LogSoftmax,
    Relu,
    Sigmoid,
    Softmax,
    Tanh,
)
from d5_plugin_tensorflow.ops.conv import Conv, ConvTranspose
from d5_plugin_tensorflow.ops.elementwise import Add, Div, Identity, Mul, Sub, Sum
from d5_plugin_tensorflow.ops.linalg import Gemm, MatMul
from d5_plugin_tensorflow.ops.loss import MeanSquaredError, SoftmaxCrossEntropyLoss
from d5_plugin_tensorflow.ops.normalization import BatchNormalization, Dropout
from d5_plugin_tensorflow.ops.pool import AveragePool, GlobalAveragePool, MaxPool
from d5_plugin_tensorflow.ops.shape import (
    Concat,
    Flatten,
    Reshape,
    Squeeze,
    Transpose,
    Unsqueeze,
)
from d5_plugin_tensorflow.ops.transformer import TRANSFORMER_OPERATORS, TranslatedOperator

#: Every operator class, in the order the torch plugin lists them.
OPERATOR_CLASSES: tuple[type[TFOperator], ...] = (
    Gemm,
    MatMul,
    Conv,
    ConvTranspose,
    Relu,
    LeakyRelu,
    Sigmoid,
    Tanh,
    Softmax,
    LogSoftmax,
    MaxPool,
    AveragePool,
    GlobalAveragePool,
    BatchNormalization,
    Dropout,
    Add,
    Sub,
    Mul,
    Div,
    Sum,
    Reshape,
    Flatten,
    Transpose,
    Concat,
    Squeeze,
    Unsqueeze,
    Identity,
    SoftmaxCrossEntropyLoss,
    MeanSquaredError,
    *TRANSFORMER_OPERATORS,
)

__all__ = [
    "OPERATOR_CLASSES",
    "Add",
    "AveragePool",
    "BatchNormalization",
    "Concat",
    "Conv",
    "ConvTranspose",
    "Div",
    "Dropout",
    "Flatten",
    "Gemm",
    "GlobalAveragePool",
    "Identity",
    "Layout",
    "LeakyRelu",
    "LogSoftmax",
    "MatMul",
    "MaxPool",
    "MeanSquaredError",
    "Mul",
    "Plan",
    "Relu",
    "Reshape",
    "Sigmoid",
    "Slot",
    "Softmax",
    "SoftmaxCrossEntropyLoss",
    "Squeeze",
    "Sub",
    "Sum",
    "TFOperator",
    "Tanh",
    "TranslatedOperator",
    "Transpose",
    "Unsqueeze",
]
