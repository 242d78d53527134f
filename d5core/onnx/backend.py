"""A ``d5.operators`` backend made of slotted operator classes, the base of those
classes, and the order backends list their operators in.

A framework plugin gives :class:`SlottedBackend` its operator classes by ONNX type and,
when its operators take more than their attributes, overrides :meth:`instantiate`.
:func:`ordered_operator_classes` collects the classes of a plugin's operator modules in
the one order every backend uses.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from d5core.api import Operator, OperatorBackend, TensorDescriptor, UsageError
from d5core.onnx.checks import (
    DescribedInput,
    InputSlot,
    check_attribute_names,
    check_float_dtypes,
    match_input_slots,
)
from d5core.onnx.plan import Signature
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
    construction, inputs (arrays, or descriptors before any array exists) are matched
    to the slots and checked by :meth:`_signature`, and :meth:`backward` gives each
    input its gradient from what :meth:`gradients` computes.

    A backend sets :attr:`float_dtypes` and :attr:`backend`, overrides
    :meth:`signature` when its :class:`~d5core.onnx.plan.Signature` holds more (a
    device, the framework's float type), and implements :meth:`gradients`.
    """

    #: The floating element types the backend runs, by numpy name; the values are the
    #: backend's own names of them (what :attr:`Signature.dtype` holds by default).
    float_dtypes: ClassVar[Mapping[str, Any]] = {"float32": "float32", "float64": "float64"}
    #: The backend's name in messages about element types it does not run.
    backend: str = ""
    #: The class :meth:`signature` builds by default (a backend's may add properties).
    signature_class: ClassVar[type[Signature]] = Signature

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

    def signature(
        self,
        arrays: tuple[Any, ...],
        slots: tuple[InputSlot, ...],
        dtype: str | None,
        *,
        values_known: bool,
    ) -> Signature:
        """The signature of ``arrays`` matched to ``slots``, whose float inputs share
        ``dtype`` (a numpy name; ``None``: no float input, float32 is taken). The
        default is a :attr:`signature_class` holding :attr:`float_dtypes`' value for
        ``dtype``."""
        return self.signature_class(
            arrays=arrays,
            slots=slots,
            dtype=self.float_dtypes[dtype if dtype is not None else "float32"],
            values_known=values_known,
        )

    def _signature(self, arrays: Sequence[Any], *, values_known: bool) -> Any:
        """Match ``arrays`` (or descriptors) to the slots, check their element types
        against :attr:`float_dtypes`, build the :meth:`signature` and :meth:`check` it."""
        slots = match_input_slots(self.op_type, self.slots, len(arrays))
        dtype = check_float_dtypes(self.op_type, slots, arrays, self.float_dtypes, self.backend)
        sig = self.signature(tuple(arrays), slots, dtype, values_known=values_known)
        self.check(sig)
        return sig

    def check_descriptors(self, inputs: Sequence[TensorDescriptor]) -> None:
        """Check inputs described by descriptors, before any array exists."""
        self._signature([DescribedInput(d) for d in inputs], values_known=False)

    def check_output_gradients(self, given: int, outputs: int) -> None:
        """Raise a ``UsageError`` when more output gradients are ``given`` than there
        are ``outputs``."""
        if given > outputs:
            raise self.fail(f"{given} output gradients given for {outputs} outputs")

    def rejection(
        self,
        shapes: Sequence[Sequence[int] | None],
        reason: Callable[[BaseException], str],
    ) -> Callable[[BaseException], UsageError]:
        """What an error the framework raises for inputs of ``shapes`` becomes: a
        ``UsageError`` saying that :attr:`backend` rejected them, and ``reason(exc)``
        (the error in one line)."""
        described = ", ".join("absent" if s is None else self.format_shape(s) for s in shapes)

        def translate(exc: BaseException) -> UsageError:
            return self.fail(f"{self.backend} rejected inputs of shapes {described}: {reason(exc)}")

        return translate

    def gradients(
        self,
        grad_outputs: Sequence[np.ndarray[Any, Any] | None],
        inputs: Sequence[np.ndarray[Any, Any]],
    ) -> tuple[Sequence[int], Sequence[np.ndarray[Any, Any]]]:
        """The input positions that get a gradient, and those gradients as numpy arrays
        (in ONNX's layout), one per position."""
        raise NotImplementedError(f"{type(self).__name__} computes no gradients")

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray[Any, Any] | None],
        inputs: Sequence[np.ndarray[Any, Any]],
        outputs: Sequence[np.ndarray[Any, Any]] | None = None,
    ) -> list[np.ndarray[Any, Any] | None]:
        """Gradients of the inputs (from :meth:`gradients`); ``None`` for those that
        get none. ``outputs`` is not needed: the gradients are computed from ``inputs``."""
        result: list[np.ndarray[Any, Any] | None] = [None] * len(inputs)
        positions, grads = self.gradients(grad_outputs, inputs)
        for pos, grad in zip(positions, grads, strict=True):
            result[pos] = grad
        return result
