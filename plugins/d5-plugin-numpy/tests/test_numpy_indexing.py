"""Gather, GatherElements, Slice, Shape, ConstantOfShape, Expand, Where, Equal, Less,
Greater and Cast: forward against onnx.reference, backward against central differences,
one-line errors for bad inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numpy_onnx_support import onnx_forward
from numpy_ref_support import assert_gradients, make, run

from d5core.api import TensorDescriptor, UsageError

I64 = np.int64
RNG = np.random.default_rng(11)


def r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=I64)


FORWARD_CASES: list[tuple[str, dict[str, Any], list[Any]]] = [
    ("Gather", {"axis": 0}, [r(5, 3), ints(4, -5, 0, 0)]),
    ("Gather", {"axis": -1}, [r(2, 3, 4), np.array([[1, -1], [0, 2]], dtype=np.int32)]),
    ("Gather", {"axis": 1}, [r(2, 3), np.array(2, dtype=I64)]),
    ("Gather", {}, [np.arange(6, dtype=I64), ints(-1, 2)]),
    ("GatherElements", {"axis": 0}, [r(3, 4), np.array([[2, -1, 0, 1], [0, 0, 1, 2]])]),
    ("GatherElements", {"axis": 2}, [r(2, 3, 4), RNG.integers(-4, 4, (2, 3, 5))]),
    ("Slice", {}, [r(6, 5), ints(1, -1), ints(5, -100), ints(0, 1), ints(2, -1)]),
    ("Slice", {}, [r(6, 5), ints(-2), ints(2**31 - 1), ints(-1)]),
    ("Slice", {}, [r(6, 5), ints(-100), ints(100), ints(0), ints(-1)]),
    ("Slice", {}, [r(6, 5), ints(100), ints(-100), ints(0), ints(-3)]),
    ("Slice", {}, [r(4, 3), ints(1, 0), ints(3, 2)]),
    ("Slice", {}, [np.arange(10, dtype=I64), ints(8), ints(1), ints(0), ints(-3)]),
    ("Shape", {}, [r(2, 3, 4)]),
    ("Shape", {"start": 1, "end": -1}, [r(2, 3, 4, 5)]),
    ("Shape", {"start": -10, "end": 10}, [r(2, 3)]),
    ("Shape", {"start": 2, "end": 1}, [r(2, 3, 4)]),
    ("Expand", {}, [r(3, 1), ints(2, 1, 4)]),
    ("Expand", {}, [r(1, 4), ints(3, 1)]),
    ("Expand", {}, [np.array([True, False]), ints(3, 2)]),
    ("Where", {}, [RNG.random((3, 4)) < 0.5, r(4), r(3, 1)]),
    ("Where", {}, [np.array([True, False]), ints(1, 2), ints(7, 8)]),
    ("Equal", {}, [np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.0])]),
    ("Equal", {}, [ints(1, 2, 3), ints(2)]),
    ("Equal", {}, [np.array([True, False]), np.array([True])]),
    ("Less", {}, [r(3, 4), r(4)]),
    ("Greater", {}, [r(3, 1), r(1, 4)]),
    ("Greater", {}, [ints(1, 5), ints(3)]),
    ("Cast", {"to": 11}, [r(3, 4).astype(np.float32)]),
    ("Cast", {"to": 1}, [r(3, 4)]),
    ("Cast", {"to": 7}, [np.array([-2.7, -0.5, 0.0, 0.5, 2.7])]),
    ("Cast", {"to": 6}, [np.array([-2.7, 3.9])]),
    ("Cast", {"to": 9}, [np.array([-2.0, 0.0, 0.5])]),
    ("Cast", {"to": 1}, [np.array([True, False])]),
    ("Cast", {"to": 10}, [r(3)]),
]


@pytest.mark.parametrize(
    ("op_type", "attributes", "inputs"),
    FORWARD_CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(FORWARD_CASES)],
)
def test_forward_matches_onnx_reference(op_type, attributes, inputs) -> None:
    (got,) = run(op_type, attributes, inputs)
    (expected,) = onnx_forward(op_type, attributes, inputs)
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_constant_of_shape_fills_with_the_value_in_its_dtype() -> None:
    value = np.array([2.5], dtype=np.float64)
    (y,) = run("ConstantOfShape", {"value": value}, [ints(2, 3)])
    (expected,) = onnx_forward(
        "ConstantOfShape", {"value": onnx_tensor(value)}, [ints(2, 3)], opset=20
    )
    np.testing.assert_array_equal(y, expected)
    assert y.dtype == np.float64
    (zeros,) = run("ConstantOfShape", {}, [ints(3)])
    assert zeros.dtype == np.float32 and not zeros.any()
    (scalar,) = run("ConstantOfShape", {"value": np.array([7], dtype=I64)}, [ints()])
    assert scalar.shape == () and scalar == 7 and scalar.dtype == I64


def onnx_tensor(value: np.ndarray) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(value)


GRADIENT_CASES: list[tuple[str, dict[str, Any], list[Any]]] = [
    ("Gather", {"axis": 1}, [r(2, 3, 2), ints(0, 2, 2, -3)]),
    ("Gather", {"axis": 0}, [r(4), np.array([[1, 1], [3, 0]], dtype=np.int32)]),
    ("GatherElements", {"axis": 1}, [r(3, 4), np.array([[0, 0, 3], [1, -1, 1], [2, 2, 2]])]),
    ("Slice", {}, [r(6, 5), ints(1, -1), ints(5, -100), ints(0, 1), ints(2, -2)]),
    ("Slice", {}, [r(3, 4, 2), ints(-1), ints(-100), ints(-2), ints(-1)]),
    ("Expand", {}, [r(3, 1), ints(2, 1, 4)]),
    ("Expand", {}, [r(2, 3), ints(1, 1)]),
    ("Where", {}, [RNG.random((3, 4)) < 0.5, r(4), r(3, 1)]),
    ("Cast", {"to": 11}, [r(2, 3)]),
]


@pytest.mark.parametrize(
    ("op_type", "attributes", "inputs"),
    GRADIENT_CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(GRADIENT_CASES)],
)
def test_backward_matches_central_differences(op_type, attributes, inputs) -> None:
    assert_gradients(op_type, attributes, inputs)


def test_gather_adds_the_gradients_of_a_repeated_index() -> None:
    x = r(3, 2)
    op = make("Gather", {}, [x, ints(1, 1, -2)])
    (dx, didx) = op.backward(
        [np.ones((3, 2))], [x, ints(1, 1, -2)], op.forward([x, ints(1, 1, -2)])
    )
    np.testing.assert_array_equal(dx, [[0, 0], [3, 3], [0, 0]])
    assert didx is None


def test_no_gradient_for_integer_boolean_and_shape_inputs() -> None:
    c, x, y = np.array([True, False]), r(2), r(2)
    grads = make("Where", {}, [c, x, y]).backward([np.ones(2)], [c, x, y], [x])
    assert grads[0] is None
    np.testing.assert_array_equal(grads[1], [1, 0])
    np.testing.assert_array_equal(grads[2], [0, 1])
    data = ints(1, 2, 3)
    assert make("Gather", {}, [data, ints(0)]).backward([ints(1)], [data, ints(0)], []) == [
        None,
        None,
    ]
    cast = make("Cast", {"to": 7}, [x])
    assert cast.backward([np.ones(2)], [x], cast.forward([x])) == [None]
    assert cast.declares_no_gradient(0)
    assert not make("Cast", {"to": 11}, [x]).declares_no_gradient(0)
    assert make("Equal", {}, [x, y]).no_gradient and make("Shape", {}, [x]).no_gradient
    assert not make("ConstantOfShape", {}, [ints(2)]).differentiable


def test_cast_between_floats_casts_the_gradient_back() -> None:
    x = r(3).astype(np.float32)
    op = make("Cast", {"to": 11}, [x])
    (y,) = op.forward([x])
    assert y.dtype == np.float64
    (dx,) = op.backward([np.full(3, 2.0)], [x], [y])
    assert dx.dtype == np.float32
    np.testing.assert_array_equal(dx, [2.0, 2.0, 2.0])


def desc(shape: tuple[int, ...], dtype: str) -> TensorDescriptor:
    return TensorDescriptor(shape, dtype)


def one_line(op_type: str, attributes: dict[str, Any], inputs: list[Any]) -> str:
    with pytest.raises(UsageError) as info:
        run(op_type, attributes, inputs)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("op_type", "attributes", "inputs", "pattern"),
    [
        ("Gather", {}, [r(3, 2), ints(3)], r"Gather indices hold 3, out of range \[-3, 2\]"),
        ("Gather", {}, [r(3, 2), ints(-4)], r"hold -4, out of range"),
        ("Gather", {"axis": 2}, [r(3, 2), ints(0)], r"Gather axis 2 is out of range.*rank 2"),
        ("Gather", {}, [r(3, 2), np.array([0.0])], r"input 1 \(indices\) must hold integers"),
        ("GatherElements", {"axis": 1}, [r(2, 2), ints(0, 1)], r"must have the rank of data"),
        ("GatherElements", {}, [r(2, 2), np.array([[5, 0]])], r"hold 5, out of range"),
        ("GatherElements", {}, [r(2, 2), np.zeros((2, 3), I64)], r"larger than data"),
        ("Slice", {}, [r(3), ints(0), ints(2), ints(0), ints(0)], r"step for axis 0 is 0"),
        ("Slice", {}, [r(3), ints(0), ints(2), ints(1)], r"axes entry 1 is out of range"),
        ("Slice", {}, [r(3, 3), ints(0, 0), ints(2, 2), ints(0, -2)], r"name an axis twice"),
        ("Slice", {}, [r(3), ints(0, 1), ints(2)], r"must have one length"),
        ("Expand", {}, [r(3, 2), ints(4)], r"Expand shape \[4\] does not broadcast"),
        ("Where", {}, [np.array([1.0]), r(2), r(2)], r"condition\) must hold booleans"),
        ("Where", {}, [np.array([True]), r(2), r(2).astype(np.float32)], r"give all data"),
        ("Equal", {}, [r(2), r(3)], r"does not broadcast"),
        ("Less", {}, [r(2), ints(1)], r"has dtype int64 but earlier inputs have float64"),
        ("Cast", {}, [r(2)], r"Cast needs the attribute to"),
        ("Cast", {"to": 8}, [r(2)], r"Cast to STRING is not supported"),
        ("Cast", {"to": 99}, [r(2)], r"Cast to=99 is not an ONNX element type"),
        ("ConstantOfShape", {}, [ints(2, -1)], r"has a negative size"),
        ("ConstantOfShape", {"value": np.zeros(2)}, [ints(2)], r"value must hold one element"),
        ("ConstantOfShape", {}, [np.array([2.0])], r"must hold integers"),
    ],
)
def test_bad_inputs_give_one_line_errors(op_type, attributes, inputs, pattern) -> None:
    import re

    message = one_line(op_type, attributes, inputs)
    assert re.search(pattern, message), message


def test_data_movers_take_integer_and_boolean_data_but_arithmetic_does_not() -> None:
    from d5_plugin_numpy.backend import NumpyBackend

    backend = NumpyBackend()
    for dtype in ("int64", "int32", "bool"):
        backend.create("Gather", {}, [desc((3,), dtype), desc((2,), "int64")])
        backend.create("Concat", {"axis": 0}, [desc((3,), dtype), desc((2,), dtype)])
    backend.create("Mul", {}, [desc((3,), "int64"), desc((3,), "int64")])
    with pytest.raises(UsageError, match=r"supports float32, float64"):
        backend.create("Relu", {}, [desc((3,), "int64")])
    with pytest.raises(UsageError, match=r"Mul takes float32, float64, int8"):
        backend.create("Mul", {}, [desc((3,), "bool"), desc((3,), "bool")])


def test_integer_division_truncates_toward_zero() -> None:
    a, b = ints(7, -7, 7, -7), ints(2, 2, -2, -2)
    (q,) = run("Div", {}, [a, b])
    np.testing.assert_array_equal(q, onnx_forward("Div", {}, [a, b])[0])
    np.testing.assert_array_equal(q, [3, -3, -3, 3])
    assert "integer zero" in one_line("Div", {}, [a, ints(0)])
