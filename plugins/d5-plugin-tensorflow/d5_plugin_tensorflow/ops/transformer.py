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

from typing import Any

import numpy as np

from d5_plugin_tensorflow.graph.nodes import Translator
from d5_plugin_tensorflow.ops._base import Plan, Signature, TFOperator
from d5core.api import UsageError
from d5core.onnx import GraphNodeOperator, graph_operator_classes, one_node, one_node_opset

__all__ = ["TRANSFORMER_OPERATORS", "TranslatedOperator"]


class TranslatedOperator(GraphNodeOperator, TFOperator):
    """An operator whose kernel is the graph executor's translation of its node (one
    subclass per operator, made by :func:`d5core.api.graph_operator_classes`)."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        present = [a is not None for a in sig.arrays]
        node = one_node(self.op_type, self.attributes, present, type(self).outputs)
        opset = one_node_opset(self.op_type, self.attributes)
        try:
            translated = Translator(opset, False).translate(node)
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


#: The operator classes of this module, in the order of the kit's properties.
TRANSFORMER_OPERATORS: tuple[type[TranslatedOperator], ...] = graph_operator_classes(
    TranslatedOperator, __name__, "as the tensorflow graph executor translates it"
)
