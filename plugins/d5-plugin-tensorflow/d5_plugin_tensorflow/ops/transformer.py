"""The operators of transformer and recurrent models as level-0 operators: Gather,
GatherElements, Slice, Shape, ConstantOfShape, Expand, Where, Equal, Less, Greater,
Cast, Pow, Sqrt, Erf, Exp, Log, Gelu, ReduceMean, ReduceSum, ReduceMax,
LayerNormalization, LSTM and GRU.

Each kernel is the graph executor's translation of a one-node ONNX graph
(:mod:`d5_plugin_tensorflow.graph`), so that the operator timed and validated here is the
code the ``tensorflow`` executor runs in a network. Static inputs (Slice's starts, a
reduction's axes, Expand's shape) are read when the kernel is traced, one trace per
value; index inputs (Gather's indices) are int64 tensors, Where's condition a bool one.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import onnx

from d5_plugin_tensorflow.graph.nodes import Translator
from d5_plugin_tensorflow.ops._base import Plan, Signature, TFOperator
from d5core.api import UsageError, onnx_signature

__all__ = ["TRANSFORMER_OPERATORS", "TranslatedOperator"]

#: The opset the one-node graphs declare (axes of reductions are inputs from 18; Gelu is
#: from 20).
_OPSET = 21
#: The last opset in which each reduction takes its axes as an attribute.
_AXES_ATTRIBUTE_UNTIL = {"ReduceSum": 12, "ReduceMean": 17, "ReduceMax": 17}


def _attribute(value: Any) -> Any:
    """An attribute value as ``onnx.helper.make_node`` takes it."""
    if isinstance(value, np.ndarray):
        return onnx.numpy_helper.from_array(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


class TranslatedOperator(TFOperator):
    """An operator whose kernel is the graph executor's translation of its node.

    Subclasses set ``op_type``, its ONNX ``slots`` and ``attribute_defaults``, and
    :attr:`outputs` (how many outputs the node has).
    """

    #: The number of the node's outputs.
    outputs: ClassVar[int] = 1

    @property
    def differentiable(self) -> bool:
        """Whether there is a backward to check: not for an operator that declares no
        gradient at all (ConstantOfShape, whose only input is a shape)."""
        return not self.no_gradient

    def _opset(self) -> int:
        given = self.attributes.get("axes")
        until = _AXES_ATTRIBUTE_UNTIL.get(self.op_type)
        return until if until is not None and given is not None else _OPSET

    def _node(self, count: int) -> onnx.NodeProto:
        names = [f"in{i}" for i in range(count)]
        attributes = {k: _attribute(v) for k, v in self.attributes.items() if v is not None}
        outputs = [f"out{i}" for i in range(type(self).outputs)]
        return onnx.helper.make_node(self.op_type, names, outputs, name=self.op_type, **attributes)

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        node = self._node(len(sig.arrays))
        for position, array in enumerate(sig.arrays):
            if array is None:
                node.input[position] = ""
        try:
            translated = Translator(self._opset(), False).translate(node)
        except UsageError as exc:
            raise self.fail(str(exc).split(": ", 1)[-1]) from None
        statics = {
            p: np.asarray(a)
            for p, (slot, a) in enumerate(zip(sig.slots, sig.arrays, strict=True))
            if slot.kind == "static" and a is not None
        }
        tensors = [
            p
            for p, (slot, a) in enumerate(zip(sig.slots, sig.arrays, strict=True))
            if slot.kind != "static" and a is not None
        ]
        count, fn = len(translated.inputs), translated.fn

        def kernel(*xs: Any) -> tuple[Any, ...]:
            args: list[Any] = [None] * count
            for p, x in zip(tensors, xs, strict=True):
                args[p] = x
            for p, value in statics.items():
                args[p] = value
            return tuple(fn(*args))[: type(self).outputs]

        return Plan(kernel)


def _operator(op_type: str, outputs: int = 1) -> type[TranslatedOperator]:
    slots, defaults = onnx_signature(op_type)
    doc = f"ONNX ``{op_type}``, as the tensorflow graph executor translates it."
    namespace: dict[str, Any] = {
        "op_type": op_type,
        "slots": slots,
        "attribute_defaults": defaults,
        "outputs": outputs,
        # ConstantOfShape's only input is a shape: there is no gradient at all
        "no_gradient": op_type == "ConstantOfShape",
        "__doc__": doc,
        "__module__": __name__,
    }
    return type(op_type, (TranslatedOperator,), namespace)


#: The operator classes of this module, in the order of the kit's properties.
TRANSFORMER_OPERATORS: tuple[type[TranslatedOperator], ...] = (
    *(
        _operator(op)
        for op in (
            "Gather",
            "GatherElements",
            "Slice",
            "Shape",
            "ConstantOfShape",
            "Expand",
            "Where",
            "Equal",
            "Less",
            "Greater",
            "Cast",
            "Pow",
            "Sqrt",
            "Erf",
            "Exp",
            "Log",
            "Gelu",
            "ReduceMean",
            "ReduceSum",
            "ReduceMax",
        )
    ),
    _operator("LayerNormalization", 3),
    _operator("LSTM", 3),
    _operator("GRU", 2),
)
