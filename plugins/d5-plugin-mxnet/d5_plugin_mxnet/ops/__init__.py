"""The MXNet operators, one module per family; :mod:`d5_plugin_mxnet.operators` collects
them into the backend."""

from d5_plugin_mxnet.ops._base import MXNetOperator, Plan, Slot
from d5_plugin_mxnet.ops.transformer import TRANSFORMER_OPERATORS, TranslatedOperator
from d5core.onnx import ordered_operator_classes

#: The modules that hold the operators, one per family.
_FAMILIES = (
    "activation", "conv", "elementwise", "linalg", "loss", "normalization", "pool",
    "shape",
)  # fmt: skip

#: Every operator class, in the order the README lists them.
OPERATOR_CLASSES: tuple[type[MXNetOperator], ...] = (
    *ordered_operator_classes(__name__, _FAMILIES),
    *TRANSFORMER_OPERATORS,
)

__all__ = ["OPERATOR_CLASSES", "MXNetOperator", "Plan", "Slot", "TranslatedOperator"]
