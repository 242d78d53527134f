"""A ``d5.operators`` backend made of slotted operator classes, the base of those
classes, and the order backends list their operators in.

A framework plugin gives :class:`SlottedBackend` its operator classes by ONNX type and,
when its operators take more than their attributes, overrides :meth:`instantiate`.
:func:`ordered_operator_classes` collects the classes of a plugin's operator modules in
the one order every backend uses.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from d5core.api import Operator, OperatorBackend, TensorDescriptor, UsageError
from d5core.onnx.checks import DescribedInput, check_attribute_names
from d5core.onnx.slotted_operator import SlottedOperator

__all__ = ["OPERATOR_ORDER", "BackendOperator", "SlottedBackend", "ordered_operator_classes"]

#: The operator types backends implement, in the order they list them.
OPERATOR_ORDER: tuple[str, ...] = (
    *("Gemm", "MatMul", "Conv", "ConvTranspose"),
    *("Relu", "LeakyRelu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax"),
    *("MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization", "Dropout"),
    *("Add", "Sub", "Mul", "Div", "Sum"),
    *("Reshape", "Flatten", "Transpose", "Concat", "Squeeze", "Unsqueeze", "Identity"),
    *("SoftmaxCrossEntropyLoss", "MeanSquaredError", "LSTM", "GRU"),
    *("Gather", "GatherElements", "Slice", "Shape", "ConstantOfShape", "Expand", "Where"),
    *("Equal", "Less", "Greater", "Cast", "Pow", "Sqrt", "Erf", "Exp", "Log", "Gelu"),
    *("ReduceMean", "ReduceSum", "ReduceMax", "LayerNormalization", "Split", "Trilu"),
)

OpT = TypeVar("OpT", bound=Operator)


def ordered_operator_classes(package: str, families: Iterable[str]) -> tuple[type[Any], ...]:
    """The operator classes that the modules ``families`` of ``package`` export (their
    ``__all__``), in :data:`OPERATOR_ORDER`; a type missing from that order comes last."""
    found: dict[str, type[Any]] = {}
    for family in families:
        module = importlib.import_module(f"{package}.{family}")
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            op_type = getattr(value, "op_type", None)
            if isinstance(value, type) and isinstance(op_type, str):
                found.setdefault(op_type, value)
    rank = {op_type: i for i, op_type in enumerate(OPERATOR_ORDER)}
    ordered = sorted(found, key=lambda op_type: rank.get(op_type, len(rank)))
    return tuple(found[op_type] for op_type in ordered)


class SlottedBackend(OperatorBackend, Generic[OpT]):
    """A backend that looks its operator classes up by ONNX type and checks the
    descriptors of a new operator's inputs at once."""

    #: The operator classes, by ONNX operator type.
    operator_classes: ClassVar[Mapping[str, type[Any]]] = {}

    def __init__(self) -> None:
        #: The device operators run on, as passed to the ``d5_synchronize`` hook.
        self.device = "cpu"

    def supported(self) -> Collection[str]:
        """The ONNX operator types this backend implements."""
        return tuple(self.operator_classes)

    def instantiate(self, cls: type[Any], attributes: Mapping[str, Any]) -> OpT:
        """A new operator of ``cls`` with ``attributes``."""
        op: OpT = cls(attributes)
        return op

    def create(
        self,
        op_type: str,
        attributes: Mapping[str, Any],
        inputs: Sequence[TensorDescriptor],
    ) -> OpT:
        """Build ``op_type`` with ``attributes`` for ``inputs``, checking their count,
        dtypes and shapes (and the values of shape and axes inputs when given), and
        refusing attributes the backend cannot run."""
        cls = self.operator_classes.get(op_type)
        if cls is None:
            raise UsageError(
                f"the {self.name} backend has no operator {op_type!r}; it implements "
                f"{', '.join(sorted(self.operator_classes))}"
            )
        op = self.instantiate(cls, attributes)
        checked: Any = op
        checked.check_descriptors(inputs)
        return op


class BackendOperator(SlottedOperator):
    """The base of a framework backend's operators: attribute names are checked on
    construction, and descriptors are checked through the backend's own signature
    (its ``_signature(arrays, values_known=...)``) before any array exists."""

    def __init__(self, attributes: Mapping[str, Any] | None = None) -> None:
        super().__init__(attributes)
        check_attribute_names(self.op_type, self.attributes, self.attribute_defaults)

    def configure(self) -> None:
        """Read and check the attributes (raise ``UsageError`` for a bad one)."""

    def check(self, sig: Any) -> None:
        """Check the inputs of ``sig``; raise ``UsageError``.

        Shapes can always be checked; the values of static or index inputs only when
        ``sig.values_known`` (``create`` checks descriptors, before values exist).
        """

    def check_descriptors(self, inputs: Sequence[TensorDescriptor]) -> None:
        """Check inputs described by descriptors, before any array exists."""
        matcher: Any = self
        matcher._signature([DescribedInput(d) for d in inputs], values_known=False)
