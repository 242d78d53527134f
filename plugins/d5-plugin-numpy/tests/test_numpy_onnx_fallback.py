"""The numpy executor's onnx.reference fallback: operators d5 has no implementation of
run forward, are reported, refuse gradients, and d5's own operators keep their nodes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from d5_plugin_numpy.executor import OPERATORS, NumpyExecutor
from d5_plugin_numpy.onnx_fallback import (
    ENGINE,
    FallbackNode,
    implicit_inputs,
    reference_op_types,
    reference_supports,
)
from onnx import TensorProto, helper

from d5core.api import TensorDescriptor, UsageError
from d5core.onnx.network import Network
from d5core.testing.networks import mlp


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: list[onnx.TensorProto] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _float(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _sin_net() -> onnx.ModelProto:
    """x (2, 3) -> MatMul w -> Sin -> Relu -> y: Sin is an operator d5 does not have."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 3], np.linspace(-1, 1, 9).tolist())
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Sin", ["h"], ["s"], name="sin"),
        helper.make_node("Relu", ["s"], ["y"], name="relu"),
    ]
    return _model(nodes, [_float("x", [2, 3])], [_float("y", [2, 3])], [w])


def test_an_operator_d5_lacks_runs_on_onnx_reference_and_is_reported() -> None:
    model = _sin_net()
    executor = NumpyExecutor(model)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    w = np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3)
    (y,) = executor.inference({"x": x}).values()
    np.testing.assert_allclose(y, np.maximum(np.sin(x @ w), 0), rtol=1e-6)
    assert executor.details() == {"fallback_engine": ENGINE, "fallback": {"sin": "Sin"}}
    runner = executor.fallback["sin"]
    executor.inference({"x": x})
    assert executor.fallback["sin"] is runner  # built once, at construction


def test_no_fallback_no_details() -> None:
    executor = NumpyExecutor(mlp(loss=False))
    assert executor.details() == {}
    assert executor.fallback == {}


def test_gradient_through_a_fallback_node_is_one_line_naming_the_operator() -> None:
    network = Network(_sin_net())
    trained = network.copy()
    loss = trained.add_loss("y", kind="mse", labels="t")
    executor = NumpyExecutor(trained)
    feeds = {"x": np.ones((2, 3), np.float32), "t": np.zeros((2, 3), np.float32)}
    with pytest.raises(
        UsageError, match=r"'sin' \(Sin\) runs on onnx.reference.*forward only"
    ) as info:
        executor.inference_and_backprop(feeds, loss)
    assert "\n" not in str(info.value)


def test_an_element_type_d5_refuses_goes_to_onnx_reference() -> None:
    with pytest.raises(UsageError):  # the premise: d5's Tanh takes no float16
        OPERATORS["Tanh"]({}).check_inputs([TensorDescriptor((3,), "float16")])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3])
    model = _model([helper.make_node("Tanh", ["x"], ["y"], name="tanh")], [x], [y])
    executor = NumpyExecutor(model)
    x16 = np.array([-1.0, 0.0, 2.0], np.float16)
    (out,) = executor.inference({"x": x16}).values()
    assert out.dtype == np.float16
    np.testing.assert_allclose(out, np.tanh(x16), rtol=1e-3)
    assert executor.details()["fallback"] == {"tanh": "Tanh"}
    # the same node on float32 stays on d5's operator, which has a gradient
    assert NumpyExecutor(model).fallback == {}


def test_float_inputs_stay_on_d5_operators() -> None:
    executor = NumpyExecutor(_sin_net())
    executor.inference({"x": np.ones((2, 3), np.float32)})
    assert set(executor.details()["fallback"]) == {"sin"}  # MatMul and Relu are d5's


def test_if_reads_outer_scope_values() -> None:
    then = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["t"])], "then", [], [_float("t", [2])]
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [_float("e", [2])]
    )
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="if")
    model = _model([node], [cond, _float("x", [2])], [_float("y", [2])])
    assert implicit_inputs(node) == ["x"]
    executor = NumpyExecutor(model)
    x = np.array([1.0, -2.0], np.float32)
    assert executor.inference({"c": np.array(True), "x": x})["y"].tolist() == [2.0, -4.0]
    assert executor.inference({"c": np.array(False), "x": x})["y"].tolist() == [-1.0, 2.0]


def test_sequences_flow_between_fallback_nodes() -> None:
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b"], ["seq"]),
        helper.make_node("SequenceAt", ["seq", "i"], ["y"]),
    ]
    i = helper.make_tensor("i", TensorProto.INT64, [], [1])
    model = _model(nodes, [_float("a", [2]), _float("b", [3])], [_float("y", [3])], [i])
    b = np.array([4.0, 5.0, 6.0], np.float32)
    out = NumpyExecutor(model).inference({"a": np.zeros(2, np.float32), "b": b})
    assert out["y"].tolist() == b.tolist()


def test_a_misspelt_attribute_stays_an_error() -> None:
    model = _sin_net()
    model.graph.node[2].attribute.append(helper.make_attribute("bogus", 1))
    with pytest.raises(UsageError, match="node 'relu'"):
        NumpyExecutor(Network(model, check=False))


def test_supports_is_d5_or_onnx_reference() -> None:
    assert NumpyExecutor.supports("Relu") is True
    assert NumpyExecutor.supports("Sin") is True
    assert NumpyExecutor.supports("Scatter", "", 10) is False  # no reference implementation
    assert NumpyExecutor.supports("Frobnicate", "com.example", 1) is False
    assert NumpyExecutor.supports("LinearRegressor", "ai.onnx.ml", 1) is True
    assert reference_op_types() <= NumpyExecutor.supported_ops
    assert {"If", "Loop", "Scan", "Sin", "Gelu"} <= reference_op_types()
    assert reference_supports("Gelu")  # a function operator with a type-dependent body


def test_a_node_onnx_reference_cannot_load_is_one_line() -> None:
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example", name="f")
    model = _model([node], [_float("x", [1])], [_float("y", [1])])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(UsageError, match=r"node 'f' \(Frobnicate\): onnx.reference cannot run it"):
        FallbackNode(node, model)
