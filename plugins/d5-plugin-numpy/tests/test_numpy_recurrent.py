"""LSTM and GRU in the reference: forward against onnx's reference evaluator and
onnxruntime, backward through time against central differences, one-line errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from d5_plugin_numpy.backend import NumpyBackend
from onnx import helper
from onnx.reference import ReferenceEvaluator

from d5core.api import Operator, TensorDescriptor, UsageError, gradcheck

DIRECTIONS = ["forward", "reverse", "bidirectional"]
NAMES = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


def problem(
    op: str,
    direction: str,
    layout: int,
    *,
    seed: int = 0,
    steps: int = 4,
    batch: int = 3,
    size: int = 2,
    hidden: int = 3,
    lens: list[int] | None = None,
    dtype: Any = np.float64,
) -> list[np.ndarray | None]:
    """Inputs of ``op`` with every optional one given (``sequence_lens`` only if
    ``lens``)."""
    rng = np.random.default_rng(seed)
    d = 2 if direction == "bidirectional" else 1
    gates = 4 if op == "LSTM" else 3
    state = (d, batch, hidden) if layout == 0 else (batch, d, hidden)

    def f(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(dtype)

    inputs: list[np.ndarray | None] = [
        f(steps, batch, size) if layout == 0 else f(batch, steps, size),
        f(d, gates * hidden, size, scale=0.6),
        f(d, gates * hidden, hidden, scale=0.6),
        f(d, 2 * gates * hidden, scale=0.5),
        None if lens is None else np.array(lens, dtype=np.int32),
        f(*state),
    ]
    if op == "LSTM":
        inputs += [f(*state), f(d, 3 * hidden, scale=0.5)]
    return inputs


def onnx_model(op: str, attributes: dict[str, Any], inputs: list[np.ndarray | None]) -> Any:
    """A one-node model of ``op`` with every output; absent inputs are empty names."""
    names, infos = [], []
    for name, value in zip(NAMES, inputs, strict=False):
        if value is None:
            names.append("")
            continue
        names.append(name)
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        infos.append(helper.make_tensor_value_info(name, elem, value.shape))
    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    node = helper.make_node(op, names, outputs, **attributes)
    elem = helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    graph = helper.make_graph(
        [node], "g", infos, [helper.make_tensor_value_info(o, elem, None) for o in outputs]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    feeds = {n: v for n, v in zip(NAMES, inputs, strict=False) if v is not None}
    return model, feeds


def make(op: str, attributes: dict[str, Any], inputs: list[np.ndarray | None]) -> Operator:
    """Create ``op`` through the backend; ``None`` describes an absent input."""
    descriptors = [None if x is None else TensorDescriptor.of(x) for x in inputs]
    return NumpyBackend().create(op, attributes, descriptors)


def ours(op: str, attributes: dict[str, Any], inputs: list[np.ndarray | None]) -> list[Any]:
    return make(op, attributes, inputs).forward(inputs)


run = ours


def assert_close(got: list[np.ndarray], want: list[np.ndarray], tol: float) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


# -- forward ------------------------------------------------------------------------


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize(
    ("op", "extra"),
    [("LSTM", {}), ("GRU", {}), ("GRU", {"linear_before_reset": 1})],
    ids=["LSTM", "GRU", "GRU-lbr"],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_matches_onnx_reference_evaluator(op, extra, direction, layout, dtype):
    inputs = problem(op, direction, layout, dtype=dtype)
    attributes = {"direction": direction, "layout": layout, "hidden_size": 3, **extra}
    model, feeds = onnx_model(op, attributes, inputs)
    expected = ReferenceEvaluator(model).run(None, feeds)
    assert_close(ours(op, attributes, inputs), expected, 1e-5 if dtype == np.float32 else 1e-12)


def _ort(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


#: What onnx's reference evaluator ignores (it has no lengths, clip, coupled gates or
#: other activations): checked against onnxruntime instead, in float32. Every alpha and
#: beta is given: for Affine, ScaledTanh and ThresholdedRelu onnxruntime's defaults are
#: 0 where d5 takes those of the ONNX operators of the same name.
ORT_CASES = [
    ("LSTM", {}),
    ("LSTM", {"clip": 0.6}),
    ("LSTM", {"input_forget": 1}),
    (
        "LSTM",
        {
            "activations": ["Tanh", "Softsign", "ScaledTanh"],
            "activation_alpha": [0.7],
            "activation_beta": [1.3],
        },
    ),
    ("GRU", {}),
    ("GRU", {"clip": 0.6, "linear_before_reset": 1}),
    (
        "GRU",
        {
            "activations": ["HardSigmoid", "Affine"],
            "activation_alpha": [0.3, 0.9],
            "activation_beta": [0.4, 0.1],
        },
    ),
]


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize(("op", "extra"), ORT_CASES, ids=lambda v: str(v))
def test_lengths_clip_and_activations_match_onnxruntime(op, extra, direction):
    d = 2 if direction == "bidirectional" else 1
    extra = {k: v * d if isinstance(v, list) else v for k, v in extra.items()}
    inputs = problem(op, direction, 0, lens=[4, 2, 1], dtype=np.float32)
    attributes = {"direction": direction, "hidden_size": 3, **extra}  # onnxruntime needs it
    model, feeds = onnx_model(op, attributes, inputs)
    assert_close(ours(op, attributes, inputs), _ort(model, feeds), 2e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_past_its_length_an_entry_outputs_zero_and_keeps_its_state(op, direction):
    lens = [3, 1, 0]
    inputs = problem(op, direction, 0, steps=3, lens=lens)
    outputs = ours(op, {"direction": direction}, inputs)
    y, yh = outputs[0], outputs[1]
    for b, n in enumerate(lens):
        assert np.all(y[n:, 0, b] == 0)
        if n == 0:
            np.testing.assert_array_equal(yh[0, b], inputs[5][0, b])
            if op == "LSTM":
                np.testing.assert_array_equal(outputs[2][0, b], inputs[6][0, b])
        else:
            last = n - 1 if direction == "forward" else 0
            np.testing.assert_array_equal(yh[0, b], y[last, 0, b])
    # an entry's outputs within its length do not depend on the other entries' lengths
    full = ours(op, {"direction": direction}, [*inputs[:4], np.array([3, 3, 3]), *inputs[5:]])
    np.testing.assert_allclose(y[:, 0, 0], full[0][:, 0, 0], rtol=1e-14)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_absent_optional_inputs_are_zeros(op):
    inputs = problem(op, "bidirectional", 1)
    zeros = [x if x is None else np.zeros_like(x) for x in inputs]
    given = [inputs[0], inputs[1], inputs[2], zeros[3], None, *zeros[5:]]
    absent = [inputs[0], inputs[1], inputs[2], None, None, *[None for _ in inputs[5:]]]
    attributes = {"direction": "bidirectional", "layout": 1}
    assert_close(ours(op, attributes, absent), ours(op, attributes, given), 0.0)
    assert_close(ours(op, attributes, inputs[:3]), ours(op, attributes, given), 0.0)


# -- backward -----------------------------------------------------------------------


GRAD_CASES = [
    ("LSTM", {}),
    ("LSTM", {"clip": 0.9}),
    ("LSTM", {"input_forget": 1}),
    ("LSTM", {"activations": ["Softplus", "Elu", "ScaledTanh"], "activation_alpha": [1.5]}),
    ("GRU", {}),
    ("GRU", {"clip": 0.9}),
    ("GRU", {"linear_before_reset": 1}),
    ("GRU", {"activations": ["Softsign", "Affine"], "activation_beta": [0.2]}),
]


@pytest.mark.parametrize("lens", [None, [3, 0, 2]], ids=["full", "lengths"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize(("op", "extra"), GRAD_CASES, ids=lambda v: str(v))
def test_backward_through_time_matches_central_differences(op, extra, direction, layout, lens):
    d = 2 if direction == "bidirectional" else 1
    extra = dict(extra)
    if "activations" in extra:
        extra["activations"] = extra["activations"] * d
    inputs = problem(op, direction, layout, steps=3, hidden=2, lens=lens or [3, 3, 3])
    attributes = {"direction": direction, "layout": layout, **extra}
    op_ = make(op, attributes, inputs)
    checks = gradcheck(op_, inputs)
    failures = [f"{c.label}: {c.failed_metric}: {c.detail}" for c in checks if not c.passed]
    assert not failures, failures
    checked = {c.index for c in checks if not c.skipped}
    assert checked == {i for i in range(len(inputs)) if i != 4}


def test_backward_gives_no_gradient_for_lengths_or_absent_inputs():
    inputs = problem("LSTM", "forward", 0, lens=[4, 2, 1])
    given = [*inputs[:3], None, inputs[4], inputs[5], None, inputs[7]]
    op = make("LSTM", {}, given)
    outputs = op.forward(given)
    grads = op.backward([np.ones_like(o) for o in outputs], given, outputs)
    assert [g is None for g in grads] == [False, False, False, True, True, False, True, False]


# -- errors -------------------------------------------------------------------------


ERRORS = [
    ({"direction": "sideways"}, {}, r"direction must be forward, reverse or bidirectional"),
    ({"layout": 2}, {}, r"layout must be 0 or 1"),
    ({"clip": -1.0}, {}, r"clip must be positive"),
    ({"activations": ["Sigmoid", "Tanh"]}, {}, r"activations has 2 names but 3 are needed"),
    ({"activations": ["Sigmoid", "Swish", "Tanh"]}, {}, r"activation Swish is not supported"),
    ({"hidden_size": 5}, {}, r"hidden_size is 5 but R of shape \(1, 12, 3\)"),
    ({"direction": "bidirectional"}, {}, r"R must have shape \(num_directions=2"),
    ({}, {1: np.zeros((1, 12, 5))}, r"input W must have shape \(1, 12, 2\)"),
    ({}, {5: np.zeros((1, 2, 3))}, r"input initial_h must have shape \(1, 3, 3\)"),
    ({}, {7: np.zeros((1, 3))}, r"input P must have shape \(1, 9\)"),
    ({}, {4: np.array([1.0, 2.0, 3.0])}, r"input sequence_lens must hold integers"),
    (
        {},
        {0: np.zeros((4, 3, 2), np.float32)},
        r"input X has dtype float32 but X has float64|has dtype",
    ),
    ({}, {0: np.zeros((4, 3))}, r"X must have rank 3"),
]


@pytest.mark.parametrize(("attributes", "replace", "pattern"), ERRORS)
def test_bad_attributes_and_inputs_are_refused_with_one_line(attributes, replace, pattern):
    inputs = problem("LSTM", "forward", 0, lens=[4, 2, 1])
    for i, value in replace.items():
        inputs[i] = value
    with pytest.raises(UsageError, match=pattern) as caught:
        make("LSTM", attributes, inputs)
    assert "\n" not in str(caught.value)


def test_lengths_past_the_sequence_are_refused_when_run():
    inputs = problem("GRU", "forward", 0, lens=[5, 1, 1])
    with pytest.raises(UsageError, match=r"GRU: sequence_lens must lie in \[0, 4\]") as caught:
        run("GRU", {}, inputs)
    assert "\n" not in str(caught.value)


def test_an_unknown_attribute_is_refused():
    with pytest.raises(UsageError, match="input_forget"):
        make("GRU", {"input_forget": 1}, problem("GRU", "forward", 0)[:3])
