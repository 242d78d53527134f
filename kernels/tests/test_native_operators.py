"""Every native operator, forward and backward, in float32 and float64, against d5's numpy
reference: hypothesis draws shapes and attributes and :func:`validate_operator` compares
outputs and gradients with the reference's and checks the backward by central
differences in float64. Data stays away from kinks (ReLU at 0, ties in a max-pooling
window). ``D5_PROPERTY_EXAMPLES`` raises the number of examples."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from d5_kernels.operators import NativeBackend
from d5_plugin_numpy import backend as reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from d5core.levels.operators import TensorDescriptor
from d5core.runners import operators as runner
from d5core.validate import validate_operator
from d5core.workloads import problems

NATIVE = NativeBackend()
NUMPY = reference.NumpyBackend()
EXAMPLES = int(os.environ.get("D5_PROPERTY_EXAMPLES", "8"))
DTYPES = pytest.mark.parametrize("dtype", ["float32", "float64"])
AUTO_PADS = ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]

Case = Callable[[st.DataObject, str], None]


def check_property(case: Case, dtype: str) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        case(data, dtype)

    run()


def assert_matches_reference(
    op_type: str, attributes: Mapping[str, Any], inputs: Sequence[np.ndarray], dtype: str
) -> None:
    arrays = [np.asarray(x, dtype=dtype) for x in inputs]
    descriptors = [TensorDescriptor.of(a) for a in arrays]
    candidate = NATIVE.create(op_type, attributes, descriptors)
    expected = NUMPY.create(op_type, attributes, descriptors)
    report = validate_operator(candidate, expected, arrays)
    problem = f"{op_type} {dict(attributes)} on {[a.shape for a in arrays]} ({dtype})"
    assert report.passed, f"{problem}: " + "; ".join(report.failures())
    assert report.outputs, problem
    compared = [g for g in report.gradients if g.method == "reference" and not g.skipped]
    checked = [g for g in report.gradients if g.method != "reference" and not g.skipped]
    assert compared and checked, f"{problem}: no gradient was compared or checked"


def rng_of(data: st.DataObject) -> np.random.Generator:
    return np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))


def small(n: int) -> st.SearchStrategy[int]:
    return st.integers(1, n)


def distinct(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    """Values 0.1 apart, so that no pooling window holds a tie."""
    n = math.prod(shape)
    return (rng.permutation(n) * 0.1 - n * 0.05).reshape(tuple(shape))


def broadcastable(data: st.DataObject, full: Sequence[int]) -> tuple[int, ...]:
    rank = data.draw(st.integers(0, len(full)))
    suffix = full[len(full) - rank :]
    return tuple(1 if data.draw(st.booleans()) else d for d in suffix)


def gemm_case(data: st.DataObject, dtype: str) -> None:
    m, k, n = data.draw(small(9)), data.draw(small(9)), data.draw(small(9))
    trans_a, trans_b = data.draw(st.booleans()), data.draw(st.booleans())
    attributes = {
        "alpha": data.draw(st.sampled_from([1.0, 0.5, -2.0])),
        "beta": data.draw(st.sampled_from([1.0, 0.25, 0.0])),
        "transA": int(trans_a),
        "transB": int(trans_b),
    }
    c_shape = data.draw(st.sampled_from([None, (m, n), (n,), (1, n), (m, 1), ()]))
    rng = rng_of(data)
    inputs = [
        rng.standard_normal((k, m) if trans_a else (m, k)),
        rng.standard_normal((n, k) if trans_b else (k, n)),
    ]
    if c_shape is not None:
        inputs.append(rng.standard_normal(c_shape))
    assert_matches_reference("Gemm", attributes, inputs, dtype)


def matmul_case(data: st.DataObject, dtype: str) -> None:
    k = data.draw(small(5))
    batch = data.draw(st.lists(small(3), max_size=2))
    a_vector, b_vector = data.draw(st.booleans()), data.draw(st.booleans())
    a = (k,) if a_vector else (*broadcastable(data, batch), data.draw(small(4)), k)
    b = (k,) if b_vector else (*broadcastable(data, batch), k, data.draw(small(4)))
    rng = rng_of(data)
    inputs = [rng.standard_normal(a), rng.standard_normal(b)]
    assert_matches_reference("MatMul", {}, inputs, dtype)


def conv_case(data: st.DataObject, dtype: str) -> None:
    group = data.draw(small(2))
    c, m = group * data.draw(small(2)), group * data.draw(small(2))
    kernel = [data.draw(small(3)) for _ in range(2)]
    strides = [data.draw(small(2)) for _ in range(2)]
    dilations = [data.draw(small(2)) for _ in range(2)]
    attributes: dict[str, Any] = {
        "auto_pad": data.draw(st.sampled_from(AUTO_PADS)),
        "group": group,
        "strides": strides,
        "dilations": dilations,
        "kernel_shape": kernel,
    }
    if attributes["auto_pad"] == "NOTSET":
        attributes["pads"] = [data.draw(st.integers(0, 2)) for _ in range(4)]
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    sizes = [e + data.draw(st.integers(0, 3)) for e in extents]
    rng = rng_of(data)
    inputs = [
        rng.standard_normal((data.draw(small(3)), c, *sizes)),
        rng.standard_normal((m, c // group, *kernel)),
    ]
    if data.draw(st.booleans()):
        inputs.append(rng.standard_normal((m,)))
    assert_matches_reference("Conv", attributes, inputs, dtype)


def pool_problem(data: st.DataObject) -> tuple[dict[str, Any], list[int]]:
    """Attributes and an input shape; pads stay within the dilated kernel's reach so
    that no window lies wholly in padding."""
    kernel = [data.draw(small(3)) for _ in range(2)]
    strides = [data.draw(small(3)) for _ in range(2)]
    dilations = [data.draw(small(2)) for _ in range(2)]
    attributes: dict[str, Any] = {
        "kernel_shape": kernel,
        "strides": strides,
        "dilations": dilations,
        "auto_pad": data.draw(st.sampled_from(AUTO_PADS)),
        "ceil_mode": int(data.draw(st.booleans())),
    }
    if attributes["auto_pad"] == "NOTSET":
        reach = [(k - 1) * d for k, d in zip(kernel, dilations, strict=True)] * 2
        attributes["pads"] = [data.draw(st.integers(0, min(r, 2))) for r in reach]
    sizes = [
        (k - 1) * d + 1 + data.draw(st.integers(0, 3))
        for k, d in zip(kernel, dilations, strict=True)
    ]
    return attributes, [data.draw(small(2)), data.draw(small(3)), *sizes]


def max_pool_case(data: st.DataObject, dtype: str) -> None:
    attributes, shape = pool_problem(data)
    attributes["storage_order"] = int(data.draw(st.booleans()))
    assert_matches_reference("MaxPool", attributes, [distinct(rng_of(data), shape)], dtype)


def average_pool_case(data: st.DataObject, dtype: str) -> None:
    attributes, shape = pool_problem(data)
    attributes["count_include_pad"] = int(data.draw(st.booleans()))
    inputs = [rng_of(data).standard_normal(shape)]
    assert_matches_reference("AveragePool", attributes, inputs, dtype)


def relu_case(data: st.DataObject, dtype: str) -> None:
    shape = data.draw(st.lists(small(5), max_size=3))
    x = rng_of(data).standard_normal(shape)
    assert_matches_reference("Relu", {}, [np.where(x >= 0, x + 0.1, x - 0.1)], dtype)


def softmax_case(data: st.DataObject, dtype: str) -> None:
    shape = data.draw(st.lists(small(5), min_size=1, max_size=3))
    attributes = {}
    if data.draw(st.booleans()):
        attributes["axis"] = data.draw(st.integers(-len(shape), len(shape) - 1))
    inputs = [rng_of(data).standard_normal(shape) * 3]
    assert_matches_reference("Softmax", attributes, inputs, dtype)


def batch_normalization_case(data: st.DataObject, dtype: str) -> None:
    c = data.draw(small(3))
    shape = [data.draw(small(3)), c, *data.draw(st.lists(small(3), max_size=2))]
    attributes = {
        "training_mode": int(data.draw(st.booleans())),
        "momentum": data.draw(st.sampled_from([0.9, 0.5, 0.0])),
        "epsilon": data.draw(st.sampled_from([1e-5, 1e-2])),
    }
    rng = rng_of(data)
    positive = rng.uniform(0.5, 1.5, (2, c))
    inputs = [
        rng.standard_normal(shape),
        positive[0],
        rng.standard_normal(c),
        rng.standard_normal(c),
        positive[1],
    ]
    assert_matches_reference("BatchNormalization", attributes, inputs, dtype)


CASES: dict[str, Case] = {
    "Gemm": gemm_case,
    "MatMul": matmul_case,
    "Conv": conv_case,
    "Relu": relu_case,
    "Softmax": softmax_case,
    "MaxPool": max_pool_case,
    "AveragePool": average_pool_case,
    "BatchNormalization": batch_normalization_case,
}


@DTYPES
@pytest.mark.parametrize("op_type", list(CASES))
def test_operator_matches_the_reference(op_type: str, dtype: str) -> None:
    check_property(CASES[op_type], dtype)


def test_every_operator_of_the_backend_has_a_property() -> None:
    assert set(NATIVE.supported()) == set(CASES)


@DTYPES
def test_d5_validates_every_default_problem(dtype: str) -> None:
    """The path of ``d5 validate op OP --backend native``: the backend loaded by name
    from the ``d5.operators`` group, each operator's default problem, the numpy
    reference."""
    failed = {}
    for op_type in NATIVE.supported():
        result = runner.validate_op(problems.DEFAULT_PROBLEMS[op_type], "native", dtype=dtype)
        assert result.against == "numpy"
        if not result.passed:
            failed[op_type] = result.report.failures()
    assert not failed


def test_the_cli_validates_conv_in_float64() -> None:
    d5 = Path(sys.executable).with_name("d5")
    done = subprocess.run(
        [str(d5), "validate", "op", "Conv", "--backend", "native", "--dtype", "float64", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"passed": true' in done.stdout


@pytest.mark.parametrize(
    ("op_type", "attributes", "shapes"),
    [
        ("Conv", {"group": 2, "pads": [1, 0, 0, 2]}, [(2, 4, 5, 5), (6, 2, 3, 2), (6,)]),
        ("Conv", {"strides": [2, 3], "dilations": [2, 1]}, [(1, 3, 9, 10), (5, 3, 3, 3)]),
        ("Conv", {}, [(3, 8, 4, 4), (5, 8, 1, 1), (5,)]),
        (
            "AveragePool",
            {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
            [(2, 2, 5, 5)],
        ),
        ("MaxPool", {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}, [(1, 2, 6, 5)]),
        ("MatMul", {}, [(2, 1, 3, 4), (3, 4, 5)]),
    ],
    ids=lambda v: str(v) if isinstance(v, str) else "",
)
def test_fixed_cases_match_the_reference(
    op_type: str, attributes: dict[str, Any], shapes: list[Any]
) -> None:
    """Grouped and asymmetric-padded, strided and dilated, and pointwise (1x1, the path
    that skips im2col) convolutions; pools with count_include_pad and ceil_mode; a
    MatMul broadcasting both operands."""
    rng = np.random.default_rng(0)
    inputs = [distinct(rng, s) if op_type == "MaxPool" else rng.standard_normal(s) for s in shapes]
    assert_matches_reference(op_type, attributes, inputs, "float64")


@DTYPES
def test_conv_split_into_column_blocks_matches_the_reference(dtype: str) -> None:
    """Enough taps (64 channels x 3 x 3) and outputs (40 x 25) that im2col runs in
    blocks of 512 output columns, which end mid-row (the output rows are 25 wide)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 64, 40, 49)).astype(dtype)
    w = rng.standard_normal((6, 64, 3, 3)).astype(dtype)
    b = rng.standard_normal(6).astype(dtype)
    attributes = {"pads": [1, 1, 1, 1], "strides": [1, 2]}
    descriptors = [TensorDescriptor.of(a) for a in (x, w, b)]
    got = NATIVE.create("Conv", attributes, descriptors).forward([x, w, b])[0]
    want = NUMPY.create("Conv", attributes, descriptors).forward([x, w, b])[0]
    assert got.shape == want.shape == (2, 6, 40, 25)
    np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == "float32" else 1e-12, atol=1e-4)
