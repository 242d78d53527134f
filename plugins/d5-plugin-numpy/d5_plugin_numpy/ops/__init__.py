"""The reference operators, one module per kind, and :data:`OPERATORS` by ONNX name."""

from __future__ import annotations

from d5_plugin_numpy.ops.activation import (
    LeakyRelu,
    LogSoftmax,
    Relu,
    Sigmoid,
    Softmax,
    Tanh,
)
from d5_plugin_numpy.ops.base import ReferenceOperator
from d5_plugin_numpy.ops.conv import Conv, ConvTranspose
from d5_plugin_numpy.ops.dropout import Dropout
from d5_plugin_numpy.ops.elementwise import Add, Div, Mul, Sub, Sum
from d5_plugin_numpy.ops.indexing import (
    Cast,
    ConstantOfShape,
    Equal,
    Expand,
    Gather,
    GatherElements,
    Greater,
    Less,
    Shape,
    Slice,
    Where,
)
from d5_plugin_numpy.ops.linear import Gemm, MatMul
from d5_plugin_numpy.ops.loss import MeanSquaredError, SoftmaxCrossEntropyLoss
from d5_plugin_numpy.ops.math_ops import (
    Erf,
    Exp,
    Gelu,
    Log,
    Pow,
    ReduceMax,
    ReduceMean,
    ReduceSum,
    Sqrt,
)
from d5_plugin_numpy.ops.normalization import BatchNormalization, LayerNormalization
from d5_plugin_numpy.ops.partition import Split, Trilu
from d5_plugin_numpy.ops.pool import AveragePool, GlobalAveragePool, MaxPool
from d5_plugin_numpy.ops.recurrent import GRU, LSTM
from d5_plugin_numpy.ops.shape import (
    Concat,
    Flatten,
    Identity,
    Reshape,
    Squeeze,
    Transpose,
    Unsqueeze,
)

__all__ = ["OPERATORS", "ReferenceOperator"]

#: Every reference operator class, by operator type.
OPERATORS: dict[str, type[ReferenceOperator]] = {
    cls.op_type: cls
    for cls in (
        Gemm, MatMul,
        Conv, ConvTranspose,
        Relu, LeakyRelu, Sigmoid, Tanh, Softmax, LogSoftmax,
        MaxPool, AveragePool, GlobalAveragePool,
        BatchNormalization, Dropout,
        Add, Sub, Mul, Div, Sum,
        Reshape, Flatten, Transpose, Concat, Squeeze, Unsqueeze, Identity,
        SoftmaxCrossEntropyLoss, MeanSquaredError,
        LayerNormalization,
        Gather, GatherElements, Slice, Shape, ConstantOfShape, Expand,
        Where, Equal, Less, Greater, Cast,
        Pow, Sqrt, Erf, Exp, Log, Gelu,
        ReduceMean, ReduceSum, ReduceMax,
        LSTM, GRU,
        Split, Trilu,
    )
}  # fmt: skip
