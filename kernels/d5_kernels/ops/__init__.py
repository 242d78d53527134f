"""The native operators, one module per family; :mod:`d5_kernels.operators` collects
them into the ``native`` backend."""

from d5_kernels.ops._base import FLOAT_DTYPES, NativeOperator, Signature
from d5_kernels.ops.activation import Relu, Softmax
from d5_kernels.ops.conv import Conv
from d5_kernels.ops.linalg import Gemm, MatMul
from d5_kernels.ops.normalization import BatchNormalization
from d5_kernels.ops.pool import AveragePool, MaxPool
from d5_kernels.ops.transformer import Erf, Gather, Gelu, LayerNormalization

#: Every operator class, in the order the other backends list them.
OPERATOR_CLASSES: tuple[type[NativeOperator], ...] = (  # type: ignore[type-arg]
    Gemm,
    MatMul,
    Conv,
    Relu,
    Softmax,
    MaxPool,
    AveragePool,
    BatchNormalization,
    Gather,
    Erf,
    Gelu,
    LayerNormalization,
)

__all__ = [
    "FLOAT_DTYPES",
    "OPERATOR_CLASSES",
    "AveragePool",
    "BatchNormalization",
    "Conv",
    "Erf",
    "Gather",
    "Gelu",
    "Gemm",
    "LayerNormalization",
    "MatMul",
    "MaxPool",
    "NativeOperator",
    "Relu",
    "Signature",
    "Softmax",
]
