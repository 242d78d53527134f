"""The backend as d5 sees it: registration, creation, errors, dtypes."""

from __future__ import annotations

import numpy as np
import pytest
from d5_plugin_numpy.backend import NumpyBackend
from numpy_ref_support import assert_gradients, cases, make

from d5core.api import (
    OperatorBackend,
    TensorDescriptor,
    UsageError,
    compare_outputs,
    get_plugin_manager,
)
from d5core.testing.kernel import reset_plugin_manager

CASES = [
    pytest.param(op_type, attrs, inputs, id=f"{op_type}-{i}")
    for op_type, entries in cases().items()
    for i, (attrs, inputs) in enumerate(entries)
]


def desc(*shape: int, dtype: str = "float32") -> TensorDescriptor:
    return TensorDescriptor(tuple(shape), dtype)


def test_backend_is_registered_in_the_operators_group() -> None:
    reset_plugin_manager(None)
    try:
        loaded = get_plugin_manager().load("d5.operators", "numpy")
    finally:
        reset_plugin_manager(None)
    assert loaded is NumpyBackend
    assert issubclass(loaded, OperatorBackend)
    assert NumpyBackend.name == "numpy"
    assert NumpyBackend.dtypes == ("float32", "float64")


def test_every_supported_operator_has_a_test_case() -> None:
    assert set(NumpyBackend().supported()) == set(cases())


@pytest.mark.parametrize(("op_type", "attrs", "inputs"), CASES)
def test_backward_matches_central_differences(op_type, attrs, inputs) -> None:
    assert_gradients(op_type, attrs, inputs)


@pytest.mark.parametrize(("op_type", "attrs", "inputs"), CASES)
def test_float32_matches_float64(op_type, attrs, inputs) -> None:
    def to32(x: np.ndarray) -> np.ndarray:
        return x.astype(np.float32) if x.dtype == np.float64 else x

    inputs32 = [to32(x) for x in inputs]
    op32 = make(op_type, attrs, inputs32)
    out32 = op32.forward(inputs32)
    out64 = make(op_type, attrs, inputs).forward(inputs)
    for y, y64 in zip(out32, out64, strict=True):
        if op_type in ("Cast", "ConstantOfShape"):  # the output type is an attribute
            assert y.dtype == y64.dtype
        else:
            assert y.dtype in (np.float32, np.bool_, np.int64), y.dtype
    checks = compare_outputs(out32, [y if op_type == "Cast" else to32(y) for y in out64])
    assert all(c.passed for c in checks), [c.detail for c in checks]
    if not op32.differentiable:
        return
    grads = [np.ones_like(y, dtype=np.float32) for y in out32]
    g32 = op32.backward(grads, inputs32, out32)
    g64 = make(op_type, attrs, inputs).backward(
        [g.astype(np.float64) for g in grads], inputs, out64
    )
    for a, e in zip(g32, g64, strict=True):
        assert (a is None) == (e is None)
        if a is not None:
            assert a.dtype == np.float32
            (check,) = compare_outputs([a], [e.astype(np.float32)])
            assert check.passed, check.detail


def one_line_error(op_type, attributes, inputs) -> str:
    with pytest.raises(UsageError) as info:
        NumpyBackend().create(op_type, attributes, inputs)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_operator_names_it_and_lists_the_supported() -> None:
    message = one_line_error("Convolution", {}, [desc(1, 1, 3, 3)])
    assert "'Convolution'" in message
    assert "Conv, ConvTranspose" in message


def test_unsupported_dtype_names_input_and_dtypes() -> None:
    message = one_line_error("Relu", {}, [desc(2, 3, dtype="int8")])
    assert "input 0 (X)" in message and "int8" in message and "float32, float64" in message


def test_mixed_float_dtypes_are_refused() -> None:
    message = one_line_error("Add", {}, [desc(2), desc(2, dtype="float64")])
    assert "input 1 (B)" in message


def test_integer_input_must_hold_integers() -> None:
    message = one_line_error("Reshape", {}, [desc(2, 3), desc(2)])
    assert "input 1 (shape)" in message and "integers" in message


@pytest.mark.parametrize(
    ("op_type", "attrs", "inputs", "expected"),
    [
        ("Conv", {}, [desc(2, 3, 5), desc(4, 3)], "input 1 (W) must have rank 3"),
        ("Conv", {}, [desc(3, 5), desc(4, 3, 2)], "input 0 (X) must have rank 3 or more"),
        ("Conv", {"group": 2}, [desc(1, 4, 5), desc(4, 1, 3)], "(M, 2, ...)"),
        ("Conv", {}, [desc(1, 3, 2), desc(4, 3, 5)], "does not fit spatial axis 0"),
        ("Conv", {}, [desc(1, 3, 6), desc(4, 3, 2), desc(3)], "input 2 (B) must have shape (4,)"),
        ("Gemm", {}, [desc(2, 3), desc(4, 5)], "input 1 (B) has shape (4, 5)"),
        ("Gemm", {}, [desc(2, 3), desc(3, 5), desc(3, 5)], "does not broadcast to (2, 5)"),
        ("MatMul", {}, [desc(2, 3), desc(4, 5)], "must be 3"),
        ("Add", {}, [desc(2, 3), desc(4)], "input 1 (B) has shape (4,)"),
        ("MaxPool", {"kernel_shape": [2, 2]}, [desc(1, 2, 5)], "must have rank 4"),
        (
            "BatchNormalization",
            {},
            [desc(2, 3), desc(3), desc(3), desc(4), desc(3)],
            "input 3 (input_mean) must have shape (3,)",
        ),
        ("Concat", {"axis": 0}, [desc(2, 3), desc(2, 4)], "input 1 (inputs) has shape (2, 4)"),
        (
            "SoftmaxCrossEntropyLoss",
            {},
            [desc(2, 3), desc(3, dtype="int64")],
            "must have shape (2,)",
        ),
        ("Gemm", {}, [desc(2, 3)], "Gemm takes 2 to 3 inputs"),
    ],
)
def test_impossible_shapes_name_the_input_and_the_expectation(
    op_type, attrs, inputs, expected
) -> None:
    assert expected in one_line_error(op_type, attrs, inputs)


@pytest.mark.parametrize(
    ("op_type", "attrs", "expected"),
    [
        ("Conv", {"padding": [1, 1]}, "has no attribute 'padding'"),
        ("Conv", {"auto_pad": "SAME"}, "auto_pad must be one of"),
        ("MaxPool", {}, "needs the attribute kernel_shape"),
        ("Dropout", {"ratio": 1.0}, "ratio must lie in [0, 1)"),
        ("SoftmaxCrossEntropyLoss", {"reduction": "avg"}, "reduction must be one of"),
    ],
)
def test_bad_attributes_are_one_line_usage_errors(op_type, attrs, expected) -> None:
    assert expected in one_line_error(op_type, attrs, [desc(1, 1, 4, 4)])


def test_attributes_as_onnx_stores_them_are_accepted() -> None:
    x = np.arange(8.0).reshape(1, 1, 8)
    op = make("AveragePool", {"kernel_shape": np.array([2]), "auto_pad": b"VALID"}, [x])
    np.testing.assert_allclose(op.forward([x])[0], (x[..., :-1] + x[..., 1:]) / 2)


def test_operator_created_for_float32_also_runs_float64() -> None:
    x = np.linspace(-1, 1, 6).reshape(2, 3)
    op = make("Tanh", {}, [x.astype(np.float32)])
    assert op.forward([x])[0].dtype == np.float64
