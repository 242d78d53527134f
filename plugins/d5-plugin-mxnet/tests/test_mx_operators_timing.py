"""What the prepared callables (the only code d5 times) do, and that their timings wait
for MXNet.

MXNet's engine is asynchronous on the CPU: ``prepare_forward`` and ``prepare_backward``
copy numpy arrays in once, and the callables they return only queue ``mx.nd`` work and
return ``mx.nd`` arrays at once (no ``asnumpy``, no ``waitall``). The operators say so
(``asynchronous``), so the measurement engine synchronizes through the plugin's
``d5_synchronize`` hook before every clock read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from d5_plugin_mxnet._mx import mxnet
from d5_plugin_mxnet.operators import OPERATORS, MXNetBackend

from d5core.api import TensorDescriptor, default_grad_outputs
from d5core.testing.operator_agreement import small_problems
from d5core.testing.operators import MeasureOptions, bench_ops, gemm_problem, suite, synchronizer_of

mx = mxnet()
#: One small problem per operator.
#: The kit's small problem of every operator this backend offers (it offers a subset of
#: the reference's).
CASES = {op: case for op, case in small_problems().items() if op in OPERATORS}

ALL = pytest.mark.parametrize("op_type", sorted(CASES))

#: Functions that move data between numpy and MXNet, or wait for MXNet.
CONVERSIONS: list[tuple[Any, str]] = [
    (mx.nd, "array"),
    (mx.nd, "waitall"),
    (mx.nd.NDArray, "asnumpy"),
    (mx.nd.NDArray, "wait_to_read"),
    (mx.nd.NDArray, "asscalar"),
    (np, "asarray"),
    (np, "array"),
]


def make(op_type: str) -> tuple[Any, list[np.ndarray]]:
    attributes, inputs = CASES[op_type]
    op = MXNetBackend().create(op_type, attributes, [TensorDescriptor.of(x) for x in inputs])
    return op, inputs


@pytest.fixture
def no_conversions(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], Any]], Any]:
    """Call a function while every conversion or waiting function raises."""

    def call(fn: Callable[[], Any]) -> Any:
        with monkeypatch.context() as patch:
            for owner, name in CONVERSIONS:

                def refuse(*args: Any, _name: str = name, **kwargs: Any) -> Any:
                    raise AssertionError(f"{_name} called inside the timed callable")

                patch.setattr(owner, name, refuse)
            return fn()

    return call


def test_every_operator_has_a_case() -> None:
    assert set(OPERATORS) <= set(small_problems())
    assert set(CASES) == set(OPERATORS)


@ALL
def test_prepared_forward_queues_mxnet_work_and_converts_nothing(
    op_type: str, no_conversions: Callable[[Callable[[], Any]], Any]
) -> None:
    op, inputs = make(op_type)
    assert op.asynchronous is True and op.device == "cpu"
    run = op.prepare_forward(inputs)
    outputs = no_conversions(run)
    assert isinstance(outputs, tuple) and outputs
    assert all(isinstance(t, mx.nd.NDArray) for t in outputs)
    for got, want in zip(outputs, op.forward(inputs), strict=True):
        np.testing.assert_array_equal(got.asnumpy().reshape(want.shape), want)


@ALL
def test_prepared_backward_runs_only_the_backward_pass(
    op_type: str, no_conversions: Callable[[Callable[[], Any]], Any]
) -> None:
    op, inputs = make(op_type)
    grads = default_grad_outputs(op.forward(inputs), seed=0)
    run = op.prepare_backward(grads, inputs)
    first = [g.asnumpy().copy() for g in no_conversions(run)]
    second = [g.asnumpy() for g in no_conversions(run)]
    if all(op.declares_no_gradient(i) for i in range(len(inputs))):  # Equal, Shape, ...
        assert first == [] and all(g is None for g in op.backward(grads, inputs))
        return
    assert first, "no gradient was computed"
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)  # written, not accumulated, on every call
    numpy_grads = [g for g in op.backward(grads, inputs) if g is not None]
    for got, want in zip(first, numpy_grads, strict=True):
        np.testing.assert_array_equal(got.reshape(want.shape), want)


def _large_gemm() -> tuple[Any, Callable[[], Any]]:
    a = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    op = MXNetBackend().create("Gemm", {}, [TensorDescriptor.of(a)] * 2)
    return op, op.prepare_forward([a, a])


def test_a_prepared_call_returns_before_mxnet_has_done_the_work() -> None:
    """Ten queued 512³ products take far longer to run than to queue: the callable
    returns first, and only the synchronizer d5 uses waits for them."""
    op, run = _large_gemm()
    run()
    mx.nd.waitall()
    start = time.perf_counter()
    for _ in range(10):
        (y,) = run()
    queued = time.perf_counter() - start
    sync = synchronizer_of(op)
    assert sync is not None, "an asynchronous operator must be synchronized on the CPU"
    sync()
    done = time.perf_counter() - start
    assert queued < done / 3, f"queueing took {queued:.4f} s of {done:.4f} s"
    assert np.isfinite(y.asnumpy()).all()


def test_bench_ops_times_the_finished_work_for_mxnet() -> None:
    """``d5 bench op``'s path: the median of a 512³ product, timed with the
    synchronizer, is the time of the work (at least a tenth of a hand loop that waits
    after each call), not the microseconds of queueing it."""
    problem = gemm_problem(512, 512, 512)
    options = MeasureOptions(time_budget_s=0.5, max_samples=20, min_samples=6)
    (timing,) = bench_ops([problem], ["mxnet"], options=options)
    assert timing.backend == "mxnet" and timing.measurement.details["asynchronous"] is True
    _, run = _large_gemm()
    waited = []
    for _ in range(5):
        start = time.perf_counter()
        run()[0].wait_to_read()
        waited.append(time.perf_counter() - start)
    assert timing.measurement.summary.median > min(waited) / 10


def test_bench_ops_runs_the_cpu_small_gemm_suite_beside_numpy() -> None:
    options = MeasureOptions(time_budget_s=0.05, max_samples=8, min_samples=6)
    problems = suite("cpu-small-gemm")[:1]
    timings = bench_ops(problems, ["numpy", "mxnet"], options=options)
    assert [t.backend for t in timings] == ["numpy", "mxnet"]
    assert all(t.measurement.summary.median > 0 for t in timings)
