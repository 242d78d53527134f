"""MXNet's profiler in traced runs (the ``d5_trace_profiler`` hook): offered for the
plugin's executor only, its operators' begin and end events as Chrome complete events on
the trace's time base, memory counters at level ``full``, and nothing left running or on
disk after ``stop``."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from d5_plugin_mxnet import plugin
from d5_plugin_mxnet._mx import mxnet
from d5_plugin_mxnet.executor import MXNetExecutor
from d5_plugin_mxnet.trace import MXNetTraceProfiler, events_from_dump

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

mx = mxnet()

#: How far an event may lie outside the clock readings around the work it records (µs).
SLACK_US = 1000.0
RUNS = 3


@pytest.fixture
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Temporary directories are made under ``tmp_path``, to see what is left there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _profiler(level: str = "framework") -> MXNetTraceProfiler:
    profiler = plugin.d5_trace_profiler("mxnet", level)
    assert isinstance(profiler, MXNetTraceProfiler)
    return profiler


def _operators(events: list[dict[str, Any]]) -> set[str]:
    """The operators the complete events ran, bulks split into theirs."""
    return {op for e in events if e["ph"] == "X" for op in e["name"].split(",")}


def test_the_hook_offers_the_profiler_for_the_plugins_executor() -> None:
    outcomes = get_plugin_manager().call_each(
        "d5_trace_profiler", executor="mxnet", level="framework", subject=None
    )
    ours = [o.result for o in outcomes if isinstance(o.result, MXNetTraceProfiler)]
    assert len(ours) == 1
    assert isinstance(ours[0], TraceProfiler)
    assert ours[0].name == "mxnet.profiler"


@pytest.mark.parametrize("executor", ["tensorflow", "torch", "onnxruntime", "numpy"])
def test_the_hook_offers_nothing_for_other_executors(executor: str) -> None:
    assert plugin.d5_trace_profiler(executor, "framework") is None
    outcomes = get_plugin_manager().call_each(
        "d5_trace_profiler", executor=executor, level="full", subject=None
    )
    assert not [o for o in outcomes if isinstance(o.result, MXNetTraceProfiler)]


def test_traced_inference_gives_conforming_operator_events_between_the_clock_readings() -> None:
    model = cnn(loss=False)
    ex = MXNetExecutor(model)
    profiler = _profiler()
    before = trace_clock_us()
    profiler.start()
    t0 = trace_clock_us()
    run = ex.prepare_inference(feeds_for(model))
    for _ in range(RUNS):
        run()
    mx.nd.waitall()
    t1 = trace_clock_us()
    events = profiler.stop()
    after = trace_clock_us()

    assert check_events([{**e, "pid": 1} for e in events]) == []
    assert {e["ph"] for e in events} == {"X"}  # no memory counters below level full
    for e in events:
        assert t0 - SLACK_US <= e["ts"] and e["ts"] + e["dur"] <= t1 + SLACK_US, e
    assert before < t0 and t1 < after
    # The graph's forward pass runs as bulks of operators, one per run.
    assert {"Convolution", "FullyConnected"} <= _operators(events)
    graph = [e for e in events if "FullyConnected" in e["name"].split(",")]
    assert len(graph) == RUNS
    assert all("FullyConnected" in e["args"]["operators"] for e in graph if "," in e["name"])
    assert all(isinstance(e["tid"], str) and e["tid"].startswith("mxnet ") for e in events)


def test_while_the_recorder_listens_each_node_is_an_operator_event_of_its_own() -> None:
    """d5's trace recorder listens to every bus event, graph nodes' included: the
    executor then runs node by node, and no operator is in a bulk."""
    model = cnn(loss=False)
    ex = MXNetExecutor(model)
    profiler = _profiler()
    with use_bus(MetricBus()) as bus:
        bus.subscribe_all(lambda event: None)  # as d5's trace recorder does
        profiler.start()
        t0 = trace_clock_us()
        ex.prepare_inference(feeds_for(model))()
        mx.nd.waitall()
        t1 = trace_clock_us()
        events = profiler.stop()
    names = {e["name"] for e in events}
    assert {"Convolution", "FullyConnected"} <= names
    assert all(t0 - SLACK_US <= e["ts"] and e["ts"] + e["dur"] <= t1 + SLACK_US for e in events)


def test_a_traced_training_step_shows_backward_operators() -> None:
    net, loss = with_loss(build_network("lenet5", seed=0))
    ex = MXNetExecutor(net)
    profiler = _profiler()
    profiler.start()
    t0 = trace_clock_us()
    step = ex.prepare_train_step(make_feeds(net, 2, seed=0), loss)
    step()
    mx.nd.waitall()
    t1 = trace_clock_us()
    events = profiler.stop()
    assert "_backward_FullyConnected" in _operators(events)
    assert all(t0 - SLACK_US <= e["ts"] <= t1 + SLACK_US for e in events)


def test_level_full_adds_memory_counters() -> None:
    profiler = _profiler("full")
    profiler.start()
    t0 = trace_clock_us()
    mx.nd.dot(mx.nd.ones((64, 64)), mx.nd.ones((64, 64))).wait_to_read()
    t1 = trace_clock_us()
    events = profiler.stop()
    counters = [e for e in events if e["ph"] == "C"]
    assert counters
    assert check_events([{**e, "pid": 1} for e in events]) == []
    assert all(t0 - SLACK_US <= e["ts"] <= t1 + SLACK_US for e in counters)
    assert "dot" in _operators(events)


def test_the_executor_runs_untraced_after_stop_and_nothing_is_left_on_disk(
    own_tmp: Path,
) -> None:
    model = cnn(loss=False)
    ex = MXNetExecutor(model)
    feeds = feeds_for(model)
    profiler = _profiler()
    profiler.start()
    assert len(list(own_tmp.iterdir())) == 1  # the session's output folder
    traced = cast(dict[str, Any], ex.prepare_inference(feeds)())
    assert "FullyConnected" in _operators(profiler.stop())
    assert list(own_tmp.iterdir()) == []

    run = ex.prepare_inference(feeds)
    untraced = cast(dict[str, Any], run())
    mx.nd.waitall()
    for name, value in traced.items():
        np.testing.assert_array_equal(untraced[name].asnumpy(), value.asnumpy())
    # Nothing was recorded after stop: a new session sees none of the runs before it.
    later = _profiler()
    later.start()
    assert "FullyConnected" not in _operators(later.stop())
    assert list(own_tmp.iterdir()) == []


def _dump(events: list[dict[str, Any]], head: bool, tail: bool) -> str:
    """Text as MXNet's dump writes it: events separated by commas, with the document's
    head on the first dump, a leading comma on the later ones, the tail when finished."""
    body = ",\n\n".join(json.dumps(e, indent=4) for e in events)
    text = '{\n    "traceEvents": [\n' + body if head else ",\n\n" + body
    return text + ('\n\n\n    ],\n    "displayTimeUnit": "ms"\n}\n' if tail else "\n")


@pytest.mark.parametrize(("head", "tail"), [(True, False), (False, False), (True, True)])
def test_a_dump_is_read_whole_or_as_a_fragment(head: bool, tail: bool) -> None:
    start = time.time_ns() // 1000
    raw = [
        {"ph": "M", "args": {"name": "cpu/0"}, "pid": 0, "name": "process_name"},
        {"name": "dot", "cat": "operator", "ph": "B", "ts": start, "pid": 0, "tid": 11},
        {"name": "relu", "cat": "operator", "ph": "B", "ts": start + 2, "pid": 0, "tid": 11},
        {"name": "relu", "cat": "operator", "ph": "E", "ts": start + 5, "pid": 0, "tid": 11},
        {"name": "dot", "cat": "operator", "ph": "E", "ts": start + 9, "pid": 0, "tid": 11},
        {"name": "dot", "ph": "b", "ts": start, "id": 1, "pid": 7, "tid": 11},
        {"name": "dot", "ph": "e", "ts": start + 9, "id": 1, "pid": 7, "tid": 11},
        {"name": "a,b", "cat": "operator", "ph": "B", "ts": start + 20, "pid": 0, "tid": 12},
        {"name": "a,b", "cat": "operator", "ph": "E", "ts": start + 24, "pid": 0, "tid": 12},
        {"name": "open", "cat": "operator", "ph": "B", "ts": start + 30, "pid": 0, "tid": 12},
    ]
    events = events_from_dump(_dump(raw, head, tail))
    assert [(e["name"], e["dur"]) for e in events] == [("dot", 9), ("relu", 3), ("a,b", 4)]
    dot, relu, bulk = events
    assert relu["ts"] - dot["ts"] == 2 and bulk["ts"] - dot["ts"] == 20  # exact differences
    assert dot["ts"] == pytest.approx(wall_ns_to_trace_us(start * 1000), abs=1.0)
    assert bulk["args"] == {"operators": ["a", "b"]}
    assert dot["tid"] == relu["tid"] != bulk["tid"]


def test_an_empty_dump_has_no_events() -> None:
    assert events_from_dump("") == []
    assert events_from_dump('{\n    "traceEvents": [\n') == []
