"""The TensorFlow operators, one module per family; :mod:`d5_plugin_tensorflow.operators`
collects them into the two backends."""

from d5_plugin_tensorflow.ops._base import Layout, Plan, Slot, TFOperator
from d5_plugin_tensorflow.ops.transformer import TRANSFORMER_OPERATORS, TranslatedOperator
from d5core.onnx import ordered_operator_classes

#: The modules that hold the operators, one per family.
_FAMILIES = (
    "activation", "conv", "elementwise", "linalg", "loss", "normalization", "pool",
    "shape",
)  # fmt: skip

#: Every operator class, in the order the torch plugin lists them.
OPERATOR_CLASSES: tuple[type[TFOperator], ...] = (
    *ordered_operator_classes(__name__, _FAMILIES),
    *TRANSFORMER_OPERATORS,
)

__all__ = ["OPERATOR_CLASSES", "Layout", "Plan", "Slot", "TFOperator", "TranslatedOperator"]
