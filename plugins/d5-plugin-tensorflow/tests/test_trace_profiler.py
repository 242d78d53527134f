"""TensorFlow's profiler in traced runs (the ``d5_trace_profiler`` hook): offered for the
plugin's executors only, its events Chrome complete events named by TensorFlow's ops, on
the trace's time base, and nothing left running or on disk after ``stop``."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from d5_plugin_tensorflow import plugin
from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.executor import TensorFlowExecutor
from d5_plugin_tensorflow.trace import TensorFlowTraceProfiler, active, events_from_xspace
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from d5core.api import (
    MetricBus,
    TraceProfiler,
    get_plugin_manager,
    trace_clock_us,
    use_bus,
    wall_ns_to_trace_us,
)
from d5core.testing.executors import build_network, make_feeds, with_loss
from d5core.testing.networks import cnn, feeds_for
from d5core.testing.trace import check_trace_events as check_events

tf = tensorflow()

#: How far an event may lie outside the clock readings around the work it records (µs).
SLACK_US = 1000.0
RUNS = 3


@pytest.fixture
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Temporary directories are made under ``tmp_path``, to see what is left there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _profiler() -> TensorFlowTraceProfiler:
    profiler = plugin.d5_trace_profiler("tensorflow")
    assert isinstance(profiler, TensorFlowTraceProfiler)
    return profiler


def _ops(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if "op_type" in e.get("args", {})]


@pytest.mark.parametrize("executor", ["tensorflow", "tensorflow-xla"])
def test_the_hook_offers_the_profiler_for_the_plugins_executors(executor: str) -> None:
    outcomes = get_plugin_manager().call_each(
        "d5_trace_profiler", executor=executor, level="framework", subject=None
    )
    ours = [o.result for o in outcomes if isinstance(o.result, TensorFlowTraceProfiler)]
    assert len(ours) == 1
    assert isinstance(ours[0], TraceProfiler)
    assert ours[0].name == "tensorflow.profiler"


@pytest.mark.parametrize("executor", ["torch", "mxnet", "onnxruntime", "numpy"])
def test_the_hook_offers_nothing_for_other_executors(executor: str) -> None:
    assert plugin.d5_trace_profiler(executor) is None
    outcomes = get_plugin_manager().call_each(
        "d5_trace_profiler", executor=executor, level="full", subject=None
    )
    assert not [o for o in outcomes if isinstance(o.result, TensorFlowTraceProfiler)]


def test_traced_inference_gives_conforming_op_events_between_the_clock_readings() -> None:
    model = cnn(loss=False)
    ex = TensorFlowExecutor(model)
    profiler = _profiler()
    before = trace_clock_us()
    profiler.start()
    t0 = trace_clock_us()
    run = ex.prepare_inference(feeds_for(model))
    for _ in range(RUNS):
        run()
    t1 = trace_clock_us()
    events = profiler.stop()
    after = trace_clock_us()

    assert check_events([{**e, "pid": 1} for e in events]) == []
    assert {e["ph"] for e in events} == {"X"}
    ops = _ops(events)
    assert ops
    for e in ops:
        assert t0 - SLACK_US <= e["ts"] and e["ts"] + e["dur"] <= t1 + SLACK_US, e
    for e in events:
        assert before - SLACK_US <= e["ts"] and e["ts"] + e["dur"] <= after + SLACK_US, e
    # Ops carry the name scope of the ONNX node they compute, and each run runs them once.
    by_scope = ex._programs[False].by_scope
    gemm = next(scope for scope, (_, op_type) in by_scope.items() if op_type == "Gemm")
    conv = {scope for scope, (_, op_type) in by_scope.items() if op_type == "Conv"}
    matmuls = [
        e for e in ops if e["name"].startswith(gemm + "/") and "MatMul" in e["args"]["op_type"]
    ]
    assert len(matmuls) == RUNS
    assert conv <= {e["name"].split("/")[0] for e in ops if "Conv2D" in e["args"]["op_type"]}


def test_a_traced_training_step_shows_gradient_ops() -> None:
    net, loss = with_loss(build_network("lenet5", seed=0))
    ex = TensorFlowExecutor(net)
    profiler = _profiler()
    profiler.start()
    t0 = trace_clock_us()
    step = ex.prepare_train_step(make_feeds(net, 2, seed=0), loss)
    step()
    t1 = trace_clock_us()
    events = profiler.stop()
    ops = _ops(events)
    assert any(e["name"].startswith("gradient_tape/") for e in ops)
    assert all(t0 - SLACK_US <= e["ts"] <= t1 + SLACK_US for e in ops)


def test_the_executor_runs_untraced_after_stop_and_nothing_is_left_on_disk(
    own_tmp: Path,
) -> None:
    model = cnn(loss=False)
    ex = TensorFlowExecutor(model)
    feeds = feeds_for(model)
    profiler = _profiler()
    profiler.start()
    assert len(list(own_tmp.iterdir())) == 1  # the session's log directory
    traced = cast(dict[str, Any], ex.prepare_inference(feeds)())
    assert _ops(profiler.stop())
    assert list(own_tmp.iterdir()) == []

    run = ex.prepare_inference(feeds)
    untraced = cast(dict[str, Any], run())
    for name, value in traced.items():
        np.testing.assert_array_equal(np.asarray(untraced[name]), np.asarray(value))
    # No session is left running: a new one starts, and sees none of the runs before it.
    later = _profiler()
    later.start()
    assert not _ops(later.stop())
    assert list(own_tmp.iterdir()) == []


def test_a_running_session_says_tensorflows_profiler_is_taken() -> None:
    profiler = _profiler()
    assert not active()
    profiler.start()
    try:
        assert active()
    finally:
        profiler.stop()
    assert not active()


def test_a_traced_inference_runs_while_the_recorder_listens_to_every_event() -> None:
    model = cnn(loss=False)
    ex = TensorFlowExecutor(model)
    profiler = _profiler()
    with use_bus(MetricBus()) as bus:
        bus.subscribe_all(lambda event: None)  # as d5's trace recorder does
        profiler.start()
        try:
            run = ex.prepare_inference(feeds_for(model))
            outputs = run()
        finally:
            events = profiler.stop()
    assert _ops(events)
    plain = TensorFlowExecutor(model).prepare_inference(feeds_for(model))()
    assert {k: np.shape(v) for k, v in outputs.items()} == {
        k: np.shape(v) for k, v in plain.items()
    }


def test_inference_with_a_node_listener_returns_every_output_whole() -> None:
    # the per-node path (a listener of graph.node, as --breakdown) once zipped the rows of
    # the first output with the output names
    model = cnn(loss=False)
    plain = TensorFlowExecutor(model).prepare_inference(feeds_for(model))()
    with use_bus(MetricBus()) as bus:
        bus.subscribe("graph.node.end", lambda event: None)
        heard = TensorFlowExecutor(model).prepare_inference(feeds_for(model))()
    assert list(heard) == list(plain)
    for name, value in plain.items():
        np.testing.assert_allclose(heard[name], value, rtol=1e-5, atol=1e-6)


def test_a_profiler_that_cannot_start_leaves_no_directory(own_tmp: Path) -> None:
    first, second = _profiler(), _profiler()
    first.start()
    try:
        with pytest.raises(Exception):  # noqa: B017 - TensorFlow's error type varies
            second.start()
        assert len(list(own_tmp.iterdir())) == 1
    finally:
        first.stop()
    with pytest.raises(RuntimeError, match="not started"):
        second.stop()


def _space(start_ns: int, relative: bool) -> bytes:
    """An XSpace with one op event and two runtime events, 5 µs into a line that begins
    2 µs after ``start_ns``: its time relative to the start or absolute."""
    space = xplane_pb2.XSpace()
    env = space.planes.add(name="Task Environment")
    env.stat_metadata[1].name = "profile_start_time"
    env.stats.add(metadata_id=1, uint64_value=start_ns)
    plane = space.planes.add(name="/host:CPU")
    plane.event_metadata[1].name = "dense/MatMul:_MklMatMul"
    plane.event_metadata[1].display_name = "_MklMatMul"
    plane.event_metadata[2].name = "EagerExecute"
    plane.event_metadata[3].name = "ThreadpoolListener::Record"
    plane.stat_metadata[1].name = "eager_op"
    plane.stat_metadata[2].name = "__inference_f_9"
    plane.stat_metadata[3].name = "_p"
    line = plane.lines.add(id=7, name="python", timestamp_ns=2000 if relative else start_ns + 2000)
    line.events.add(metadata_id=1, offset_ps=5_000_000, duration_ps=3_000_000)
    runtime = line.events.add(metadata_id=2, offset_ps=1_000_000, duration_ps=9_000_000)
    runtime.stats.add(metadata_id=1, ref_value=2)
    runtime.stats.add(metadata_id=3, uint64_value=12)
    line.events.add(metadata_id=3, offset_ps=6_000_000, duration_ps=0)
    return bytes(space.SerializeToString())


@pytest.mark.parametrize("relative", [True, False])
def test_xspace_events_are_placed_from_the_wall_clock_start(relative: bool) -> None:
    start_ns = time.time_ns()
    events = events_from_xspace(_space(start_ns, relative))
    base = wall_ns_to_trace_us(start_ns)
    assert [e["name"] for e in events] == ["EagerExecute", "dense/MatMul"]  # marker dropped
    runtime, op = events
    assert op["args"] == {"op_type": "_MklMatMul"}
    assert runtime["args"] == {"eager_op": "__inference_f_9"}  # a reference, by name
    assert op["tid"] == runtime["tid"] == "python"
    assert op["ts"] - runtime["ts"] == pytest.approx(4.0, abs=1e-6)
    assert op["dur"] == pytest.approx(3.0) and runtime["dur"] == pytest.approx(9.0)
    assert op["ts"] == pytest.approx(base + 7.0, abs=1.0)  # the clocks' offset, read twice
