"""Bad input gets one line naming what is wrong; so does what TensorFlow's CPU kernels or
XLA cannot run, with the backend to use instead."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import pytest
from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.operators import TensorFlowBackend, TensorFlowXLABackend, TFOperator
from d5_plugin_tensorflow.ops import Plan, Slot
from d5_plugin_tensorflow.ops._base import Signature, one_line

from d5core.errors import UsageError
from d5core.levels.operators import TensorDescriptor

tf = tensorflow()
TF = TensorFlowBackend()
XLA = TensorFlowXLABackend()
BACKENDS = pytest.mark.parametrize("backend", [TF, XLA], ids=lambda b: b.name)


def one_line_error(excinfo: pytest.ExceptionInfo[UsageError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and message.strip() == message and message
    return message


def create(
    op_type: str,
    attributes: Mapping[str, Any],
    shapes: Sequence[Any],
    backend: TensorFlowBackend = TF,
) -> TFOperator:
    """Create from (shape, dtype) pairs or bare shapes (float32)."""
    descriptors = [
        TensorDescriptor(*s) if isinstance(s[-1], str) else TensorDescriptor(tuple(s))
        for s in shapes
    ]
    return backend.create(op_type, attributes, descriptors)


@BACKENDS
def test_unknown_operator_names_it_and_lists_the_supported(backend: TensorFlowBackend) -> None:
    with pytest.raises(UsageError) as excinfo:
        create("Einsum", {}, [(2, 3)], backend)
    message = one_line_error(excinfo)
    assert f"the {backend.name} backend has no operator 'Einsum'" in message
    assert "Conv" in message and "MeanSquaredError" in message


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
    op = TF.create(op_type, {}, [TensorDescriptor.of(x) for x in inputs])
    for call in (lambda: op.forward(inputs), lambda: op.prepare_forward(inputs)):
        with pytest.raises(UsageError) as excinfo:
            call()
        assert expected in one_line_error(excinfo)


@pytest.mark.parametrize(
    ("shapes", "expected"),
    [
        (
            [((2, 3), "float16")],
            "input X has dtype float16; the tensorflow backend supports float32, float64",
        ),
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


def test_a_gradient_of_the_wrong_shape_is_a_usage_error() -> None:
    op = create("Relu", {}, [(2, 3)])
    with pytest.raises(UsageError) as excinfo:
        op.backward([np.ones((3, 2), np.float32)], [np.ones((2, 3), np.float32)])
    assert "gradient of output 0 has shape (3, 2)" in one_line_error(excinfo)


# -- what TensorFlow itself refuses -----------------------------------------------------


class _Unchecked(TFOperator):
    """A matrix product that leaves every shape check to TensorFlow."""

    op_type = "UncheckedMatMul"
    slots: ClassVar[tuple[Slot, ...]] = (Slot("A"), Slot("B"))

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        return Plan(lambda a, b: (tf.linalg.matmul(a, b),))


class _Lookup(TFOperator):
    """A gather whose out-of-range index TensorFlow finds only when the graph runs."""

    op_type = "Lookup"
    slots: ClassVar[tuple[Slot, ...]] = (Slot("X"), Slot("indices", kind="index"))

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        return Plan(lambda x, i: (tf.gather(x, i),))


class _ArgMaxPool(TFOperator):
    """A pool with indices by ``tf.nn.max_pool_with_argmax``, which XLA lacks."""

    op_type = "ArgMaxPool"
    slots: ClassVar[tuple[Slot, ...]] = (Slot("X"),)

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        return Plan(lambda x: tuple(tf.nn.max_pool_with_argmax(x, 2, 2, "VALID")))


def test_shapes_tensorflow_rejects_while_tracing_become_one_line_usage_errors() -> None:
    op = _Unchecked()
    inputs = [np.ones((2, 3)), np.ones((4, 5))]
    for call in (
        lambda: op.forward(inputs),
        lambda: op.prepare_forward(inputs),
        lambda: op.backward([np.ones((2, 5))], inputs),
    ):
        with pytest.raises(UsageError) as excinfo:
            call()
        message = one_line_error(excinfo)
        assert message.startswith(
            "UncheckedMatMul: tensorflow rejected inputs of shapes (2, 3), (4, 5): "
        )
        assert "Dimensions must be equal, but are 3 and 4" in message
        assert "{{" not in message and "File " not in message


def test_errors_tensorflow_finds_while_running_become_one_line_usage_errors() -> None:
    op = _Lookup()
    inputs = [np.ones(3), np.array([5])]
    for call in (lambda: op.forward(inputs), lambda: op.prepare_forward(inputs)):
        with pytest.raises(UsageError) as excinfo:
            call()
        message = one_line_error(excinfo)
        assert message.startswith("Lookup: tensorflow rejected inputs of shapes (3,), (1,): ")
        assert "indices[0] = 5 is not in [0, 3)" in message


def test_what_xla_cannot_compile_points_to_the_tensorflow_backend() -> None:
    x = np.ones((1, 4, 4, 1), np.float32)
    assert len(_ArgMaxPool().forward([x])) == 2  # TensorFlow's own kernel runs it
    with pytest.raises(UsageError) as excinfo:
        _ArgMaxPool(xla=True).prepare_forward([x])
    message = one_line_error(excinfo)
    assert message.startswith("ArgMaxPool: XLA cannot compile it for inputs of shapes (1, 4, 4, 1)")
    assert "MaxPoolWithArgmax" in message
    assert message.endswith("use the tensorflow backend")


@pytest.mark.parametrize(
    ("op_type", "attributes", "shapes", "kernel"),
    [
        (
            "Conv",
            {"dilations": [2, 1, 1], "strides": [1, 2, 1]},
            [(1, 1, 5, 5, 5), (1, 1, 2, 2, 2)],
            "no gradient for dilations [2, 1, 1]",
        ),
        ("Conv", {"dilations": [2], "strides": [2]}, [(1, 1, 5), (1, 1, 2)], "with strides [2]"),
        (
            "ConvTranspose",
            {"dilations": [1, 2]},
            [(1, 1, 2, 2), (1, 1, 2, 2)],
            "Conv2DBackpropInput",
        ),
    ],
)
def test_what_tensorflows_cpu_kernels_lack_points_to_xla(
    op_type: str, attributes: dict[str, Any], shapes: list[Any], kernel: str
) -> None:
    with pytest.raises(UsageError) as excinfo:
        create(op_type, attributes, shapes)
    message = one_line_error(excinfo)
    assert message.startswith(f"{op_type}: TensorFlow's CPU") and kernel in message
    assert message.endswith("use the tensorflow-xla backend")
    inputs = [np.ones(s) for s in shapes]
    (y,) = create(op_type, attributes, shapes, XLA).forward(inputs)
    assert y.ndim == len(shapes[0])


def test_one_line_keeps_what_went_wrong_and_drops_where() -> None:
    try:
        tf.function(lambda: tf.gather(tf.ones(3), [7]), autograph=False)()
    except tf.errors.InvalidArgumentError as exc:
        assert "\n" in str(exc)  # what TensorFlow says: a traceback of the graph's definition
        line = one_line(exc)
    assert "indices[0] = 7 is not in [0, 3)" in line
    assert "\n" not in line and "{{" not in line and "[[" not in line


def test_the_cli_exits_2_for_an_operator_tensorflow_cannot_run(d5_cli: Any) -> None:
    result = d5_cli("validate", "op", "Einsum", "--backend", "tensorflow", "--shape", "3x4")
    assert result.exit_code == 2
    assert "backend 'tensorflow' has no operator 'Einsum'" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    result = d5_cli(
        "validate", "op", "Conv", "--backend", "tensorflow", "--shape", "1x1x5x5x5,1x1x2x2x2",
        "--attr", "dilations=[2,2,2]", "--attr", "strides=[2,2,2]", "--attr", "pads=[0,0,0,0,0,0]",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "use the tensorflow-xla backend" in result.stderr


# -- the backends ---------------------------------------------------------------------


@BACKENDS
def test_backends_describe_themselves(backend: TensorFlowBackend) -> None:
    assert backend.dtypes == ("float32", "float64")
    assert backend.device == "cpu"
    op = create("Relu", {}, [(2,)], backend)
    assert op.device == "cpu" and op.op_type == "Relu" and op.differentiable
    assert op.xla is backend.xla and op.backend == backend.name


@pytest.mark.parametrize(
    ("name", "cls"), [("tensorflow", TensorFlowBackend), ("tensorflow-xla", TensorFlowXLABackend)]
)
def test_backends_are_registered_in_the_operators_group(name: str, cls: type) -> None:
    (entry,) = [
        ep for ep in importlib.metadata.entry_points(group="d5.operators") if ep.name == name
    ]
    assert entry.load() is cls and cls.name == name
