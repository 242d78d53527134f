"""ONNX Runtime's profiler in traced runs: offered for an onnxruntime executor only, the
executor's prepared steps profiled, events on d5's time base, and the executor as it was
after the profiler stops."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from d5_plugin_onnxruntime import plugin
from d5_plugin_onnxruntime.executor import OnnxRuntimeExecutor
from d5_plugin_onnxruntime.trace import OnnxRuntimeTraceProfiler
from onnx import TensorProto, helper, numpy_helper

from d5core.api import TraceProfiler, trace_clock_us
from d5core.testing.trace import check_trace_events as check_events

#: How far (µs) an event may lie outside the clock readings around it: ONNX Runtime
#: writes whole microseconds, and the offset between the clocks is read once.
SLACK_US = 200.0


def _model() -> onnx.ModelProto:
    """x (32, 128) -> Gemm "fc1" -> Tanh "act" -> MatMul "proj" -> y (32, 64)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((128, 128)).astype(np.float32), "W1"),
        numpy_helper.from_array(rng.standard_normal(128).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((128, 64)).astype(np.float32), "W2"),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], name="fc1"),
        helper.make_node("Tanh", ["h"], ["a"], name="act"),
        helper.make_node("MatMul", ["a", "W2"], ["y"], name="proj"),
    ]
    graph = helper.make_graph(
        nodes,
        "traced",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 64])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((32, 128)).astype(np.float32)}


def _traced_steps(
    profiler: TraceProfiler, executor: OnnxRuntimeExecutor, steps: int = 4
) -> tuple[list[dict[str, Any]], list[float]]:
    """Start ``profiler``, prepare the executor's inference (as d5 does, after
    starting) and run ``steps`` steps; the events and the trace clock around each step."""
    profiler.start()
    try:
        step = executor.prepare_inference(_feeds())
        readings = [trace_clock_us()]
        for _ in range(steps):
            step()
            readings.append(trace_clock_us())
    finally:
        events = profiler.stop()
    return events, readings


def _kernels(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((e for e in events if "op_type" in e["args"]), key=lambda e: e["ts"])


def test_the_hook_offers_a_profiler_for_an_onnxruntime_executor_only(
    d5_plugin_manager: Any,
) -> None:
    d5_plugin_manager.register(plugin, "onnxruntime")
    executor = OnnxRuntimeExecutor(_model(), threads=1)

    def offered(name: str, subject: object) -> list[Any]:
        outcomes = d5_plugin_manager.call_each(
            "d5_trace_profiler", executor=name, level="framework", subject=subject
        )
        return [o.result for o in outcomes if o.plugin == "onnxruntime"]

    (profiler,) = offered("onnxruntime", executor)
    assert isinstance(profiler, TraceProfiler) and profiler.name == "onnxruntime"
    # A training run (no instance) or something else to trace: nothing to profile.
    assert offered("onnxruntime", None) == [None]
    assert offered("onnxruntime", object()) == [None]
    for other in ("torch", "numpy", "tensorflow"):
        assert offered(other, executor) == [None]
    assert d5_plugin_manager.problems == []


def test_the_hook_never_imports_onnxruntime() -> None:
    code = (
        "import sys; from d5_plugin_onnxruntime import plugin\n"
        "assert plugin.d5_trace_profiler('onnxruntime', 'framework', None) is None\n"
        "assert plugin.d5_trace_profiler('torch', 'full', object()) is None\n"
        "print('onnxruntime' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_events_conform_to_the_trace_format() -> None:
    executor = OnnxRuntimeExecutor(_model(), threads=1)
    events, _ = _traced_steps(OnnxRuntimeTraceProfiler(executor), executor)
    assert events
    assert check_events([{**e, "pid": 1} for e in events]) == []
    assert {e["ph"] for e in events} == {"X"}


def test_node_events_are_named_after_the_nodes_with_their_operator_types() -> None:
    executor = OnnxRuntimeExecutor(_model(), threads=1)
    events, _ = _traced_steps(OnnxRuntimeTraceProfiler(executor), executor, steps=2)
    kernels = _kernels(events)
    # ONNX Runtime fuses the Tanh into the Gemm ("fused fc1", FusedGemm).
    named = {(e["name"], e["args"]["op_type"]) for e in kernels}
    assert ("proj", "MatMul") in named
    assert any("fc1" in name and "Gemm" in op for name, op in named)
    assert not any(e["name"].endswith("_kernel_time") for e in events)
    assert "model_run" in {e["name"] for e in events}
    assert {e["tid"] for e in kernels} == {threading.get_native_id()}


def test_events_of_each_step_lie_between_the_clock_readings_around_it() -> None:
    executor = OnnxRuntimeExecutor(_model(), threads=1)
    events, readings = _traced_steps(OnnxRuntimeTraceProfiler(executor), executor, steps=4)
    kernels = _kernels(events)
    per_step = len(kernels) // 4
    assert per_step >= 2 and len(kernels) == 4 * per_step
    for index, (before, after) in enumerate(itertools.pairwise(readings)):
        ours = kernels[per_step * index : per_step * (index + 1)]
        outside = [
            e for e in ours if e["ts"] < before - SLACK_US or e["ts"] + e["dur"] > after + SLACK_US
        ]
        assert outside == [], (index, before, after)


def test_level_full_adds_shapes_to_the_node_events() -> None:
    executor = OnnxRuntimeExecutor(_model(), threads=1)
    for level in ("framework", "full"):
        events, _ = _traced_steps(OnnxRuntimeTraceProfiler(executor, level), executor, steps=1)
        proj = next(e for e in _kernels(events) if e["name"] == "proj")
        if level == "full":
            assert proj["args"]["output_type_shape"] == [{"float": [32, 64]}]
        else:
            assert set(proj["args"]) == {"op_type", "provider"}


def test_after_stop_the_executor_runs_its_own_session_unprofiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    executor = OnnxRuntimeExecutor(_model(), threads=1)
    own = executor.session
    expected = executor.inference(_feeds())
    profiler = OnnxRuntimeTraceProfiler(executor)
    profiler.start()
    assert executor.session is not own
    assert executor.session.get_session_options().enable_profiling
    assert os.listdir(tmp_path)  # the profile's directory, until stop
    traced = executor.inference(_feeds())
    assert profiler.stop()
    assert executor.session is own
    assert not executor.session.get_session_options().enable_profiling
    assert os.listdir(tmp_path) == []  # the profile was deleted
    np.testing.assert_array_equal(traced["y"], expected["y"])
    np.testing.assert_array_equal(executor.inference(_feeds())["y"], expected["y"])
    assert profiler.stop() == []  # stopping twice records nothing more
