"""The torch operators that transformers need, on fixed cases, against the numpy reference.

Each case goes through :func:`d5core.validate.validate_operator` (outputs and backward
compared with the reference, backward checked by central differences in float64), in
float32 and float64, and covers what the hypothesis properties of the shared kit may
not: int32 and int64 indices, negative ones, bool conditions and outputs, the axes of a
reduction as an attribute or an input, negative Slice steps, and the one-line errors for
bad inputs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from d5_plugin_torch.operators import TorchBackend

from d5core.api import TensorDescriptor, UsageError, validate_operator
from d5core.testing.operator_agreement import (
    assert_agrees_with_reference,
    assert_refused,
    reference_backend,
)

BACKEND = TorchBackend()
DTYPES = ("float32", "float64")


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Tiny tensors gain nothing from threads on a shared 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _rng() -> np.random.Generator:
    return np.random.default_rng(5)


def _f(*shape: int) -> np.ndarray:
    return _rng().standard_normal(shape)


def _pos(*shape: int) -> np.ndarray:
    return _rng().uniform(0.5, 2.0, shape)


def _distinct(*shape: int) -> np.ndarray:
    n = int(np.prod(shape))
    return (_rng().permutation(n) * 0.25 - n * 0.1).reshape(shape)


def _cast(inputs: Sequence[Any], dtype: str) -> list[np.ndarray]:
    return [
        np.asarray(x, dtype=dtype) if np.asarray(x).dtype.kind == "f" else np.asarray(x)
        for x in inputs
    ]


def _outputs_agree(
    op_type: str,
    attributes: Mapping[str, Any],
    inputs: Sequence[Any],
    dtype: str,
    *,
    gradcheck: bool = True,
) -> list[np.ndarray]:
    """Validate a problem whose gradients the reference may not give (bool or integer
    outputs, no floating input): every output must match, every check must pass.
    Returns torch's outputs. ``gradcheck=False`` where the outputs are floating but not
    float64 for float64 inputs, which the gradient check refuses."""
    arrays = _cast(inputs, dtype)
    descriptors = [TensorDescriptor.of(a) for a in arrays]
    candidate = BACKEND.create(op_type, attributes, descriptors)
    expected = reference_backend().create(op_type, attributes, descriptors)
    report = validate_operator(candidate, expected, arrays, gradcheck=gradcheck)
    assert report.passed, "; ".join(report.failures())
    assert report.outputs and all(c.passed for c in report.outputs)
    return candidate.forward(arrays)


# -- cases with gradients: outputs, backward and central differences -------------------

#: (operator, attributes, inputs) whose floating inputs all have gradients.
GRADIENT_CASES: list[tuple[str, dict[str, Any], list[Any]]] = [
    ("Gather", {}, [_f(5, 3), np.array([[0, 4], [2, 2]], np.int64)]),
    ("Gather", {"axis": 1}, [_f(2, 4, 3), np.array([3, -1, 0], np.int32)]),
    ("Gather", {"axis": -1}, [_f(2, 4), np.array(-2, np.int64)]),
    ("GatherElements", {"axis": 1}, [_f(3, 4), np.array([[0, 3], [1, -1], [2, 2]])]),
    ("GatherElements", {}, [_f(3, 2), np.array([[2, 0], [1, 1]], np.int32)]),
    ("Slice", {}, [_f(5, 6), np.array([1, -4]), np.array([4, 100])]),
    (
        "Slice",
        {},
        [_f(4, 6, 3), np.array([-1, 5]), np.array([-100, 0]), np.array([0, 1]), np.array([-2, -2])],
    ),
    (
        "Slice",
        {},
        [_f(4, 5), np.array([0]), np.array([9]), np.array([-1]), np.array([2], np.int32)],
    ),
    ("Expand", {}, [_f(3, 1), np.array([2, 1, 4])]),
    ("Expand", {}, [_f(2, 3), np.array([3])]),
    ("Where", {}, [np.array([[True, False, True]]), _f(2, 3), _f(2, 1)]),
    ("Where", {}, [np.array(False), _f(3), _f(2, 3)]),
    ("Cast", {"to": 11}, [_f(2, 3)]),
    ("Cast", {"to": 1}, [_f(2, 3)]),
    ("Pow", {}, [_pos(2, 3), _f(3)]),
    ("Pow", {}, [_pos(3), np.array(2.0)]),
    ("Sqrt", {}, [_pos(2, 3)]),
    ("Erf", {}, [_f(2, 3)]),
    ("Exp", {}, [_f(2, 3)]),
    ("Log", {}, [_pos(4)]),
    ("Gelu", {}, [_f(3, 4)]),
    ("Gelu", {"approximate": "tanh"}, [_f(3, 4)]),
    ("ReduceMean", {"axes": [1]}, [_f(2, 3, 4)]),
    ("ReduceMean", {"keepdims": 0}, [_f(2, 3, 4), np.array([0, -1])]),
    ("ReduceMean", {}, [_f(2, 3)]),
    ("ReduceSum", {}, [_f(2, 3, 4), np.array([-2])]),
    ("ReduceSum", {"keepdims": 0}, [_f(2, 3)]),
    ("ReduceSum", {"noop_with_empty_axes": 1}, [_f(2, 3)]),
    ("ReduceSum", {"noop_with_empty_axes": 1}, [_f(2, 3), np.array([], np.int64)]),
    ("ReduceMax", {"axes": [0, 2], "keepdims": 0}, [_distinct(2, 3, 4)]),
    ("ReduceMax", {}, [_distinct(3, 4), np.array([1])]),
    ("LayerNormalization", {}, [_f(2, 3, 4), _f(4), _f(4)]),
    ("LayerNormalization", {"axis": 1, "epsilon": 1e-3}, [_f(2, 3, 4), _f(3, 4)]),
    ("LayerNormalization", {"axis": -2}, [_f(2, 3, 4), _f(1, 4), _f(3, 1)]),
    ("LayerNormalization", {"axis": 0}, [_f(1, 2, 2), np.array(1.5), _f(1, 2, 2)]),
    ("MatMul", {}, [_f(2, 1, 3, 4), _f(5, 4, 2)]),
    ("MatMul", {}, [_f(4), _f(2, 4, 3)]),
    ("MatMul", {}, [_f(2, 3, 4), _f(4)]),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("op_type", "attributes", "inputs"),
    GRADIENT_CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(GRADIENT_CASES)],
)
def test_operator_agrees_with_the_reference(
    op_type: str, attributes: dict[str, Any], inputs: list[Any], dtype: str
) -> None:
    if op_type == "Cast" and attributes["to"] != 11:
        # A cast to float32 gives float32 outputs for the float64 inputs of the
        # gradient check, which refuses them: only the comparison with the reference.
        report = _report("Cast", attributes, inputs, dtype, gradcheck=False)
        assert report.passed, report.failures()
        assert [g.method for g in report.gradients if not g.skipped] == ["reference"]
        return
    assert_agrees_with_reference(BACKEND, op_type, attributes, inputs, dtype)


def _report(
    op_type: str,
    attributes: Mapping[str, Any],
    inputs: Sequence[Any],
    dtype: str,
    **kwargs: Any,
) -> Any:
    arrays = _cast(inputs, dtype)
    descriptors = [TensorDescriptor.of(a) for a in arrays]
    candidate = BACKEND.create(op_type, attributes, descriptors)
    expected = reference_backend().create(op_type, attributes, descriptors)
    return validate_operator(candidate, expected, arrays, **kwargs)


# -- bool, integer and constant results ------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op_type", ["Equal", "Less", "Greater"])
def test_comparisons_give_bool_and_no_gradient(op_type: str, dtype: str) -> None:
    a = np.array([[0.5, -1.0, 2.0], [3.0, 0.25, -2.0]])
    b = np.array([0.5, 1.0, -2.0])
    out = _outputs_agree(op_type, {}, [a, b], dtype)
    assert out[0].dtype == np.bool_
    expected = {"Equal": a == b, "Less": a < b, "Greater": a > b}[op_type]
    np.testing.assert_array_equal(out[0], expected)
    op = BACKEND.create(op_type, {}, [TensorDescriptor.of(x) for x in _cast([a, b], dtype)])
    grads = op.backward([np.zeros((2, 3), bool)], _cast([a, b], dtype))
    assert len(grads) == 2 and all(g is None or not g.any() for g in grads)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({}, [2, 3, 4]),
        ({"start": 1}, [3, 4]),
        ({"start": -2, "end": -1}, [3]),
        ({"end": 9}, [2, 3, 4]),
    ],
)
def test_shape_gives_int64(attributes: dict[str, Any], expected: list[int], dtype: str) -> None:
    out = _outputs_agree("Shape", attributes, [_f(2, 3, 4)], dtype)
    assert out[0].dtype == np.int64
    assert out[0].tolist() == expected


@pytest.mark.parametrize(
    ("value", "dtype"),
    [(None, "float32"), (np.array([1.5]), "float64"), (np.array([7], np.int64), "int64")],
)
def test_constant_of_shape_fills_with_the_value_in_its_type(value: Any, dtype: str) -> None:
    attributes = {} if value is None else {"value": value}
    out = _outputs_agree("ConstantOfShape", attributes, [np.array([2, 3])], "float32")
    assert out[0].dtype == np.dtype(dtype) and out[0].shape == (2, 3)
    assert (out[0] == (0 if value is None else value[0])).all()


def test_constant_of_shape_takes_the_value_as_an_onnx_tensor() -> None:
    from onnx import numpy_helper

    value = numpy_helper.from_array(np.array([3], np.int32))
    out = _outputs_agree("ConstantOfShape", {"value": value}, [np.array([2])], "float32")
    assert out[0].dtype == np.int32 and out[0].tolist() == [3, 3]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("to", "result"), [(7, "int64"), (6, "int32"), (9, "bool"), (10, "float16")]
)
def test_cast_to_other_types(to: int, result: str, dtype: str) -> None:
    x = np.array([[1.7, -2.5, 0.0], [3.2, -0.4, 5.0]])
    out = _outputs_agree("Cast", {"to": to}, [x], dtype, gradcheck=result != "float16")
    assert out[0].dtype == np.dtype(result)


def test_cast_to_an_integer_has_no_gradient() -> None:
    x = np.array([1.5, -2.5], np.float32)
    op = BACKEND.create("Cast", {"to": 7}, [TensorDescriptor.of(x)])
    assert op.declares_no_gradient(0)
    assert op.backward([np.zeros(2, np.int64)], [x]) == [None]


def test_gather_wraps_negative_indices_of_either_width() -> None:
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    for dtype in (np.int32, np.int64):
        idx = np.array([-1, 0, -4], dtype)
        op = BACKEND.create("Gather", {}, [TensorDescriptor.of(x), TensorDescriptor.of(idx)])
        np.testing.assert_array_equal(op.forward([x, idx])[0], x[[3, 0, 0]])


def test_slice_with_negative_steps_matches_python_slicing() -> None:
    x = np.arange(30, dtype=np.float64).reshape(5, 6)
    inputs = [x, np.array([4, -1]), np.array([0, -7]), np.array([0, 1]), np.array([-2, -3])]
    op = BACKEND.create("Slice", {}, [TensorDescriptor.of(a) for a in inputs])
    np.testing.assert_array_equal(op.forward(inputs)[0], x[4:0:-2, 5::-3])


def test_layer_normalization_returns_mean_and_inverse_std() -> None:
    x = _f(2, 3, 4).astype(np.float32)
    scale, bias = _f(3, 4).astype(np.float32), _f(3, 4).astype(np.float32)
    op = BACKEND.create(
        "LayerNormalization", {"axis": 1}, [TensorDescriptor.of(a) for a in (x, scale, bias)]
    )
    y, mean, inv_std = op.forward([x, scale, bias])
    assert mean.shape == inv_std.shape == (2, 1, 1)
    np.testing.assert_allclose(mean.reshape(2), x.reshape(2, -1).mean(1), rtol=1e-5)
    expected = 1 / np.sqrt(x.reshape(2, -1).var(1) + 1e-5)
    np.testing.assert_allclose(inv_std.reshape(2), expected, rtol=1e-4)
    normed = (x - mean) * inv_std
    np.testing.assert_allclose(y, normed * scale + bias, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op_type", ["LayerNormalization", "Gather", "Slice", "ReduceMean"])
def test_prepared_forward_and_backward_match_forward_and_backward(op_type: str) -> None:
    """What d5 times (the prepared callables) gives what forward and backward give."""
    problems: dict[str, list[Any]] = {
        "LayerNormalization": [_f(2, 3, 4), _f(4), _f(4)],
        "Gather": [_f(4, 3), np.array([[1, -1]])],
        "Slice": [_f(4, 5), np.array([3]), np.array([0]), np.array([1]), np.array([-1])],
        "ReduceMean": [_f(2, 3), np.array([1])],
    }
    inputs = _cast(problems[op_type], "float32")
    op = BACKEND.create(op_type, {}, [TensorDescriptor.of(a) for a in inputs])
    outputs = op.forward(inputs)
    timed = [t.numpy() for t in op.prepare_forward(inputs)()]
    for got, want in zip(timed, outputs, strict=True):
        np.testing.assert_array_equal(got, want)
    seeds = [np.ones_like(o) for o in outputs]
    grads = op.backward(seeds, inputs)
    timed_grads = [g.numpy() for g in op.prepare_backward(seeds, inputs)()]
    np.testing.assert_allclose(timed_grads[0], grads[0], rtol=1e-6)


# -- one-line errors ---------------------------------------------------------------------

#: (operator, attributes, inputs, pattern of the error when the operator is created)
REFUSED: list[tuple[str, dict[str, Any], list[Any], str]] = [
    ("Gather", {"axis": 2}, [_f(3, 2), np.array([0])], r"axis \[2\] has 2, out of range"),
    ("Gather", {}, [_f(3, 2), np.array([0.5])], r"indices must hold integers"),
    ("GatherElements", {}, [_f(3, 2), np.array([0, 1])], r"must have the rank of data"),
    ("GatherElements", {}, [_f(3, 2), np.zeros((2, 3), np.int64)], r"may not be larger"),
    ("Slice", {}, [_f(3), np.array([0]), np.array([1, 2])], r"one length"),
    ("Where", {}, [np.array([1, 0]), _f(2), _f(2)], r"condition must hold booleans"),
    ("Where", {}, [np.array([True, False]), _f(3), _f(3)], r"do not broadcast"),
    ("Equal", {}, [_f(2), _f(3)], r"do not broadcast"),
    ("Cast", {"to": 8}, [_f(2)], r"to=8 is not an element type"),
    ("Cast", {}, [_f(2)], r"attribute to is required"),
    ("Gelu", {"approximate": "erf"}, [_f(2)], r"approximate must be"),
    ("ReduceSum", {"axes": [0]}, [_f(2, 3), np.array([1])], r"both as an attribute"),
    ("ReduceMean", {"axes": [0, -2]}, [_f(2, 3)], r"names an axis twice"),
    ("ReduceMax", {"axes": [0]}, [np.zeros((0, 3))], r"empty axis"),
    ("LayerNormalization", {}, [_f(2, 3), _f(2)], r"does not broadcast to the normalized"),
    ("LayerNormalization", {"axis": 2}, [_f(2, 3), _f(3)], r"out of range"),
    ("ConstantOfShape", {"value": np.array([1.0, 2.0])}, [np.array([2])], r"one element"),
]


@pytest.mark.parametrize(
    ("op_type", "attributes", "inputs", "pattern"),
    REFUSED,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(REFUSED)],
)
def test_bad_input_is_refused_with_one_line(
    op_type: str, attributes: dict[str, Any], inputs: list[Any], pattern: str
) -> None:
    assert_refused(BACKEND, op_type, attributes, inputs, "float32", pattern)


#: Problems refused only once the values of their integer inputs are known (creating an
#: operator sees descriptors only): (operator, attributes, inputs, pattern).
REFUSED_BY_VALUE: list[tuple[str, dict[str, Any], list[Any], str]] = [
    ("Gather", {}, [_f(3, 2), np.array([3])], r"index 3 is out of range .* \[-3, 2\]"),
    ("GatherElements", {}, [_f(3, 2), np.array([[0], [-4]])], r"index -4 is out of range"),
    ("Slice", {}, [_f(3), np.array([0]), np.array([2]), np.array([0]), np.array([0])], r"nonzero"),
    ("Slice", {}, [_f(3), np.array([0]), np.array([2]), np.array([1])], r"out of range"),
    ("Expand", {}, [_f(2, 3), np.array([4, 3])], r"does not broadcast"),
    ("ReduceMax", {}, [np.zeros((0, 3)), np.array([0])], r"empty axis"),
    ("ReduceSum", {}, [_f(2, 3), np.array([2])], r"out of range for rank 2"),
    ("ConstantOfShape", {}, [np.array([2, -1])], r"negative size"),
]


@pytest.mark.parametrize(
    ("op_type", "attributes", "inputs", "pattern"),
    REFUSED_BY_VALUE,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(REFUSED_BY_VALUE)],
)
def test_bad_values_are_refused_when_run(
    op_type: str, attributes: dict[str, Any], inputs: list[Any], pattern: str
) -> None:
    arrays = _cast(inputs, "float32")
    op = BACKEND.create(op_type, attributes, [TensorDescriptor.of(a) for a in arrays])
    for run in (op.forward, op.prepare_forward):
        with pytest.raises(UsageError, match=f"^{op_type}: .*{pattern}") as excinfo:
            run(arrays)
        assert "\n" not in str(excinfo.value)
