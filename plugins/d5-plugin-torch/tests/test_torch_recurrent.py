"""LSTM and GRU in torch: the operators agree with the numpy reference, the fused
kernels with the recurrence written out, and the plain functions the graph executor
calls take ONNX's inputs and attributes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from d5_plugin_torch.operators import TorchBackend
from d5_plugin_torch.ops.recurrent import gru, lstm

from d5core.api import TensorDescriptor, UsageError
from d5core.testing.operator_agreement import assert_agrees_with_reference, reference_backend

DIRECTIONS = ["forward", "reverse", "bidirectional"]
BACKEND = TorchBackend()


def problem(
    op: str,
    direction: str,
    layout: int = 0,
    *,
    seed: int = 0,
    steps: int = 3,
    batch: int = 3,
    size: int = 2,
    hidden: int = 2,
    lens: list[int] | None = None,
) -> list[np.ndarray]:
    """Float64 inputs of ``op``, every one given (full lengths unless ``lens``)."""
    rng = np.random.default_rng(seed)
    d = 2 if direction == "bidirectional" else 1
    gates = 4 if op == "LSTM" else 3
    state = (d, batch, hidden) if layout == 0 else (batch, d, hidden)
    inputs = [
        rng.standard_normal((steps, batch, size) if layout == 0 else (batch, steps, size)),
        rng.standard_normal((d, gates * hidden, size)) * 0.6,
        rng.standard_normal((d, gates * hidden, hidden)) * 0.6,
        rng.standard_normal((d, 2 * gates * hidden)) * 0.5,
        np.array(lens if lens is not None else [steps] * batch, dtype=np.int32),
        rng.standard_normal(state),
    ]
    if op == "LSTM":
        inputs += [rng.standard_normal(state), rng.standard_normal((d, 3 * hidden)) * 0.5]
    return inputs


CASES = [
    ("LSTM", {}),
    ("LSTM", {"clip": 0.9, "hidden_size": 2}),
    ("LSTM", {"input_forget": 1}),
    ("LSTM", {"activations": ["Softplus", "Softsign", "ScaledTanh"], "activation_beta": [0.5]}),
    ("GRU", {}),
    ("GRU", {"linear_before_reset": 1, "clip": 0.9}),
    ("GRU", {"activations": ["HardSigmoid", "Affine"], "activation_alpha": [0.3, 1.5]}),
]


# -- the operators agree with the reference -------------------------------------------


@pytest.mark.parametrize(
    ("layout", "lens", "dtype"),
    [(0, [3, 0], "float64"), (1, [1, 2], "float64"), (1, None, "float32")],
)
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize(("op", "extra"), CASES, ids=lambda v: str(v))
def test_operator_agrees_with_the_reference(op, extra, direction, layout, lens, dtype):
    d = 2 if direction == "bidirectional" else 1
    extra = {k: v * d if k == "activations" else v for k, v in extra.items()}
    attributes = {"direction": direction, "layout": layout, **extra}
    inputs = problem(op, direction, layout, batch=2, lens=lens)
    assert_agrees_with_reference(BACKEND, op, attributes, inputs, dtype)


@pytest.mark.parametrize("count", [3, 4, 6])
@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_fewer_inputs_agree_with_the_reference(op, count):
    """The fused path (no lengths, no peepholes) and defaults for the absent inputs."""
    attributes = {"direction": "bidirectional", "linear_before_reset": 1} if op == "GRU" else {}
    direction = attributes.get("direction", "forward")
    inputs = problem(op, direction)[:count]
    assert_agrees_with_reference(BACKEND, op, attributes, inputs, "float64")


# -- fused kernels and the written-out recurrence ----------------------------------------


def tensors(inputs: list[np.ndarray]) -> list[torch.Tensor]:
    return [torch.tensor(x) for x in inputs]


def reference_outputs(
    op: str, attributes: dict[str, Any], args: list[torch.Tensor | None]
) -> list[np.ndarray]:
    """The numpy reference's outputs for these tensors (``None``: absent)."""
    arrays = [None if a is None else a.numpy() for a in args]
    descriptors = [None if a is None else TensorDescriptor.of(a) for a in arrays]
    ref = reference_backend().create(op, attributes, descriptors)
    return ref.forward(arrays)


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_the_fused_kernel_runs_and_equals_the_recurrence(op, direction, layout, monkeypatch):
    """torch's gate order differs from ONNX's: a wrong reordering would not agree."""
    fn, fused_name = (lstm, "lstm") if op == "LSTM" else (gru, "gru")
    attributes: dict[str, Any] = {"direction": direction, "layout": layout}
    if op == "GRU":
        attributes["linear_before_reset"] = 1
    args = tensors(problem(op, direction, layout, steps=4, hidden=3))
    given = [*args[:4], None, args[5]] + ([args[6]] if op == "LSTM" else [])
    calls = []
    real = getattr(torch._VF, fused_name)

    def counted(*a: Any) -> Any:
        calls.append(1)
        return real(*a)

    monkeypatch.setattr(torch._VF, fused_name, counted)
    fused = fn(*given, **attributes)
    assert calls, "the fused kernel did not run"
    written = fn(*given, fused=False, **attributes)
    assert len(calls) == 1
    for a, b in zip(fused, written, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("op", "attributes", "lengths", "peepholes"),
    [
        ("LSTM", {"input_forget": 1}, False, False),
        ("LSTM", {"clip": 5.0}, False, False),
        ("LSTM", {}, True, False),
        ("LSTM", {}, False, True),
        ("LSTM", {"activations": ["Sigmoid", "Tanh", "Relu"]}, False, False),
        ("GRU", {}, False, False),
        ("GRU", {"linear_before_reset": 1}, True, False),
    ],
)
def test_what_torch_cells_cannot_compute_runs_the_recurrence(
    op, attributes, lengths, peepholes, monkeypatch
):
    fn, fused_name = (lstm, "lstm") if op == "LSTM" else (gru, "gru")

    def refuse(*a: Any) -> Any:
        raise AssertionError("the fused kernel ran")

    monkeypatch.setattr(torch._VF, fused_name, refuse)
    args: list[torch.Tensor | None] = list(tensors(problem(op, "forward", lens=[3, 2, 1])))
    if not lengths:
        args[4] = None
    if op == "LSTM" and not peepholes:
        args[7] = None
    outputs = fn(*args, **attributes)
    expected = reference_outputs(op, attributes, args)
    for got, want in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("fused", [True, False])
