"""The torch profiler of traced runs: offered for torch only, its events on d5's time
base and thread ids, and nothing left switched on after it stops."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
from d5_plugin_torch import plugin
from d5_plugin_torch.executor import TorchExecutor
from d5_plugin_torch.operators import TorchBackend
from d5_plugin_torch.trace import TorchTraceProfiler
from torch._C._autograd import _profiler_enabled

from d5core.api import TensorDescriptor, TraceProfiler, trace_clock_us
from d5core.testing.networks import feeds_for, mlp
from d5core.testing.trace import check_trace_events as check_events

#: How far (µs) an event may lie outside the clock readings around it: the offset
#: between the clocks is read once, and torch's approximate clock is converted linearly.
SLACK_US = 200.0


def _traced(
    profiler: TraceProfiler, prepare: Callable[[], Callable[[], object]], steps: int = 3
) -> tuple[list[dict[str, Any]], float, float]:
    """Run ``steps`` prepared steps under ``profiler`` (started before preparing, as
    d5 does); the events and the trace clock just before and after the steps."""
    profiler.start()
    try:
        step = prepare()
        before = trace_clock_us()
        for _ in range(steps):
            step()
        after = trace_clock_us()
    finally:
        events = profiler.stop()
    return events, before, after


def _inference(executor: TorchExecutor) -> Callable[[], Callable[[], object]]:
    feeds = feeds_for(mlp(loss=False))
    return lambda: executor.prepare_inference(feeds)


def _within(events: list[dict[str, Any]], before: float, after: float) -> list[dict[str, Any]]:
    return [
        e for e in events if before - SLACK_US <= e["ts"] and e["ts"] + e["dur"] <= after + SLACK_US
    ]


def test_the_hook_offers_the_profiler_for_torch_and_nothing_for_other_executors(
    d5_plugin_manager: Any,
) -> None:
    d5_plugin_manager.register(plugin, "torch")
    for subject in (None, TorchBackend(), object()):
        outcomes = d5_plugin_manager.call_each(
            "d5_trace_profiler", executor="torch", level="framework", subject=subject
        )
        offered = [o.result for o in outcomes if o.result is not None]
        assert len(offered) == 1 and isinstance(offered[0], TraceProfiler)
        assert offered[0].name == "torch.profiler"
    for other in ("onnxruntime", "numpy", "tensorflow", "torchdist"):
        outcomes = d5_plugin_manager.call_each(
            "d5_trace_profiler", executor=other, level="framework", subject=None
        )
        assert [o.result for o in outcomes if o.plugin == "torch"] == [None]
    assert d5_plugin_manager.problems == []


def test_offering_the_profiler_does_not_import_torch() -> None:
    code = (
        "import sys; from d5_plugin_torch import plugin\n"
        "assert plugin.d5_trace_profiler('torch', 'framework') is not None\n"
        "assert plugin.d5_trace_profiler('numpy', 'full') is None\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_events_conform_to_the_trace_format() -> None:
    events, _, _ = _traced(TorchTraceProfiler(), _inference(TorchExecutor(mlp(loss=False))))
    assert events
    assert check_events([{**e, "pid": 1} for e in events]) == []
    assert {e["ph"] for e in events} == {"X"}


def test_events_of_each_step_lie_between_the_clock_readings_around_it() -> None:
    executor = TorchExecutor(mlp(loss=False))
    profiler = TorchTraceProfiler()
    profiler.start()
    step = _inference(executor)()
    readings = [trace_clock_us()]
    for _ in range(5):
        step()
        readings.append(trace_clock_us())
    events = profiler.stop()
    products = sorted(
        (e for e in events if e["name"] in ("aten::mm", "aten::addmm")), key=lambda e: e["ts"]
    )
    # Three matrix products per step (two Gemm, one MatMul), each in its own step.
    assert len(products) == 3 * 5
    for index, (before, after) in enumerate(itertools.pairwise(readings)):
        ours = products[3 * index : 3 * index + 3]
        assert _within(ours, before, after) == ours, (index, readings, ours)


def test_inference_records_the_matrix_products_on_this_thread() -> None:
    events, _, _ = _traced(TorchTraceProfiler(), _inference(TorchExecutor(mlp(loss=False))))
    names = {e["name"] for e in events}
    assert "aten::mm" in names or "aten::addmm" in names
    assert {"aten::tanh", "aten::sigmoid"} <= names
    assert {e["tid"] for e in events} == {threading.get_native_id()}


def test_a_train_step_records_autograd_and_shapes_only_at_level_full() -> None:
    model = mlp()
    feeds = feeds_for(model)
    executor = TorchExecutor(model)
    for level in ("framework", "full"):
        events, before, after = _traced(
            TorchTraceProfiler(level), lambda: executor.prepare_train_step(feeds, "loss")
        )
        steps = _within(events, before, after)
        assert any(e["name"].startswith("autograd::engine::evaluate_function") for e in steps)
        shaped = [e for e in steps if "input_shapes" in e["args"]]
        if level == "full":
            linear = next(e for e in shaped if e["name"] == "aten::linear")
            assert [4, 6] in linear["args"]["input_shapes"]
        else:
            assert shaped == []


def test_level_full_records_other_threads_under_their_os_ids() -> None:
    a = torch.ones(8, 8)
    ran: list[int] = []

    def work() -> None:
        ran.append(threading.get_native_id())
        torch.mm(a, a)

    for level in ("framework", "full"):
        profiler = TorchTraceProfiler(level)
        profiler.start()
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        events = profiler.stop()
        other = [e for e in events if e["name"] == "aten::mm" and e["tid"] == ran[-1]]
        assert len(other) == (1 if level == "full" else 0)


def test_after_stop_the_profiler_is_off_and_the_executor_computes_the_same() -> None:
    executor = TorchExecutor(mlp(loss=False))
    feeds = feeds_for(mlp(loss=False))
    expected = executor.inference(feeds)
    profiler = TorchTraceProfiler()
    profiler.start()
    assert _profiler_enabled()
    traced = executor.inference(feeds)
    profiler.stop()
    assert not _profiler_enabled()
    after = executor.inference(feeds)
    for name, value in expected.items():
        np.testing.assert_array_equal(traced[name], value)
        np.testing.assert_array_equal(after[name], value)
    assert profiler.stop() == []  # stopping twice records nothing more


def test_an_operator_backend_step_is_recorded() -> None:
    x = np.linspace(-1, 1, 256, dtype=np.float32).reshape(16, 16)
    relu = TorchBackend().create("Relu", {}, [TensorDescriptor.of(x)])
    events, before, after = _traced(TorchTraceProfiler(), lambda: relu.prepare_forward([x]))
    assert [e["name"] for e in _within(events, before, after)].count("aten::relu") == 3


@pytest.fixture(autouse=True)
def _no_profiler_left_on() -> Iterator[None]:
    yield
    assert not _profiler_enabled()
