"""The native kernels give the reference's NaN and infinity (issue 28, section 4): Relu
passes NaN through, MaxPool's window maximum (and its index, and the backward's choice of
tap) is the first NaN wherever it lies in the window, and Gemm computes ``alpha * A B +
beta * C`` as numpy does even when alpha or beta is 0 (0 times NaN or infinity is NaN).
Each case runs on every micro-kernel the CPU has (``using_isa``), in both dtypes, with the
non-finite value first, in the middle and last in its window or row; the sizes reach the
GEMM's full register tiles, its edge tiles and the vectorized loops' remainders."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from d5_kernels import runtime
from d5_kernels.operators import NativeBackend

from d5core.api import TensorDescriptor, compare_outputs
from d5core.testing.operator_agreement import reference_backend

NATIVE = NativeBackend()
DTYPES = pytest.mark.parametrize("dtype", ["float32", "float64"])
VALUES = pytest.mark.parametrize(
    "value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"]
)
PLACES = pytest.mark.parametrize("place", ["first", "middle", "last"])


def _at(place: str, size: int) -> int:
    return {"first": 0, "middle": size // 2, "last": size - 1}[place]


def _forward(backend: Any, op: str, attributes: dict[str, Any], xs: Sequence[np.ndarray]):
    descriptors = [TensorDescriptor.of(x) for x in xs]
    with np.errstate(invalid="ignore"):
        return backend.create(op, attributes, descriptors).forward(list(xs))


def _assert_same(op: str, attributes: dict[str, Any], xs: Sequence[np.ndarray], isa: str) -> list:
    """The native outputs equal the reference's: the same non-finite values in the same
    places, the finite ones within d5's tolerances."""
    want = _forward(reference_backend(), op, attributes, xs)
    with runtime.using_isa(isa):
        got = _forward(NATIVE, op, attributes, xs)
    checks = compare_outputs(got, want, allow_nonfinite=True)
    assert all(c.passed for c in checks), [c.detail for c in checks if not c.passed]
    return got


@DTYPES
@VALUES
@PLACES
@pytest.mark.parametrize("size", [7, 1029])
def test_relu_passes_nan_and_infinity_through(isa, dtype, value, place, size) -> None:
    x = np.linspace(-2.0, 2.0, size).astype(dtype)
    x[_at(place, size)] = value
    (y,) = _assert_same("Relu", {}, [x], isa)
    want = value if value > 0 or math.isnan(value) else 0.0
    assert np.array_equal(y[_at(place, size)], want, equal_nan=True)


@DTYPES
@VALUES
@PLACES
@pytest.mark.parametrize("pads", [[0, 0, 0, 0], [1, 1, 0, 1]])
def test_max_pool_takes_the_first_nan_anywhere_in_the_window(isa, dtype, value, place, pads):
    rng = np.random.default_rng(5)
    x = (rng.permutation(2 * 3 * 7 * 7) * 0.1).reshape(2, 3, 7, 7).astype(dtype)
    # the tap at `place` of the window of output (1, 1) (3x3 windows, strides 2)
    r, c = 2 + _at(place, 3), 2 + _at(place, 3)
    x[1, 2, r, c] = value
    attributes = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": pads}
    y, _ = _assert_same("MaxPool", attributes, [x], isa)  # Y and Indices
    if not math.isinf(value):
        assert np.isnan(y[1, 2]).any()
    grads = _max_pool_backward(x, attributes, isa)
    assert np.array_equal(grads[0], grads[1]), "the backward chose another tap than numpy"


def _max_pool_backward(x: np.ndarray, attributes: dict[str, Any], isa: str) -> list[np.ndarray]:
    descriptors = [TensorDescriptor.of(x)]
    results = []
    for backend in (NATIVE, reference_backend()):
        op = backend.create("MaxPool", attributes, descriptors)
        with runtime.using_isa(isa), np.errstate(invalid="ignore"):
            outputs = op.forward([x])
            dy = np.arange(1, outputs[0].size + 1, dtype=x.dtype).reshape(outputs[0].shape)
            grads = [np.asarray(dy)] + [np.zeros_like(o) for o in outputs[1:]]
            results.append(np.asarray(op.backward(grads, [x], outputs)[0]))
    return results


@DTYPES
@VALUES
@PLACES
@pytest.mark.parametrize("operand", ["A", "B"])
def test_gemm_with_alpha_zero_keeps_a_nonfinite_product(isa, dtype, value, place, operand):
    rng = np.random.default_rng(6)
    m, k, n = 19, 30, 37  # full register tiles and edge tiles on every ISA
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    c = rng.standard_normal((m, n)).astype(dtype)
    target = a if operand == "A" else b
    target.reshape(-1)[_at(place, target.size)] = value
    for beta in (0.5, 0.0):
        (y,) = _assert_same("Gemm", {"alpha": 0.0, "beta": beta}, [a, b, c], isa)
        assert np.isnan(y).any()  # 0 * (a row or column holding NaN or infinity) is NaN


@DTYPES
@VALUES
@PLACES
@pytest.mark.parametrize("c_shape", [(19, 37), (37,), (19, 1)])
def test_gemm_with_beta_zero_keeps_a_nonfinite_c(isa, dtype, value, place, c_shape) -> None:
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((19, 30)).astype(dtype), rng.standard_normal((30, 37)).astype(dtype)
    c = rng.standard_normal(c_shape).astype(dtype)
    c.reshape(-1)[_at(place, c.size)] = value
    for alpha in (1.0, 0.0):
        (y,) = _assert_same("Gemm", {"alpha": alpha, "beta": 0.0}, [a, b, c], isa)
        assert np.isnan(y).any()


@DTYPES
@VALUES
@PLACES
def test_gemm_propagates_a_nonfinite_operand_through_the_packed_kernel(isa, dtype, value, place):
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((19, 30)).astype(dtype), rng.standard_normal((30, 37)).astype(dtype)
    b.reshape(-1)[_at(place, b.size)] = value
    _assert_same("Gemm", {"alpha": 0.5, "beta": 1.0}, [a, b], isa)
