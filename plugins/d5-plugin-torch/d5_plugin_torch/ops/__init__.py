"""The torch operators, one module per family; :mod:`d5_plugin_torch.operators` collects
them into the backend."""

from d5_plugin_torch.ops._base import Slot, TorchOperator
from d5core.onnx import ordered_operator_classes

#: The modules that hold the operators, one per family.
_FAMILIES = (
    "activation", "conv", "elementwise", "indexing", "linalg", "loss", "math_ops",
    "normalization", "partition", "pool", "recurrent", "shape",
)  # fmt: skip

#: Every operator class, in the order the README lists them.
OPERATOR_CLASSES: tuple[type[TorchOperator], ...] = ordered_operator_classes(__name__, _FAMILIES)

__all__ = ["OPERATOR_CLASSES", "Slot", "TorchOperator"]
