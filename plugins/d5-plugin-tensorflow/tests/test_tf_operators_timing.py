"""What the prepared callables (the only code d5 times) do, and do not do.

``prepare_forward`` and ``prepare_backward`` convert numpy arrays once (moving image
data to channels-last), trace the graph and run it once; the callables they return hold
TensorFlow tensors, convert nothing, run no Python of the kernel and make one call of
one traced graph: the forward (``tensorflow``), the gradient tape's graph (backward), or
the same compiled by XLA (``tensorflow-xla``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.operators import (
    OPERATORS,
    TensorFlowBackend,
    TensorFlowXLABackend,
    TFOperator,
)
from d5_plugin_tensorflow.ops import Plan, Slot
from d5_plugin_tensorflow.ops._base import Prepared, Signature

from d5core.api import TensorDescriptor, default_grad_outputs
from d5core.testing.operator_agreement import small_problems

tf = tensorflow()
_rng = np.random.default_rng(7)


def _f(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape).astype(np.float32)


def _pos(*shape: int) -> np.ndarray:
    return _rng.uniform(0.5, 1.5, shape).astype(np.float32)


#: One small problem per operator.
#: The kit's small problem of every operator this backend offers (it offers a subset of
#: the reference's).
CASES = {op: case for op, case in small_problems().items() if op in OPERATORS}

ALL = pytest.mark.parametrize("op_type", sorted(CASES))
#: Operators whose every input is read when the graph is traced (ConstantOfShape's
#: shape): their prepared forward holds no tensor.
STATIC_INPUTS_ONLY = frozenset({"ConstantOfShape"})
BACKENDS = pytest.mark.parametrize(
    "backend", [TensorFlowBackend(), TensorFlowXLABackend()], ids=lambda b: b.name
)

#: Functions that move data between numpy, Python and TensorFlow, or lay it out.
CONVERSIONS: list[tuple[Any, str]] = [
    (tf, "constant"),
    (tf, "convert_to_tensor"),
    (tf, "transpose"),
    (tf, "reshape"),
    (tf, "identity"),
    (tf, "function"),
    (np, "asarray"),
    (np, "array"),
    (np, "transpose"),
    (np, "ascontiguousarray"),
]


def make(op_type: str, backend: TensorFlowBackend) -> tuple[TFOperator, list[np.ndarray]]:
    attributes, inputs = CASES[op_type]
    op = backend.create(op_type, attributes, [TensorDescriptor.of(x) for x in inputs])
    return op, inputs


@pytest.fixture
def no_conversions(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], Any]], Any]:
    """Call a function while every conversion and tracing function raises."""

    def call(fn: Callable[[], Any]) -> Any:
        with monkeypatch.context() as patch:
            for owner, name in CONVERSIONS:

                def refuse(*args: Any, _name: str = name, **kwargs: Any) -> Any:
                    raise AssertionError(f"{_name} called inside the timed callable")

                patch.setattr(owner, name, refuse)
            return fn()

    return call


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Count the runs of the Python of every kernel built while the fixture is active
    (each run is a trace: the timed graphs run no Python)."""
    calls: list[str] = []
    original = TFOperator._plan

    def counting(self: TFOperator, sig: Signature, *, for_grad: bool) -> Plan:
        plan = original(self, sig, for_grad=for_grad)
        kernel = plan.kernel

        def counted(*tensors: Any) -> Any:
            calls.append(self.op_type)
            return kernel(*tensors)

        return Plan(counted, plan.inputs, plan.outputs, plan.notes)

    monkeypatch.setattr(TFOperator, "_plan", counting)
    yield calls


def test_every_operator_has_a_case() -> None:
    assert set(OPERATORS) <= set(small_problems())
    assert set(CASES) == set(OPERATORS)


@BACKENDS
@ALL
def test_prepared_forward_holds_tensors_and_converts_nothing(
    op_type: str,
    backend: TensorFlowBackend,
    no_conversions: Callable[[Callable[[], Any]], Any],
    kernel_calls: list[str],
) -> None:
    op, inputs = make(op_type, backend)
    run = op.prepare_forward(inputs)
    assert isinstance(run, Prepared)
    assert all(isinstance(t, tf.Tensor) for t in run.args)
    assert run.args or op_type in STATIC_INPUTS_ONLY
    assert kernel_calls == [op_type], "the graph is traced once, when preparing"
    outputs = no_conversions(run)
    outputs = no_conversions(run)
    assert kernel_calls == [op_type], "a timed call ran the kernel's Python"
    assert isinstance(outputs, tuple) and outputs
    assert all(isinstance(t, tf.Tensor) for t in outputs)
    expected = op.forward(inputs)
    for got, want in zip(run.to_numpy(outputs), expected, strict=True):
        np.testing.assert_array_equal(got, want)


