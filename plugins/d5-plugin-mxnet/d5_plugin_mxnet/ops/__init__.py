"""The MXNet operators, one module per family; :mod:`d5_plugin_mxnet.operators` collects
them into the backend."""

from d5_plugin_mxnet.ops._base import MXNetOperator, Plan, Slot
from d5_plugin_mxnet.ops.activation import LeakyRelu, LogSoftmax, Relu, Sigmoid, Softmax, Tanh
from d5_plugin_mxnet.ops.conv import Conv, ConvTranspose
from d5_plugin_mxnet.ops.elementwise import Add, Div, Identity, Mul, Sub, Sum
from d5_plugin_mxnet.ops.linalg import Gemm, MatMul
from d5_plugin_mxnet.ops.loss import MeanSquaredError, SoftmaxCrossEntropyLoss
from d5_plugin_mxnet.ops.normalization import BatchNormalization, Dropout
from d5_plugin_mxnet.ops.pool import AveragePool, GlobalAveragePool, MaxPool
from d5_plugin_mxnet.ops.shape import Concat, Flatten, Reshape, Squeeze, Transpose, Unsqueeze
from d5_plugin_mxnet.ops.transformer import TRANSFORMER_OPERATORS, TranslatedOperator

#: Every operator class, in the order the README lists them.
OPERATOR_CLASSES: tuple[type[MXNetOperator], ...] = (
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
    "LeakyRelu",
    "LogSoftmax",
    "MXNetOperator",
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
    "Tanh",
    "TranslatedOperator",
    "Transpose",
    "Unsqueeze",
]
