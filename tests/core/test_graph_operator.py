"""The framework-independent part of operators run as a one-node graph
(d5core.onnx.graph_operator): the node, its opset, and the classes made per operator."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import pytest

from d5core.onnx.graph_operator import (
    GRAPH_OPERATORS,
    GraphNodeOperator,
    graph_operator_classes,
    one_node,
    one_node_opset,
)
from d5core.onnx.signatures import onnx_signature


def test_one_node_names_present_inputs_and_drops_trailing_omitted_ones() -> None:
    node = one_node("LSTM", {"hidden_size": 3, "clip": None}, [True, True, False, True, False], 3)
    assert list(node.input) == ["in0", "in1", "", "in3"]
    assert list(node.output) == ["out0", "out1", "out2"]
    assert node.name == "LSTM"
    assert [a.name for a in node.attribute] == ["hidden_size"]


def test_one_node_converts_numpy_attributes() -> None:
    value = np.array([1.5], np.float32)
    node = one_node("ConstantOfShape", {"value": value, "axis": np.int64(2)}, [True], 1)
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(attributes["value"]), value)
    assert attributes["axis"] == 2


@pytest.mark.parametrize(
    ("op_type", "attributes", "opset"),
    [
        ("ReduceSum", {"axes": [1]}, 12),
        ("ReduceMean", {"axes": [0]}, 17),
        ("ReduceMax", {"axes": None}, 21),
        ("ReduceSum", {}, 21),
        ("Gelu", {"axes": [1]}, 21),
    ],
)
def test_the_opset_is_the_last_with_axes_as_an_attribute_when_they_are_one(
    op_type: str, attributes: dict[str, object], opset: int
) -> None:
    assert one_node_opset(op_type, attributes) == opset


def test_the_classes_follow_the_operator_list() -> None:
    classes = graph_operator_classes(GraphNodeOperator, "my.module", "as mine runs it")
    assert [(c.op_type, c.outputs) for c in classes] == list(GRAPH_OPERATORS)
    for cls in classes:
        assert issubclass(cls, GraphNodeOperator)
        assert cls.__module__ == "my.module"
        assert cls.__doc__ == f"ONNX ``{cls.op_type}``, as mine runs it."
        assert cls.no_gradient == (cls.op_type == "ConstantOfShape")
        assert (cls.slots, dict(cls.attribute_defaults)) == (
            onnx_signature(cls.op_type)[0],
            dict(onnx_signature(cls.op_type)[1]),
        )


@pytest.mark.parametrize("no_gradient", [True, False])
def test_there_is_a_backward_unless_the_operator_declares_none(no_gradient: bool) -> None:
    prop = GraphNodeOperator.differentiable
    assert isinstance(prop, property) and prop.fget is not None
    assert prop.fget(SimpleNamespace(no_gradient=no_gradient)) is not no_gradient
