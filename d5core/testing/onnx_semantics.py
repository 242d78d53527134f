"""Where frameworks differ from ONNX: a test kit any executor plugin can run on its executor.

Frameworks' own operators often disagree with ONNX in small ways: integer division that
floors or returns floats, unsigned integers that saturate, opset-6 ``broadcast``/``axis``
ignored, Dropout that draws its own mask. The :class:`OnnxSemanticsTests` mixin pins each
of these down against d5's numpy reference executor (the ``numpy`` entry of
``d5.frameworks``). A plugin author subclasses it in a test module, under a name pytest
collects, and names the executor class::

    from d5core.testing.onnx_semantics import OnnxSemanticsTests
    from my_plugin.executor import MyExecutor

    class TestMyExecutorFollowsOnnx(OnnxSemanticsTests):
        executor = MyExecutor

Every test then runs on ``MyExecutor``; further tests of the plugin's own can go in the
same class and use the model builders here (:func:`binary_model`, :func:`dropout_model`).
Import this module in tests only: it imports onnx and pytest.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from d5core.errors import UsageError
from d5core.levels.networks import GraphExecutor
from d5core.onnx.network import Network

__all__ = [
    "INTEGER_TYPES",
    "OnnxSemanticsTests",
    "binary_model",
    "dropout_model",
    "reference_executor",
    "truncated_division",
]

#: Every ONNX integer tensor type: integer Div must truncate in each of them.
INTEGER_TYPES: list[type[np.integer[Any]]] = [
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
]  # fmt: skip

_ARITHMETIC = [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply)]

#: Opset-6 ``Add`` shapes and attributes ONNX refuses, with part of the expected message.
LEGACY_REFUSALS: list[tuple[dict[str, Any], tuple[int, ...], str]] = [
    ({}, (3,), "needs the attribute broadcast=1"),
    ({"broadcast": 1}, (2,), "does not match input A of shape (2, 3, 3) at the end"),
    ({"broadcast": 1, "axis": 0}, (3, 1), "from axis 0"),
]


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
    """``Y = op(A, B)`` in one node named ``node``; ``B`` is an input, or a trainable
    initializer when ``b_value`` is given. Opsets before 7 get IR version 3."""
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


def dropout_model(ratio: float) -> onnx.ModelProto:
    """``x (6, 8) -> Dropout(ratio, seed 4) -> (y, mask)`` at opset 13, the mask an output
    and the node named ``drop``."""
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


def truncated_division(x: int, y: int) -> int:
    """``x / y`` rounded toward zero, in Python's unbounded integers."""
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def reference_executor(model: Network | onnx.ModelProto) -> GraphExecutor:
    """d5's numpy reference executor on ``model``, loaded as any plugin would load it."""
    from d5core.plugins import get_plugin_manager

    cls: type[GraphExecutor] = get_plugin_manager().load("d5.frameworks", "numpy")
    return cls(model)


def _dtype_id(dtype: Any) -> str:
    return str(np.dtype(dtype).name)


