"""What the prepared callables (the only code d5 times) do, and do not do.

``prepare_forward`` and ``prepare_backward`` convert numpy arrays once; the callables
they return hold torch tensors, make no conversion, run the kernel (forward) or only
``autograd.grad`` (backward), and synchronize on a GPU alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
from d5_plugin_torch.operators import OPERATORS, TorchBackend, TorchOperator

from d5core.api import TensorDescriptor, default_grad_outputs
from d5core.testing.operator_agreement import small_problems

_rng = np.random.default_rng(7)


def _f(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape).astype(np.float32)


def _pos(*shape: int) -> np.ndarray:
    return _rng.uniform(0.5, 1.5, shape).astype(np.float32)


#: One small problem per operator (the kit's; MatMul with a matrix on the right, and the
#: loss with class weights, which torch takes as a separate argument).
CASES = {
    **small_problems(),
    "MatMul": ({}, [_f(2, 3, 4), _f(4, 2)]),
    "SoftmaxCrossEntropyLoss": ({}, [_f(4, 3), np.array([0, 2, 1, 1]), _pos(3)]),
}

ALL = pytest.mark.parametrize("op_type", sorted(CASES))

#: Functions that move data between numpy, Python and torch, or between devices.
CONVERSIONS: list[tuple[Any, str]] = [
    (torch, "tensor"),
    (torch, "as_tensor"),
    (torch, "from_numpy"),
    (torch, "asarray"),
    (torch.Tensor, "numpy"),
    (torch.Tensor, "tolist"),
    (torch.Tensor, "item"),
    (torch.Tensor, "cpu"),
    (torch.Tensor, "cuda"),
    (torch.Tensor, "to"),
]


def make(
    op_type: str, backend: TorchBackend | None = None
) -> tuple[TorchOperator, list[np.ndarray]]:
    attributes, inputs = CASES[op_type]
    op = (backend or TorchBackend()).create(
        op_type, attributes, [TensorDescriptor.of(x) for x in inputs]
    )
    return op, inputs


#: Conversions that are an operator's own work: ``Cast`` converts the element type on
#: the device with ``Tensor.to``.
OWN_WORK: dict[str, set[str]] = {"Cast": {"to"}}


@pytest.fixture
def no_conversions(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """Call a function while every conversion function raises (but those in ``allow``)."""

    def call(fn: Callable[[], Any], allow: set[str] | frozenset[str] = frozenset()) -> Any:
        with monkeypatch.context() as patch:
            for owner, name in CONVERSIONS:
                if name in allow:
                    continue

                def refuse(*args: Any, _name: str = name, **kwargs: Any) -> Any:
                    raise AssertionError(f"{_name} called inside the timed callable")

                patch.setattr(owner, name, refuse)
            return fn()

    return call


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Count the calls of every kernel built while the fixture is active."""
    calls: list[str] = []
    original = TorchOperator._bind

    def counting_bind(self: TorchOperator, inputs: Any, *, for_grad: bool) -> Any:
        bound = original(self, inputs, for_grad=for_grad)
        kernel = bound.kernel

        def counted(*args: Any) -> Any:
            calls.append(self.op_type)
            return kernel(*args)

        bound.kernel = counted
        return bound

    monkeypatch.setattr(TorchOperator, "_bind", counting_bind)
    yield calls


def closure_tensors(fn: Callable[[], Any]) -> list[torch.Tensor]:
    """The tensors a callable holds in its closure (directly or in tuples)."""
    found: list[torch.Tensor] = []
    for cell in fn.__closure__ or ():
        value = cell.cell_contents
        items = value if isinstance(value, tuple) else (value,)
        found += [v for v in items if isinstance(v, torch.Tensor)]
    return found


def test_every_operator_has_a_case() -> None:
    assert set(CASES) == set(OPERATORS)


@ALL
def test_prepared_forward_holds_tensors_and_converts_nothing(
    op_type: str, no_conversions: Callable[..., Any]
) -> None:
    op, inputs = make(op_type)
    run = op.prepare_forward(inputs)
    held = closure_tensors(run)
    if any(slot.kind != "static" for slot in op.slots):
        assert held, "the callable holds no torch tensors: it would convert when called"
    assert all(t.device == op.torch_device and not t.requires_grad for t in held)
    with torch.enable_grad():  # nothing it holds requires a gradient: no graph either way
        outputs = no_conversions(run, OWN_WORK.get(op_type, set()))
    assert isinstance(outputs, tuple) and outputs
    assert all(isinstance(t, torch.Tensor) for t in outputs)
    assert not any(t.requires_grad or t.grad_fn is not None for t in outputs)
    expected = op.forward(inputs)
    for got, want in zip(outputs, expected, strict=True):
        np.testing.assert_array_equal(got.numpy(), want)


@ALL
def test_prepared_forward_runs_the_kernel_once_per_call_and_never_before(
    op_type: str, kernel_calls: list[str]
) -> None:
    op, inputs = make(op_type)
    run = op.prepare_forward(inputs)
    assert kernel_calls == []
    run()
    run()
    assert kernel_calls == [op_type, op_type]


@ALL
def test_prepared_backward_runs_only_the_backward(
    op_type: str, kernel_calls: list[str], no_conversions: Callable[..., Any]
) -> None:
    op, inputs = make(op_type)
    grads = default_grad_outputs(op.forward(inputs), seed=0)
    kernel_calls.clear()
    run = op.prepare_backward(grads, inputs)
    assert kernel_calls == [op_type], "the graph is built once, when preparing"
    first = no_conversions(run, OWN_WORK.get(op_type, set()))
    second = no_conversions(run, OWN_WORK.get(op_type, set()))
    assert kernel_calls == [op_type], "the timed backward ran the forward again"
    differentiable = [i for i in range(len(inputs)) if not op.declares_no_gradient(i)]
    assert len(first) == len(differentiable)
    assert all(isinstance(g, torch.Tensor) for g in first)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    numpy_grads = [g for g in op.backward(grads, inputs) if g is not None]
    for got, want in zip(first, numpy_grads, strict=True):
        np.testing.assert_array_equal(got.numpy(), want)


def test_prepared_backward_differentiates_only_floating_data_inputs() -> None:
    op, inputs = make("SoftmaxCrossEntropyLoss")
    grads = default_grad_outputs(op.forward(inputs), seed=0)
    run = op.prepare_backward(grads, inputs)
    (scores,) = run()
    assert scores.shape == inputs[0].shape
    assert [g is None for g in op.backward(grads, inputs)] == [False, True, True]


@ALL
def test_cpu_callables_never_synchronize(op_type: str, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[Any] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: synced.append(a))
    op, inputs = make(op_type)
    op.prepare_forward(inputs)()
    grads = default_grad_outputs(op.forward(inputs), seed=0)
    op.prepare_backward(grads, inputs)()
    assert op.device == "cpu" and synced == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@ALL
def test_cuda_callables_synchronize_before_returning(
    op_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Any] = []
    real = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: (synced.append(a), real(*a)))
    op, inputs = make(op_type, TorchBackend("cuda"))
    assert op.device.startswith("cuda")
    run = op.prepare_forward(inputs)
    assert all(t.is_cuda for t in closure_tensors(run))
    synced.clear()
    run()
    assert len(synced) == 1
    grads = default_grad_outputs(op.forward(inputs), seed=0)
    backward = op.prepare_backward(grads, inputs)
    synced.clear()
    backward()
    assert len(synced) == 1
