"""The torch executor follows ONNX where torch's defaults differ: integer Div truncates
in the inputs' type, unsigned integers wrap, Add/Sub/Mul/Div of opsets before 7 honour
``broadcast``/``axis``, and Dropout in training mode applies (and outputs) the
reference's mask, so it agrees with the numpy reference executor."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from d5_plugin_numpy.executor import NumpyExecutor
from d5_plugin_torch.executor import TorchExecutor
from onnx import TensorProto, helper, numpy_helper

from d5core.errors import UsageError

INTEGER_TYPES = [
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
]  # fmt: skip


def binary_model(
    op: str,
    dtype: Any,
    a_shape: tuple[int, ...],
    b_shape: tuple[int, ...],
    *,
    opset: int = 13,
    b_value: np.ndarray | None = None,
    **attributes: Any,
) -> onnx.ModelProto:
    """``Y = op(A, B)``; ``B`` is an input, or a trainable initializer when ``b_value``."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node(op, ["A", "B"], ["Y"], name="node", **attributes)
    inputs = [
        helper.make_tensor_value_info("A", elem, a_shape),
        helper.make_tensor_value_info("B", elem, b_shape),
    ]
    inits = [] if b_value is None else [numpy_helper.from_array(b_value, "B")]
    outputs = [helper.make_tensor_value_info("Y", elem, a_shape)]
    graph = helper.make_graph([node], "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3 if opset < 7 else 8
    return model


def run(op: str, a: np.ndarray, b: np.ndarray, **kw: Any) -> np.ndarray:
    model = binary_model(op, a.dtype, a.shape, b.shape, **kw)
    return TorchExecutor(model).inference({"A": a, "B": b})["Y"]


# -- integer arithmetic ----------------------------------------------------------------


def test_integer_div_truncates_toward_zero_in_the_input_type() -> None:
    got = run("Div", np.array([7, -7], np.int32), np.array([2, 2], np.int32))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [3, -3])


@pytest.mark.parametrize("dtype", INTEGER_TYPES, ids=lambda t: np.dtype(t).name)
def test_integer_div_matches_truncated_division_over_the_whole_range(dtype: Any) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1)
    a = rng.integers(info.min, info.max, 500, dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, 500, dtype=dtype, endpoint=True)
    b[:200] = rng.integers(1, 30, 200).astype(dtype)  # small divisors: large quotients
    a[:5], b[5:10] = info.max, info.max
    b[b == 0] = 1
    if info.min < 0:
        b[(a == info.min) & (b == -1)] = 1  # the one quotient that overflows
    exact = [_truncated(int(x), int(y)) for x, y in zip(a, b, strict=True)]
    got = run("Div", a, b)
    assert got.dtype == np.dtype(dtype)
    assert [int(q) for q in got] == exact