class OnnxSemanticsTests:
    """ONNX semantics an executor must keep; subclass it with ``executor`` set (see the
    module docstring). The tests compare with the numpy reference executor."""

    #: The executor class under test.
    executor: ClassVar[type[GraphExecutor]]

    def run_binary(self, op: str, a: np.ndarray, b: np.ndarray, **kw: Any) -> np.ndarray:
        """``op(a, b)`` run by the executor under test on a :func:`binary_model`."""
        model = binary_model(op, a.dtype, a.shape, b.shape, **kw)
        return self.executor(model).inference({"A": a, "B": b})["Y"]

    # -- integer arithmetic ------------------------------------------------------------

    def test_integer_div_truncates_toward_zero_in_the_input_type(self) -> None:
        got = self.run_binary("Div", np.array([7, -7], np.int32), np.array([2, 2], np.int32))
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, [3, -3])

    @pytest.mark.parametrize("dtype", INTEGER_TYPES, ids=_dtype_id)
    def test_integer_div_matches_truncated_division_over_the_whole_range(self, dtype: Any) -> None:
        info = np.iinfo(dtype)
        rng = np.random.default_rng(1)
        a = rng.integers(info.min, info.max, 500, dtype=dtype, endpoint=True)
        b = rng.integers(info.min, info.max, 500, dtype=dtype, endpoint=True)
        b[:200] = rng.integers(1, 30, 200).astype(dtype)  # small divisors: large quotients
        a[:5], b[5:10] = info.max, info.max
        b[b == 0] = 1
        if info.min < 0:
            b[(a == info.min) & (b == -1)] = 1  # the one quotient that overflows
        exact = [truncated_division(int(x), int(y)) for x, y in zip(a, b, strict=True)]
        got = self.run_binary("Div", a, b)
        assert got.dtype == np.dtype(dtype)
        assert [int(q) for q in got] == exact

    @pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64], ids=_dtype_id)
    @pytest.mark.parametrize(("op", "fn"), _ARITHMETIC, ids=[op for op, _ in _ARITHMETIC])
    def test_unsigned_arithmetic_wraps_as_onnx_does(self, op: str, fn: Any, dtype: Any) -> None:
        info = np.iinfo(dtype)
        a = np.array([0, 1, info.max, info.max // 2 + 3], dtype)
        b = np.array([1, info.max, 2, 5], dtype)
        got = self.run_binary(op, a, b)
        with np.errstate(over="ignore"):
            want = fn(a, b)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)

    def test_floating_div_stays_true_division(self) -> None:
        a, b = np.array([7.0, -7.0], np.float32), np.array([2.0, 2.0], np.float32)
        np.testing.assert_array_equal(self.run_binary("Div", a, b), [3.5, -3.5])

    # -- Add/Sub/Mul/Div of opsets before 7 --------------------------------------------

    @pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
    def test_legacy_broadcast_with_axis_agrees_with_the_reference(self, op: str) -> None:
        rng = np.random.default_rng(2)
        a = rng.uniform(1.0, 2.0, (2, 3, 3)).astype(np.float32)
        b = np.array([1.5, 2.5, 4.0], np.float32)
        feeds = {"A": a, "B": b}
        model = binary_model(op, np.float32, a.shape, b.shape, opset=6, broadcast=1, axis=1)
        got = self.executor(model).inference(feeds)["Y"]
        want = reference_executor(model).inference(feeds)["Y"]
        np.testing.assert_allclose(got, want, rtol=1e-6)
        along_last_axis = self.executor(binary_model(op, np.float32, a.shape, b.shape))
        assert not np.allclose(got, along_last_axis.inference(feeds)["Y"])

    def test_legacy_broadcast_gradient_agrees_with_the_reference(self) -> None:
        b = np.array([0.5, 1.0, 2.0], np.float32)
        model = binary_model(
            "Mul", np.float32, (2, 3, 3), (3,), opset=6, b_value=b, broadcast=1, axis=1
        )
        a = np.random.default_rng(3).standard_normal((2, 3, 3)).astype(np.float32)
        got = self.executor(model).inference_and_backprop({"A": a}, "Y")[1]["B"]
        want = reference_executor(model).inference_and_backprop({"A": a}, "Y")[1]["B"]
        np.testing.assert_allclose(got, want, rtol=1e-5)

    @pytest.mark.parametrize(("attributes", "b_shape", "message"), LEGACY_REFUSALS)
    def test_legacy_shapes_the_attributes_do_not_allow_are_refused(
        self, attributes: dict[str, Any], b_shape: tuple[int, ...], message: str
    ) -> None:
        model = binary_model("Add", np.float32, (2, 3, 3), b_shape, opset=6, **attributes)
        feeds = {"A": np.ones((2, 3, 3), np.float32), "B": np.ones(b_shape, np.float32)}
        with pytest.raises(UsageError, match="node 'node' \\(Add\\)") as caught:
            self.executor(model).inference(feeds)
        assert message in str(caught.value) and "\n" not in str(caught.value)

    # -- Dropout -----------------------------------------------------------------------

    def test_training_dropout_output_and_mask_are_the_references(self) -> None:
        model = dropout_model(0.4)
        x = np.random.default_rng(5).standard_normal((6, 8)).astype(np.float32)
        got, _ = self.executor(model).inference_and_backprop({"x": x}, "y")
        want, _ = reference_executor(model).inference_and_backprop({"x": x}, "y")
        assert got["mask"].dtype == np.bool_
        np.testing.assert_array_equal(got["mask"], want["mask"])
        assert 0 < want["mask"].sum() < want["mask"].size
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6)

    def test_inference_dropout_outputs_the_input_and_a_full_mask(self) -> None:
        x = np.random.default_rng(6).standard_normal((6, 8)).astype(np.float32)
        out = self.executor(dropout_model(0.4)).inference({"x": x})
        np.testing.assert_array_equal(out["y"], x)
        assert out["mask"].dtype == np.bool_ and out["mask"].all()

    def test_dropout_ratio_of_one_is_refused_naming_the_node(self) -> None:
        with pytest.raises(UsageError, match="node 'drop' \\(Dropout\\): ratio must lie in"):
            self.executor(dropout_model(1.0))
