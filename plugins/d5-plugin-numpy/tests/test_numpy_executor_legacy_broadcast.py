"""Add, Sub, Mul and Div of opsets before 7 in the reference executor: ``B`` broadcasts to
``A`` only with ``broadcast=1``, from ``axis`` (suffix matching without it), and the
gradient of ``B`` sums over the axes it was broadcast along. The expected values are
written with explicit numpy indexing (onnx's ReferenceEvaluator ignores ``axis``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from d5_plugin_numpy.executor import NumpyExecutor
from onnx import TensorProto, helper, numpy_helper

from d5core.api import UsageError

A_SHAPE = (2, 3, 3)
OPS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def legacy_model(
    op: str, b_shape: tuple[int, ...], *, trainable_b: bool = False, **attributes: Any
) -> onnx.ModelProto:
    """``Y = op(A, B)`` at opset 6, ``A`` of shape (2, 3, 3); ``B`` an input, or an
    initializer (a trainable parameter) when ``trainable_b``."""
    node = helper.make_node(op, ["A", "B"], ["Y"], name="legacy", **attributes)
    inputs = [helper.make_tensor_value_info("A", TensorProto.FLOAT, A_SHAPE)]
    inits = []
    if trainable_b:
        b = np.linspace(0.5, 1.5, int(np.prod(b_shape))).reshape(b_shape).astype(np.float32)
        inits.append(numpy_helper.from_array(b, "B"))
    inputs.append(helper.make_tensor_value_info("B", TensorProto.FLOAT, b_shape))
    outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, A_SHAPE)]
    graph = helper.make_graph([node], "legacy", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)])
    model.ir_version = 3
    return model


def feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "A": rng.uniform(1.0, 2.0, A_SHAPE).astype(np.float32),
        "B": np.array([1.5, 2.5, 4.0], np.float32),
    }


@pytest.mark.parametrize("op", sorted(OPS))
def test_broadcast_with_axis_aligns_b_with_that_axis_of_a(op: str) -> None:
    f = feeds()
    got = NumpyExecutor(legacy_model(op, (3,), broadcast=1, axis=1)).inference(f)["Y"]
    want = OPS[op](f["A"], f["B"][None, :, None])  # B along axis 1, not the last axis
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_broadcast_without_axis_matches_the_suffix() -> None:
    f = feeds()
    got = NumpyExecutor(legacy_model("Sub", (3,), broadcast=1)).inference(f)["Y"]
    np.testing.assert_allclose(got, f["A"] - f["B"][None, None, :], rtol=1e-6)


def test_one_element_b_broadcasts_everywhere() -> None:
    f = {**feeds(), "B": np.array([[3.0]], np.float32)}
    got = NumpyExecutor(legacy_model("Mul", (1, 1), broadcast=1, axis=1)).inference(f)["Y"]
    np.testing.assert_allclose(got, f["A"] * 3.0, rtol=1e-6)


def test_gradient_of_a_legacy_broadcast_b_sums_over_the_other_axes() -> None:
    model = legacy_model("Mul", (3,), trainable_b=True, broadcast=1, axis=1)
    a = feeds()["A"]
    _, grads = NumpyExecutor(model).inference_and_backprop({"A": a}, "Y")  # seeds ones
    np.testing.assert_allclose(grads["B"], a.sum(axis=(0, 2)), rtol=1e-5)


@pytest.mark.parametrize(
    ("attributes", "b_shape", "message"),
    [
        ({}, (3,), "before opset 7 broadcasting needs the attribute broadcast=1"),
        ({"broadcast": 0, "axis": 1}, (3,), "needs the attribute broadcast=1"),
        ({"broadcast": 1}, (2,), "does not match input A of shape (2, 3, 3) at the end"),
        ({"broadcast": 1, "axis": 2}, (3, 3), "from axis 2"),
        ({"broadcast": 1, "axis": 0}, (3, 1), "from axis 0"),
    ],
)
def test_shapes_the_attributes_do_not_allow_are_refused_naming_the_node(
    attributes: dict[str, Any], b_shape: tuple[int, ...], message: str
) -> None:
    f = {**feeds(), "B": np.ones(b_shape, np.float32)}
    with pytest.raises(UsageError, match="node 'legacy' \\(Add\\)") as caught:
        NumpyExecutor(legacy_model("Add", b_shape, **attributes)).inference(f)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_equal_shapes_need_no_broadcast_attribute() -> None:
    f = {**feeds(), "B": np.full(A_SHAPE, 2.0, np.float32)}
    got = NumpyExecutor(legacy_model("Div", A_SHAPE)).inference(f)["Y"]
    np.testing.assert_allclose(got, f["A"] / 2.0, rtol=1e-6)