def _truncated(x: int, y: int) -> int:
    """``x / y`` rounded toward zero, in Python's unbounded integers."""
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64], ids=lambda t: t.__name__)
@pytest.mark.parametrize(
    ("op", "fn"), [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply)]
)
def test_unsigned_arithmetic_wraps_as_onnx_does(op: str, fn: Any, dtype: Any) -> None:
    info = np.iinfo(dtype)
    a = np.array([0, 1, info.max, info.max // 2 + 3], dtype)
    b = np.array([1, info.max, 2, 5], dtype)
    got = run(op, a, b)
    with np.errstate(over="ignore"):
        want = fn(a, b)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_floating_div_stays_true_division() -> None:
    got = run("Div", np.array([7.0, -7.0], np.float32), np.array([2.0, 2.0], np.float32))
    np.testing.assert_array_equal(got, [3.5, -3.5])


# -- Add/Sub/Mul/Div of opsets before 7 ------------------------------------------------


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_legacy_broadcast_with_axis_agrees_with_the_reference(op: str) -> None:
    rng = np.random.default_rng(2)
    a = rng.uniform(1.0, 2.0, (2, 3, 3)).astype(np.float32)
    b = np.array([1.5, 2.5, 4.0], np.float32)
    feeds = {"A": a, "B": b}
    model = binary_model(op, np.float32, a.shape, b.shape, opset=6, broadcast=1, axis=1)
    got = TorchExecutor(model).inference(feeds)["Y"]
    np.testing.assert_allclose(got, NumpyExecutor(model).inference(feeds)["Y"], rtol=1e-6)
    along_last_axis = TorchExecutor(binary_model(op, np.float32, a.shape, b.shape))
    assert not np.allclose(got, along_last_axis.inference(feeds)["Y"])


def test_legacy_broadcast_gradient_agrees_with_the_reference() -> None:
    b = np.array([0.5, 1.0, 2.0], np.float32)
    model = binary_model(
        "Mul", np.float32, (2, 3, 3), (3,), opset=6, b_value=b, broadcast=1, axis=1
    )
    a = np.random.default_rng(3).standard_normal((2, 3, 3)).astype(np.float32)
    got = TorchExecutor(model).inference_and_backprop({"A": a}, "Y")[1]["B"]
    want = NumpyExecutor(model).inference_and_backprop({"A": a}, "Y")[1]["B"]
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize(
    ("attributes", "b_shape", "message"),
    [
        ({}, (3,), "needs the attribute broadcast=1"),
        ({"broadcast": 1}, (2,), "does not match input A of shape (2, 3, 3) at the end"),
        ({"broadcast": 1, "axis": 0}, (3, 1), "from axis 0"),
    ],
)
def test_legacy_shapes_the_attributes_do_not_allow_are_refused(
    attributes: dict[str, Any], b_shape: tuple[int, ...], message: str
) -> None:
    model = binary_model("Add", np.float32, (2, 3, 3), b_shape, opset=6, **attributes)
    feeds = {"A": np.ones((2, 3, 3), np.float32), "B": np.ones(b_shape, np.float32)}
    with pytest.raises(UsageError, match="node 'node' \\(Add\\)") as caught:
        TorchExecutor(model).inference(feeds)
    assert message in str(caught.value) and "\n" not in str(caught.value)


# -- Dropout ---------------------------------------------------------------------------


def dropout_model(ratio: float) -> onnx.ModelProto:
    """``x -> Dropout(ratio, seed 4) -> (y, mask)`` at opset 13, the mask an output."""
    value = numpy_helper.from_array(np.array(ratio, np.float32))
    nodes = [
        helper.make_node("Constant", [], ["ratio"], value=value),
        helper.make_node("Dropout", ["x", "ratio"], ["y", "mask"], name="drop", seed=4),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (6, 8))],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, (6, 8)),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, (6, 8)),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_training_dropout_output_and_mask_are_the_references() -> None:
    model = dropout_model(0.4)
    x = np.random.default_rng(5).standard_normal((6, 8)).astype(np.float32)
    got, _ = TorchExecutor(model).inference_and_backprop({"x": x}, "y")
    want, _ = NumpyExecutor(model).inference_and_backprop({"x": x}, "y")
    assert got["mask"].dtype == np.bool_
    np.testing.assert_array_equal(got["mask"], want["mask"])
    assert 0 < want["mask"].sum() < want["mask"].size
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6)


def test_inference_dropout_outputs_the_input_and_a_full_mask() -> None:
    x = np.random.default_rng(6).standard_normal((6, 8)).astype(np.float32)
    out = TorchExecutor(dropout_model(0.4)).inference({"x": x})
    np.testing.assert_array_equal(out["y"], x)
    assert out["mask"].dtype == np.bool_ and out["mask"].all()


def test_dropout_ratio_of_one_is_refused_naming_the_node() -> None:
    with pytest.raises(UsageError, match="node 'drop' \\(Dropout\\): ratio must lie in"):
        TorchExecutor(dropout_model(1.0))
