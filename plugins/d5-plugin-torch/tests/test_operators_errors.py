"""Bad input gets one line naming what is wrong; the backend is found without torch."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from d5_plugin_torch.operators import TorchBackend
from d5_plugin_torch.ops import Slot, TorchOperator
from d5_plugin_torch.ops._base import Kernel, Signature

from d5core.errors import UsageError
from d5core.levels.operators import TensorDescriptor

TORCH = TorchBackend()


def one_line_error(excinfo: pytest.ExceptionInfo[UsageError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and message.strip() == message and message
    return message


def create(op_type: str, attributes: Mapping[str, Any], shapes: Sequence[Any]) -> TorchOperator:
    """Create from (shape, dtype) pairs or bare shapes (float32)."""
    descriptors = [
        TensorDescriptor(*s) if isinstance(s[-1], str) else TensorDescriptor(tuple(s))
        for s in shapes
    ]
    return TORCH.create(op_type, attributes, descriptors)


def test_unknown_operator_names_it_and_lists_the_supported() -> None:
    with pytest.raises(UsageError) as excinfo:
        create("Einsum", {}, [(2, 3)])
    message = one_line_error(excinfo)
    assert "'Einsum'" in message and "Conv" in message and "MeanSquaredError" in message


@pytest.mark.parametrize(
    ("op_type", "attributes", "shapes", "expected"),
    [
        ("Conv", {}, [(2, 3), (4, 3, 3)], "input X must have rank 3, 4 or 5"),
        ("Conv", {}, [(1, 3, 5), (4, 3, 3, 3)], "input W must have rank 3"),
        ("Conv", {}, [(1, 4, 5), (2, 3, 3)], "input X has 4 channels, but W expects 3"),
        ("Conv", {}, [(1, 3, 5), (2, 3, 3), (3,)], "input B must have shape (2,)"),
        ("Gemm", {}, [(2, 3, 1), (3, 4)], "input A must have rank 2"),
        ("Gemm", {"transB": 1}, [(2, 3), (3, 4)], "inner dimensions differ"),
        ("Gemm", {}, [(2, 3), (3, 4), (3, 4)], "input C of shape (3, 4) does not broadcast"),
        ("MatMul", {}, [(2, 3), (4, 2)], "inner dimensions differ"),
        ("MaxPool", {"kernel_shape": [2, 2]}, [(1, 3, 5)], "input X must have rank 4"),
        ("MaxPool", {"kernel_shape": [4]}, [(1, 1, 3)], "does not fit"),
        ("BatchNormalization", {}, [(2, 3), (3,), (3,), (4,), (3,)], "input input_mean"),
        ("Add", {}, [(2, 3), (4,)], "input shapes do not broadcast"),
        ("Concat", {"axis": 0}, [(2, 3), (2, 4)], "input 1 of shape (2, 4) does not match"),
        ("SoftmaxCrossEntropyLoss", {}, [(4, 3), ((3,), "int64")], "input labels"),
        ("MeanSquaredError", {}, [(2, 3), (3, 2)], "input target of shape (3, 2)"),
        ("GlobalAveragePool", {}, [(2, 3)], "input X must have rank 3 or more"),
        ("Relu", {}, [], "takes 1 input (X), got 0"),
        ("Reshape", {}, [(2, 3), ((2, 1), "int64")], "input shape must have rank 1"),
    ],
)
def test_impossible_shapes_name_the_input_and_the_expectation(
    op_type: str, attributes: dict[str, Any], shapes: list[Any], expected: str
) -> None:
    with pytest.raises(UsageError) as excinfo:
        create(op_type, attributes, shapes)
    message = one_line_error(excinfo)
    assert message.startswith(f"{op_type}: ") and expected in message


@pytest.mark.parametrize(
    ("op_type", "inputs", "expected"),
    [
        ("Reshape", [np.zeros((2, 3)), np.array([4, -1])], "cannot be reshaped to [4, -1]"),
        ("Reshape", [np.zeros((2, 3)), np.array([-1, -1])], "one -1"),
        ("Squeeze", [np.zeros((2, 1)), np.array([0])], "not all of size 1"),
        ("Unsqueeze", [np.zeros((2, 1)), np.array([3])], "out of range for rank 3"),
        ("SoftmaxCrossEntropyLoss", [np.zeros((2, 3)), np.array([0, 3])], "found 3"),
        ("Dropout", [np.zeros(3), np.array(1.0)], "ratio must lie in [0, 1)"),
    ],
)
def test_impossible_values_of_shape_and_label_inputs_are_usage_errors(
    op_type: str, inputs: list[np.ndarray], expected: str
) -> None:
    op = TORCH.create(op_type, {}, [TensorDescriptor.of(x) for x in inputs])
    for call in (lambda: op.forward(inputs), lambda: op.prepare_forward(inputs)):
        with pytest.raises(UsageError) as excinfo:
            call()
        assert expected in one_line_error(excinfo)


@pytest.mark.parametrize(
    ("shapes", "expected"),
    [
        ([((2, 3), "float16")], "input X has dtype float16; the torch backend supports float32"),
        ([((2, 3), "int32")], "input X has dtype int32"),
        ([((2, 3), "float64"), ((3,), "float32")], "input B has dtype float32 but A has float64"),
    ],
)
def test_unsupported_dtypes_are_usage_errors(shapes: list[Any], expected: str) -> None:
    op_type = "Relu" if len(shapes) == 1 else "Add"
    with pytest.raises(UsageError) as excinfo:
        create(op_type, {}, shapes)
    assert expected in one_line_error(excinfo)


def test_integer_inputs_must_hold_integers() -> None:
    with pytest.raises(UsageError) as excinfo:
        create("Reshape", {}, [(2, 3), ((2,), "float32")])
    assert "input shape must hold integers" in one_line_error(excinfo)
    with pytest.raises(UsageError) as excinfo:
        create("SoftmaxCrossEntropyLoss", {}, [(2, 3), ((2,), "float32")])
    assert "input labels must hold integers" in one_line_error(excinfo)


def test_arrays_are_checked_like_descriptors() -> None:
    op = create("Relu", {}, [(2, 3)])
    with pytest.raises(UsageError) as excinfo:
        op.forward([np.zeros((2, 3), dtype=np.float16)])
    assert "dtype float16" in one_line_error(excinfo)
    op = create("Gemm", {}, [(2, 3), (3, 4)])
    with pytest.raises(UsageError) as excinfo:
        op.prepare_forward([np.zeros((2, 3)), np.zeros((4, 4))])
    assert "inner dimensions differ" in one_line_error(excinfo)


@pytest.mark.parametrize(
    ("op_type", "attributes", "expected"),
    [
        ("Conv", {"stride": [1, 1]}, "unknown attribute 'stride'; it takes: auto_pad"),
        ("Conv", {"auto_pad": "SAME"}, "auto_pad must be one of NOTSET"),
        ("Conv", {"group": 0}, "group must be positive"),
        ("MaxPool", {}, "kernel_shape is required"),
        ("MaxPool", {"kernel_shape": [2], "storage_order": 2}, "storage_order must be 0 or 1"),
        ("SoftmaxCrossEntropyLoss", {"reduction": "avg"}, "reduction must be one of mean"),
        ("Concat", {}, "attribute axis is required"),
        ("Dropout", {"ratio": 1.5}, "ratio must lie in [0, 1)"),
    ],
)
def test_bad_attributes_are_one_line_usage_errors(
    op_type: str, attributes: dict[str, Any], expected: str
) -> None:
    with pytest.raises(UsageError) as excinfo:
        create(op_type, attributes, [(1, 2, 4)])
    assert expected in one_line_error(excinfo)


def test_attributes_as_onnx_stores_them_are_accepted() -> None:
    op = create("Conv", {"auto_pad": b"SAME_UPPER"}, [(1, 2, 5), (3, 2, 2)])
    (y,) = op.forward([np.ones((1, 2, 5), np.float32), np.ones((3, 2, 2), np.float32)])
    assert y.shape == (1, 3, 5)


class _Unchecked(TorchOperator):
    """A matrix product that leaves every shape check to torch."""

    op_type = "UncheckedMatMul"
    slots: ClassVar[tuple[Slot, ...]] = (Slot("A"), Slot("B"))

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        return lambda a, b: (torch.mm(a, b),)


def test_torch_runtime_errors_become_one_line_usage_errors() -> None:
    op = _Unchecked()
    inputs = [np.ones((2, 3)), np.ones((4, 5))]
    with pytest.raises(RuntimeError):  # what torch itself says, for comparison
        torch.mm(torch.ones(2, 3), torch.ones(4, 5))
    for call in (
        lambda: op.forward(inputs),
        op.prepare_forward(inputs),
        lambda: op.backward([np.ones((2, 5))], inputs),
    ):
        with pytest.raises(UsageError) as excinfo:
            call()
        message = one_line_error(excinfo)
        assert message.startswith("UncheckedMatMul: torch rejected inputs of shapes (2, 3), (4, 5)")
        assert "cannot be multiplied" in message


def test_a_gradient_of_the_wrong_shape_is_a_usage_error() -> None:
    op = create("Relu", {}, [(2, 3)])
    with pytest.raises(UsageError) as excinfo:
        op.backward([np.ones((3, 2), np.float32)], [np.ones((2, 3), np.float32)])
    assert "gradient of output 0 has shape (3, 2)" in one_line_error(excinfo)


# -- the backend ----------------------------------------------------------------------


def test_backend_describes_itself() -> None:
    assert TorchBackend.name == "torch"
    assert TorchBackend.dtypes == ("float32", "float64")
    assert TORCH.device == "cpu"
    op = create("Relu", {}, [(2,)])
    assert op.device == "cpu" and op.op_type == "Relu" and op.differentiable


@pytest.mark.parametrize("device", ["tpu", "not a device"])
def test_unknown_devices_are_usage_errors(device: str) -> None:
    with pytest.raises(UsageError) as excinfo:
        TorchBackend(device)
    assert repr(device) in one_line_error(excinfo)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_without_cuda_is_a_usage_error() -> None:
    with pytest.raises(UsageError) as excinfo:
        TorchBackend("cuda")
    assert "CUDA is not available; use 'cpu'" in one_line_error(excinfo)


def test_backend_is_registered_in_the_operators_group() -> None:
    (entry,) = [
        ep for ep in importlib.metadata.entry_points(group="d5.operators") if ep.name == "torch"
    ]
    assert entry.value == "d5_plugin_torch.operators:TorchBackend"
    assert entry.load() is TorchBackend


def test_importing_the_plugin_module_does_not_import_torch() -> None:
    code = "import sys, d5_plugin_torch.plugin; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
