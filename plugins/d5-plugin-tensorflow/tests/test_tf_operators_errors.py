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

from d5core.api import UsageError
from d5core.testing.operators import OperatorErrorTests, create_operator, one_line_error

tf = tensorflow()
TF = TensorFlowBackend()
XLA = TensorFlowXLABackend()
BACKENDS = pytest.mark.parametrize("backend", [TF, XLA], ids=lambda b: b.name)


def create(
    op_type: str,
    attributes: Mapping[str, Any],
    shapes: Sequence[Any],
    backend: TensorFlowBackend = TF,
) -> TFOperator:
    """Create from (shape, dtype) pairs or bare shapes (float32)."""
    op = create_operator(backend, op_type, attributes, shapes)
    assert isinstance(op, TFOperator)
    return op


def test_the_xla_backend_names_an_unknown_operator_too() -> None:
    with pytest.raises(UsageError) as excinfo:
        create("Einsum", {}, [(2, 3)], XLA)
    message = one_line_error(excinfo)
    assert "the tensorflow-xla backend has no operator 'Einsum'" in message
    assert "Conv" in message and "MeanSquaredError" in message


class TestTensorFlowRefusesBadInputInOneLine(OperatorErrorTests):
    backend = TF
    float16_refusal = "input X has dtype float16; the tensorflow backend supports float32, float64"


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
