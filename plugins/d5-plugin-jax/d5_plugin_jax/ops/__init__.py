"""The JAX operators, one module per family; :mod:`d5_plugin_jax.operators` collects
them into the backend."""

from d5_plugin_jax.ops._base import JaxOperator, Slot
from d5core.onnx import ordered_operator_classes

#: The modules that hold the operators, one per family.
_FAMILIES = (
    "activation", "conv", "elementwise", "indexing", "linalg", "loss", "math_ops",
    "normalization", "partition", "pool", "recurrent", "shape",
)  # fmt: skip

#: Every operator class, in the order every d5 backend lists them.
OPERATOR_CLASSES: tuple[type[JaxOperator], ...] = ordered_operator_classes(__name__, _FAMILIES)

__all__ = ["OPERATOR_CLASSES", "JaxOperator", "Slot"]
