"""Pow, Sqrt, Erf, Exp, Log, Gelu, ReduceMean, ReduceSum and ReduceMax: forward against
onnx.reference (and math.erf), backward against central differences, one-line errors."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
from numpy_onnx_support import onnx_forward
from numpy_ref_support import assert_gradients, make, run

from d5core.api import UsageError

I64 = np.int64
RNG = np.random.default_rng(5)


def r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def pos(*shape: int) -> np.ndarray:
    return RNG.uniform(0.3, 2.5, shape)


def ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=I64)


FORWARD_CASES: list[tuple[str, dict[str, Any], list[Any], int]] = [
    ("Pow", {}, [pos(3, 4), r(4)], 20),
    ("Pow", {}, [r(3, 4), ints(2)], 20),
    ("Pow", {}, [r(2, 3), np.array(3.0)], 20),
    ("Sqrt", {}, [pos(3, 4)], 20),
    ("Erf", {}, [r(3, 4) * 2], 20),
    ("Exp", {}, [r(3, 4)], 20),
    ("Log", {}, [pos(3, 4)], 20),
    ("Gelu", {}, [r(3, 4) * 2], 20),
    ("Gelu", {"approximate": "tanh"}, [r(3, 4) * 2], 20),
    ("ReduceMean", {}, [r(2, 3, 4), ints(1)], 18),
    ("ReduceMean", {"keepdims": 0}, [r(2, 3, 4), ints(0, -1)], 18),
    ("ReduceMean", {}, [r(2, 3, 4)], 18),
    ("ReduceMean", {"noop_with_empty_axes": 1}, [r(2, 3), ints()], 18),
    ("ReduceMean", {"axes": [1], "keepdims": 0}, [r(2, 3, 4)], 13),
    ("ReduceSum", {"keepdims": 0}, [r(2, 3, 4), ints(-2)], 13),
    ("ReduceSum", {}, [r(2, 3, 4), ints()], 13),
    ("ReduceSum", {"axes": [0, 2]}, [r(2, 3, 4)], 11),
    ("ReduceSum", {}, [ints(1, 2, 3), ints(0)], 13),
    ("ReduceMax", {}, [r(2, 3, 4), ints(2)], 18),
    ("ReduceMax", {"keepdims": 0}, [r(2, 3, 4)], 18),
    ("ReduceMax", {"axes": [-1], "keepdims": 0}, [r(2, 3)], 13),
]


@pytest.mark.parametrize(
    ("op_type", "attributes", "inputs", "opset"),
    FORWARD_CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(FORWARD_CASES)],
)
def test_forward_matches_onnx_reference(op_type, attributes, inputs, opset) -> None:
    (got,) = run(op_type, attributes, inputs)
    (expected,) = onnx_forward(op_type, attributes, inputs, opset=opset)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    # onnx.reference computes erf and Gelu's constants in float32; d5 in float64 (below)
    rtol, atol = (1e-6, 1e-7) if op_type in ("Erf", "Gelu") else (1e-12, 1e-14)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def test_erf_and_gelu_in_float32_match_float64() -> None:
    x = np.linspace(-4, 4, 41)
    for op_type, attributes in (("Erf", {}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"})):
        (y64,) = run(op_type, attributes, [x])
        (y32,) = run(op_type, attributes, [x.astype(np.float32)])
        assert y32.dtype == np.float32
        np.testing.assert_allclose(y32, y64, rtol=1e-6, atol=1e-7)
    (erf,) = run("Erf", {}, [x])
    np.testing.assert_array_equal(erf, [math.erf(v) for v in x])
    (gelu,) = run("Gelu", {}, [x])
    expected = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x]
    np.testing.assert_allclose(gelu, expected, rtol=1e-15, atol=1e-15)
    (tanh,) = run("Gelu", {"approximate": "tanh"}, [x])
    c = math.sqrt(2 / math.pi)
    expected = [0.5 * v * (1 + math.tanh(c * (v + 0.044715 * v**3))) for v in x]
    np.testing.assert_allclose(tanh, expected, rtol=1e-15, atol=1e-15)


GRADIENT_CASES: list[tuple[str, dict[str, Any], list[Any]]] = [
    ("Pow", {}, [pos(3, 4), r(4)]),
    ("Pow", {}, [pos(3, 1), r(1, 4)]),
    ("Pow", {}, [r(3, 4), ints(3)]),
    ("Sqrt", {}, [pos(3, 4)]),
    ("Erf", {}, [r(3, 4)]),
    ("Exp", {}, [r(3, 4)]),
    ("Log", {}, [pos(3, 4)]),
    ("Gelu", {}, [r(3, 4) * 2]),
    ("Gelu", {"approximate": "tanh"}, [r(3, 4) * 2]),
    ("ReduceMean", {}, [r(2, 3, 4), ints(1)]),
    ("ReduceMean", {"keepdims": 0}, [r(2, 3, 4), ints(0, -1)]),
    ("ReduceMean", {"noop_with_empty_axes": 1}, [r(2, 3)]),
    ("ReduceSum", {"keepdims": 0}, [r(2, 3, 4)]),
    ("ReduceSum", {"axes": [1]}, [r(2, 3, 4)]),
    ("ReduceMax", {}, [r(2, 3, 4), ints(2)]),
    ("ReduceMax", {"keepdims": 0}, [r(2, 3, 4), ints(0, 2)]),
]


@pytest.mark.parametrize(
    ("op_type", "attributes", "inputs"),
    GRADIENT_CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(GRADIENT_CASES)],
)
def test_backward_matches_central_differences(op_type, attributes, inputs) -> None:
    assert_gradients(op_type, attributes, inputs)


def test_pow_exponent_gradient_at_zero_and_negative_bases() -> None:
    x, y = np.array([0.0, 2.0, -2.0]), np.array([2.0, 3.0, 2.0])
    op = make("Pow", {}, [x, y])
    dx, dy = op.backward([np.ones(3)], [x, y], op.forward([x, y]))
    np.testing.assert_allclose(dx, [0.0, 12.0, -4.0])
    assert dy[0] == 0.0 and dy[1] == pytest.approx(8 * math.log(2)) and np.isnan(dy[2])


def test_reduce_max_ties_share_the_gradient_equally() -> None:
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    op = make("ReduceMax", {"keepdims": 0}, [x, ints(1)])
    (dx, none) = op.backward([np.array([6.0, 3.0])], [x, ints(1)], op.forward([x, ints(1)]))
    np.testing.assert_array_equal(dx, [[0, 3, 3], [1, 1, 1]])
    assert none is None


@pytest.mark.parametrize(
    ("op_type", "attributes", "inputs", "pattern"),
    [
        ("ReduceMean", {}, [r(2, 3), ints(2)], r"axes \[2\] are out of range.*\[-2, 1\]"),
        ("ReduceSum", {}, [r(2, 3), ints(1, -1)], r"name an axis twice"),
        ("ReduceSum", {"axes": [0]}, [r(2, 3), ints(1)], r"both as an attribute and as an"),
        ("ReduceMax", {}, [np.zeros((2, 0)), ints(1)], r"has no elements"),
        ("ReduceMean", {}, [r(2, 3), np.array([1.0])], r"input 1 \(axes\) must hold integers"),
        ("Gelu", {"approximate": "fast"}, [r(2)], r"approximate='fast' is not one of"),
        ("Pow", {}, [r(2), r(2).astype(np.float32)], r"give float64 \(X's\) or an integer"),
        ("Sqrt", {}, [ints(4)], r"has dtype int64; the numpy backend supports float32"),
        ("Exp", {"alpha": 1.0}, [r(2)], r"Exp has no attribute 'alpha'"),
    ],
)
def test_bad_inputs_give_one_line_errors(op_type, attributes, inputs, pattern) -> None:
    with pytest.raises(UsageError) as info:
        run(op_type, attributes, inputs)
    message = str(info.value)
    assert "\n" not in message and re.search(pattern, message), message