def test_autograd_gradients_match_finite_differences(op, fused):
    fn = lstm if op == "LSTM" else gru
    attributes: dict[str, Any] = {"direction": "bidirectional"}
    if op == "GRU":
        attributes["linear_before_reset"] = 1
    args = tensors(problem(op, "bidirectional", batch=2))
    floats = [a.requires_grad_() for i, a in enumerate(args) if i != 4 and i != 7]

    def f(*xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x, w, r, b, h0, *rest = xs
        return fn(x, w, r, b, None, h0, *rest, fused=fused, **attributes)

    assert torch.autograd.gradcheck(f, tuple(floats))


# -- the plain functions -------------------------------------------------------------------


def test_plain_functions_take_onnx_inputs_as_onnx_stores_them():
    x, w, r, b, lens, h0, c0, p = tensors(problem("LSTM", "reverse", 1, lens=[3, 1, 2]))
    lens32 = lens.to(torch.int32)
    y, yh, yc = lstm(x, w, r, b, lens32, h0, c0, p, direction=b"reverse", layout=1)
    assert y.shape == (3, 3, 1, 2) and yh.shape == yc.shape == (3, 1, 2)
    assert torch.all(y[1, 1:] == 0)  # entry 1 has length 1
    torch.testing.assert_close(yh[:, 0], y[:, 0, 0])  # reverse: Y_h is Y at step 0
    gx, gw, gr = tensors(problem("GRU", "forward"))[:3]
    y, yh = gru(gx, gw, gr, None, None, None, hidden_size=2, activations=[b"Sigmoid", b"Tanh"])
    assert y.shape == (3, 1, 3, 2) and yh.shape == (1, 3, 2)


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda a: lstm(*a, bogus=1), r"^LSTM: unknown attribute 'bogus'"),
        (lambda a: lstm(*a, direction="up"), r"^LSTM: direction must be"),
        (lambda a: lstm(*a, activations=["Tanh"]), r"^LSTM: activations has 1 names but 3"),
        (lambda a: lstm(*a, activations=["a", "b", "c"]), r"^LSTM: activation a is not supported"),
        (lambda a: lstm(*a, hidden_size=7), r"^LSTM: hidden_size is 7 but R"),
        (lambda a: lstm(a[0], a[1][..., :1], a[2]), r"^LSTM: input W must have shape \(1, 8, 2\)"),
        (lambda a: lstm(a[0][0], a[1], a[2]), r"^LSTM: X must have rank 3"),
        (lambda a: lstm(a[0], a[1], a[2], a[3][:, :3]), r"^LSTM: input B must have shape"),
        (lambda a: gru(a[0], a[1], a[2], input_forget=1), r"^GRU: unknown attribute"),
        (lambda a: gru(a[0], a[1], a[2]), r"^GRU: R must have shape"),
    ],
)
def test_plain_functions_refuse_bad_input_with_one_line(call, pattern):
    args = tensors(problem("LSTM", "forward"))
    with pytest.raises(UsageError, match=pattern) as caught:
        call(args)
    assert "\n" not in str(caught.value)


def test_the_operator_refuses_lengths_past_the_sequence():
    inputs = problem("GRU", "forward", lens=[4, 1, 1])
    op = BACKEND.create("GRU", {}, [TensorDescriptor.of(x) for x in inputs])
    with pytest.raises(UsageError, match=r"^GRU: sequence_lens must lie in \[0, 3\]"):
        op.forward(inputs)


def test_the_timed_forward_makes_no_conversion(monkeypatch):
    inputs = problem("LSTM", "bidirectional", lens=[3, 1, 2])
    op = BACKEND.create(
        "LSTM", {"direction": "bidirectional"}, [TensorDescriptor.of(x) for x in inputs]
    )
    run = op.prepare_forward(inputs)
    for name in ("tensor", "as_tensor", "from_numpy", "asarray"):
        monkeypatch.setattr(torch, name, lambda *a, **k: pytest.fail("conversion"))
    for name in ("numpy", "tolist", "item", "cpu", "to"):
        monkeypatch.setattr(torch.Tensor, name, lambda *a, **k: pytest.fail("conversion"))
    outputs = run()
    assert len(outputs) == 3 and outputs[0].shape == (3, 2, 3, 2)