@BACKENDS
@ALL
def test_prepared_backward_runs_one_gradient_graph(
    op_type: str,
    backend: TensorFlowBackend,
    kernel_calls: list[str],
    no_conversions: Callable[[Callable[[], Any]], Any],
) -> None:
    op, inputs = make(op_type, backend)
    grads = default_grad_outputs(op.forward(inputs), seed=0)
    kernel_calls.clear()
    run = op.prepare_backward(grads, inputs)
    if all(op.declares_no_gradient(i) for i in range(len(inputs))):  # Equal, Shape, ...
        assert kernel_calls == [] and no_conversions(run) == ()
        assert all(g is None for g in op.backward(grads, inputs))
        return
    assert kernel_calls == [op_type], "the gradient graph is traced once, when preparing"
    first = no_conversions(run)
    second = no_conversions(run)
    assert kernel_calls == [op_type], "a timed backward ran the kernel's Python"
    assert first and all(isinstance(g, tf.Tensor) for g in first)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    numpy_grads = [g for g in op.backward(grads, inputs) if g is not None]
    for got, want in zip(run.to_numpy(first), numpy_grads, strict=True):
        np.testing.assert_array_equal(got, want)


def test_prepared_backward_differentiates_only_floating_data_inputs() -> None:
    inputs = [*CASES["SoftmaxCrossEntropyLoss"][1], _pos(3)]
    op = TensorFlowBackend().create(
        "SoftmaxCrossEntropyLoss", {}, [TensorDescriptor.of(x) for x in inputs]
    )
    grads = default_grad_outputs(op.forward(inputs), seed=0)
    (scores,) = op.prepare_backward(grads, inputs)()
    assert tuple(scores.shape) == (4, 2, 3)  # channels-last, as the graph takes the scores
    assert [g is None for g in op.backward(grads, inputs)] == [False, True, True]


@BACKENDS
@pytest.mark.parametrize(
    ("op_type", "layout", "timed_shape"),
    [
        ("Conv", "NHWC", (1, 4, 4, 3)),
        ("ConvTranspose", "NHWC", (1, 1, 8, 3)),
        ("MaxPool", "NHWC", (1, 5, 5, 2)),
        ("AveragePool", "NHWC", (1, 1, 3, 2)),
        ("GlobalAveragePool", "NCW", (2, 3, 1)),
        ("BatchNormalization", "NCW", (2, 3, 4)),
        ("Relu", "", (3, 4)),
    ],
)
def test_image_operators_time_channels_last_data_and_say_so(
    op_type: str, layout: str, timed_shape: tuple[int, ...], backend: TensorFlowBackend
) -> None:
    """Convolutions and pools get NHWC data (1-D with a height of 1), transposed when
    prepared; their outputs go back to ONNX's layout in ``to_numpy``, outside the timed
    call. Operators that work in ONNX's own layout say which."""
    op, inputs = make(op_type, backend)
    assert op.timed_layout == layout
    run = op.prepare_forward(inputs)
    (y, *_) = run()
    assert tuple(y.shape) == timed_shape
    (expected, *_) = op.forward(inputs)
    if layout == "NHWC":
        x = inputs[0]
        channels_last = np.moveaxis(x, 1, -1)
        np.testing.assert_array_equal(
            run.args[0].numpy().reshape(channels_last.shape), channels_last
        )
        back = np.moveaxis(y.numpy(), -1, 1).reshape(expected.shape)
        np.testing.assert_array_equal(back, expected)
    details = op.details()
    assert details["timed_layout"] == layout and details["jit_compile"] is backend.xla
    assert details["backend"] == backend.name
    if layout == "NHWC":
        assert any("outside the timed call" in note for note in details["notes"])


@BACKENDS
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_the_timed_graph_is_compiled_by_xla_on_the_xla_backend_only(
    backend: TensorFlowBackend, direction: str
) -> None:
    op, inputs = make("Conv", backend)
    if direction == "forward":
        run = op.prepare_forward(inputs)
    else:
        run = op.prepare_backward(default_grad_outputs(op.forward(inputs), seed=0), inputs)
    attrs = run.function.function_def.attr
    compiled = "_XlaMustCompile" in attrs and attrs["_XlaMustCompile"].b
    assert compiled is backend.xla


def test_a_traced_graph_is_reused_for_the_same_signature_only() -> None:
    op, inputs = make("Relu", TensorFlowBackend())
    first = op.prepare_forward(inputs)
    again = op.prepare_forward([inputs[0] * 2])
    assert again.function is first.function
    other = op.prepare_forward([inputs[0].astype(np.float64)])
    assert other.function is not first.function
    assert other()[0].dtype == tf.float64


class _Relu(TFOperator):
    op_type = "Relu"
    slots = (Slot("X"),)

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        return Plan(lambda x: (tf.nn.relu(x),))


def test_forward_and_backward_go_through_the_cached_graphs() -> None:
    """Gradient checks call forward hundreds of times: each call reuses the graph."""
    op = _Relu()
    x = _f(3, 4)
    for _ in range(3):
        op.forward([x])
        op.backward([np.ones_like(x)], [x])
    assert len(op._functions) == 2 and len(op._plans) == 2
