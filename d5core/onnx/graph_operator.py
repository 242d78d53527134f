"""Level-0 operators whose kernel is a graph executor's own handling of a one-node ONNX
graph: the part that does not depend on the framework.

A framework plugin whose graph executor already runs the operators of transformer and
recurrent models can offer them as level-0 operators by building, for each operator
instance, the ONNX node the executor would meet in a network and handing it to the
executor's translation. That way the operator timed and validated is the code that runs
in a network. What every such plugin needs alike is here: which operators (and how many
outputs each node has, :data:`GRAPH_OPERATORS`), the opset the node declares
(:func:`one_node_opset`), the node itself (:func:`one_node`), the base every such
operator shares (:class:`GraphNodeOperator`) and the operator classes made from a
plugin's base class (:func:`graph_operator_classes`). The framework part,
calling the translation and shaping its results, stays in the plugin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np
import onnx

from d5core.onnx.signatures import onnx_signature
from d5core.onnx.slotted_operator import SlottedOperator

__all__ = [
    "GRAPH_OPERATORS",
    "GraphNodeOperator",
    "graph_operator_classes",
    "one_node",
    "one_node_opset",
]

#: The operators offered this way, each with the number of its node's outputs, in the
#: order of the operator kit's properties.
GRAPH_OPERATORS: tuple[tuple[str, int], ...] = (
    *(
        (op_type, 1)
        for op_type in (
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
    ("LayerNormalization", 3),
    ("LSTM", 3),
    ("GRU", 2),
)

#: The opset a one-node graph declares: reductions take their axes as inputs from 18 and
#: Gelu exists from 20.
_OPSET = 21
#: The last opset in which each reduction takes its axes as an attribute.
_AXES_ATTRIBUTE_UNTIL = {"ReduceSum": 12, "ReduceMean": 17, "ReduceMax": 17}


class GraphNodeOperator(SlottedOperator):
    """The part of an operator run as a one-node graph that does not depend on the
    framework: the node's output count, and a backward to check unless the operator
    declares no gradient at all (ConstantOfShape, whose only input is a shape).

    A plugin lists it before its own operator base, so that both are bases:
    ``class TranslatedOperator(GraphNodeOperator, MyOperator)``.
    """

    #: The number of the node's outputs.
    outputs: ClassVar[int] = 1

    @property
    def differentiable(self) -> bool:
        """Whether there is a backward to check."""
        return not self.no_gradient


_Op = TypeVar("_Op", bound=GraphNodeOperator)


def one_node_opset(op_type: str, attributes: Mapping[str, Any]) -> int:
    """The opset of the one-node graph of ``op_type``: 21, or for a reduction given
    ``axes`` as an attribute, the last opset in which ``axes`` was one."""
    until = _AXES_ATTRIBUTE_UNTIL.get(op_type)
    return until if until is not None and attributes.get("axes") is not None else _OPSET


def _attribute(value: Any) -> Any:
    """An attribute value as ``onnx.helper.make_node`` takes it."""
    if isinstance(value, np.ndarray):
        return onnx.numpy_helper.from_array(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def one_node(
    op_type: str, attributes: Mapping[str, Any], present: Sequence[bool], outputs: int
) -> onnx.NodeProto:
    """The ONNX node (named ``op_type``) of one operator instance.

    Input ``i`` is named ``in{i}`` where ``present[i]``, and ``""`` (an omitted optional
    input) where not; trailing omitted inputs are dropped. The outputs are ``out0`` to
    ``out{outputs - 1}``. Attributes that are ``None`` are left out.
    """
    names = [f"in{i}" if given else "" for i, given in enumerate(present)]
    while names and not names[-1]:
        names.pop()
    given = {k: _attribute(v) for k, v in attributes.items() if v is not None}
    out = [f"out{i}" for i in range(outputs)]
    return onnx.helper.make_node(op_type, names, out, name=op_type, **given)


def graph_operator_classes(base: type[_Op], module: str, runs: str) -> tuple[type[_Op], ...]:
    """One subclass of ``base`` for each of :data:`GRAPH_OPERATORS`, in that order.

    Each sets ``op_type``, ONNX's ``slots`` and ``attribute_defaults``, ``outputs`` (the
    node's output count, for ``base`` to read) and ``no_gradient`` (for ConstantOfShape,
    whose only input is a shape). ``module`` is the ``__module__`` the classes report
    (the plugin module that makes them) and ``runs`` ends their docstring, such as
    ``"as the mxnet graph executor runs it"``.
    """
    classes = []
    for op_type, outputs in GRAPH_OPERATORS:
        slots, defaults = onnx_signature(op_type)
        namespace: dict[str, Any] = {
            "op_type": op_type,
            "slots": slots,
            "attribute_defaults": defaults,
            "outputs": outputs,
            "no_gradient": op_type == "ConstantOfShape",
            "__doc__": f"ONNX ``{op_type}``, {runs}.",
            "__module__": module,
        }
        classes.append(type(op_type, (base,), namespace))
    return tuple(classes)
