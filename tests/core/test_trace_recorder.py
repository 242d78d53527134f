"""One process's share of a trace (d5core.trace.recorder and the traced passes of
d5core.trace.capture), without any framework: the metric bus's spans and instants become
Chrome events on the bus's clock, level ``full`` adds the process's counters, and the
profilers a (fake) plugin offers through ``d5_trace_profiler`` run around the traced
work, started before it is prepared; one that fails is left out and named in the notes."""

from __future__ import annotations

import time
import types
from collections.abc import Callable
from typing import Any

import pytest

from d5core.bus import MetricBus, use_bus
from d5core.errors import UsageError
from d5core.hookspecs import hookimpl
from d5core.plugins import PluginWarning
from d5core.trace import recorder as recorder_module
from d5core.trace.capture import TRACED_STEPS, trace_steps, traced_block
from d5core.trace.document import D5_CATEGORY, check_events, step_events
from d5core.trace.recorder import TraceRecorder, check_level
from d5core.tracing import TRACE_LEVELS, trace_clock_us


class FakeProfiler:
    """A framework's profiler: says when it starts and stops (in ``log``), and returns
    ``events`` when stopped; ``fail`` makes ``start`` or ``stop`` raise."""

    def __init__(
        self, name: str, events: list[dict[str, Any]], log: list[str], fail: str = ""
    ) -> None:
        self.name = name
        self.events = events
        self.log = log
        self.fail = fail

    def start(self) -> None:
        self.log.append(f"start {self.name}")
        if self.fail == "start":
            raise RuntimeError("no profiler session today")

    def stop(self) -> list[dict[str, Any]]:
        self.log.append(f"stop {self.name}")
        if self.fail == "stop":
            raise RuntimeError("the profile was lost")
        return [dict(e) for e in self.events]


def offering(
    executor: str, make: Callable[[], Any], calls: list[tuple[str, str, object]] | None = None
) -> Any:
    """A plugin whose ``d5_trace_profiler`` offers ``make()`` for ``executor`` only."""

    def d5_trace_profiler(executor: str, level: str, subject: object) -> Any:
        if calls is not None:
            calls.append((executor, level, subject))
        return make() if executor == wanted else None

    wanted = executor
    return types.SimpleNamespace(d5_trace_profiler=hookimpl(d5_trace_profiler))


def _op(name: str, ts: float, dur: float, tid: int | str = 7, **extra: Any) -> dict[str, Any]:
    return {"name": name, "ph": "X", "ts": ts, "dur": dur, "tid": tid, **extra}


# -- levels ------------------------------------------------------------------------------


@pytest.mark.parametrize("level", TRACE_LEVELS)
def test_every_trace_level_is_accepted(level: str) -> None:
    assert check_level(level) == level
    assert TraceRecorder(level, "d5 test").level == level


@pytest.mark.parametrize("level", ["bogus", "", "Step", "steps"])
def test_an_unknown_level_is_refused_naming_the_levels(level: str) -> None:
    with pytest.raises(UsageError, match="unknown trace level") as caught:
        TraceRecorder(level, "d5 test")
    assert all(name in str(caught.value) for name in TRACE_LEVELS)


# -- the bus -----------------------------------------------------------------------------


def test_bus_spans_become_complete_events_on_the_bus_clock() -> None:
    recorder = TraceRecorder("step", "d5 test")
    bus = MetricBus()
    recorder.attach(bus)
    before = trace_clock_us()
    with bus.span("train.step", level=2, step=3, shape=[1, 2]) as span:
        time.sleep(0.002)
        span.set(loss=0.5)
    after = trace_clock_us()
    (event,) = recorder.events
    assert event["name"] == "train.step" and event["ph"] == "X"
    assert event["cat"] == D5_CATEGORY and event["pid"] == recorder.pid
    assert before <= event["ts"] and event["ts"] + event["dur"] <= after
    assert event["dur"] >= 2000.0
    # scalars kept with the level; arrays and the duration itself left out
    assert event["args"] == {"level": 2, "step": 3, "loss": 0.5}


def test_a_bus_instant_becomes_an_instant_event_and_unsubscribing_stops_recording() -> None:
    recorder = TraceRecorder("step", "d5 test")
    bus = MetricBus()
    unsubscribe = recorder.attach(bus)
    bus.publish("validation", level=1, passed=True)
    unsubscribe()
    bus.publish("validation", level=1, passed=False)
    with bus.span("train.step"):
        pass
    (event,) = recorder.events
    assert event["ph"] == "i" and event["name"] == "validation"
    assert event["args"] == {"level": 1, "passed": True}


def test_level_full_adds_the_process_counters_at_each_training_step_end() -> None:
    recorders = {level: TraceRecorder(level, "d5 test") for level in ("step", "full")}
    bus = MetricBus()
    for recorder in recorders.values():
        recorder.attach(bus)
    for step in range(2):
        with bus.span("train.step", step=step):
            pass
    assert {e["ph"] for e in recorders["step"].events} == {"X"}
    counters = [e for e in recorders["full"].events if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"cpu time (ms)", "page faults", "context switches"}
    assert len(counters) == 2 * 3
    step_ends = sorted(e["ts"] + e["dur"] for e in recorders["full"].events if e["ph"] == "X")
    assert sorted({e["ts"] for e in counters}) == pytest.approx(step_ends)
    assert check_events(recorders["full"].document()["traceEvents"]) == []


def test_a_span_of_the_recorder_times_its_block_and_at_full_brackets_it_with_counters() -> None:
    for level, counters in (("framework", 0), ("full", 6)):
        recorder = TraceRecorder(level, "d5 test")
        with recorder.span("prepare", subject="fake"):
            time.sleep(0.001)
        spans = [e for e in recorder.events if e["ph"] == "X"]
        assert [(e["name"], e["args"]) for e in spans] == [("prepare", {"subject": "fake"})]
        assert spans[0]["dur"] >= 1000.0
        assert sum(e["ph"] == "C" for e in recorder.events) == counters


def test_events_past_the_cap_are_dropped_and_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorder_module, "MAX_EVENTS", 3)
    recorder = TraceRecorder("step", "d5 test")
    bus = MetricBus()
    recorder.attach(bus)
    for _ in range(5):
        bus.publish("validation")
    assert len(recorder.events) == 3 and recorder.dropped == 2
    assert any("2 events" in note for note in recorder.document()["otherData"]["notes"])


# -- the document --------------------------------------------------------------------------


def test_the_document_names_the_process_and_every_thread_it_holds() -> None:
    recorder = TraceRecorder("step", "rank 1", rank=1)
    recorder.extra_tracks[1] = "LoadGen performance run of fake"
    recorder.add(_op("bench.step", 1.0, 2.0, tid=4242, cat=D5_CATEGORY))
    recorder.add(_op("IssueQuery", 1.0, 1.0, tid=0, cat="loadgen"), pid=1)
    document = recorder.document(run_id="r1", kind="net")
    events = document["traceEvents"]
    assert check_events(events) == []
    meta = {(e["name"], e["pid"], e["tid"]): e["args"] for e in events if e["ph"] == "M"}
    assert meta[("process_name", recorder.pid, 0)]["name"].startswith("rank 1")
    assert meta[("process_sort_index", recorder.pid, 0)] == {"sort_index": 1}
    assert meta[("thread_name", recorder.pid, 4242)] == {"name": "thread 4242"}
    assert meta[("process_name", 1, 0)] == {"name": "LoadGen performance run of fake"}
    other = document["otherData"]
    assert other["run_id"] == "r1" and other["kind"] == "net"
    assert other["level"] == "step" and other["rank"] == 1
    assert other["profilers"] == [] and other["notes"] == []


# -- framework profilers -------------------------------------------------------------------


def test_at_level_step_no_profiler_is_asked_for(d5_plugin_manager: Any) -> None:
    calls: list[tuple[str, str, object]] = []
    log: list[str] = []
    d5_plugin_manager.register(
        offering("fake", lambda: FakeProfiler("fake.prof", [], log), calls), "fake"
    )
    recorder = TraceRecorder("step", "d5 test")
    with recorder.framework("fake", object()):
        pass
    assert calls == [] and log == [] and recorder.profilers == []


@pytest.mark.parametrize("level", ["framework", "full"])
def test_the_offered_profiler_runs_around_the_block_and_its_events_join(
    d5_plugin_manager: Any, level: str
) -> None:
    calls: list[tuple[str, str, object]] = []
    log: list[str] = []
    now = trace_clock_us()
    events = [
        _op("fake::matmul", now, 5.0, tid=9, args={"shape": "2x2"}),
        _op("fake::pool", now + 10, 5.0, tid="worker pool", cat="fake.kernels"),
    ]
    d5_plugin_manager.register(
        offering("fake", lambda: FakeProfiler("fake.prof", events, log), calls), "fake"
    )
    subject = object()
    recorder = TraceRecorder(level, "d5 test")
    with recorder.framework("fake", subject):
        log.append("work")
    assert calls == [("fake", level, subject)]
    assert log == ["start fake.prof", "work", "stop fake.prof"]
    joined = {e["name"]: e for e in recorder.events}
    assert joined["fake::matmul"]["cat"] == "fake.prof"  # its category: the profiler's name
    assert joined["fake::pool"]["cat"] == "fake.kernels"  # unless it names one
    assert all(e["pid"] == recorder.pid for e in joined.values())
    pool_tid = joined["fake::pool"]["tid"]
    assert isinstance(pool_tid, int)
    document = recorder.document()
    assert check_events(document["traceEvents"]) == []
    names = {
        e["tid"]: e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name"
    }
    assert names[pool_tid] == "worker pool" and 9 in names
    assert document["otherData"]["profilers"] == ["fake.prof"]


def test_a_profiler_offered_for_another_executor_stays_out(d5_plugin_manager: Any) -> None:
    log: list[str] = []
    d5_plugin_manager.register(offering("other", lambda: FakeProfiler("other.prof", [], log)), "o")
    recorder = TraceRecorder("framework", "d5 test")
    with recorder.framework("fake"):
        pass
    assert log == [] and recorder.profilers == [] and recorder.notes == []


@pytest.mark.parametrize(
    ("fail", "said"), [("start", "did not start"), ("stop", "failed when stopped")]
)
def test_a_failing_profiler_is_left_out_and_noted_while_the_others_go_on(
    d5_plugin_manager: Any, fail: str, said: str
) -> None:
    log: list[str] = []
    now = trace_clock_us()
    good = [_op("good::op", now, 1.0)]
    d5_plugin_manager.register(
        offering("fake", lambda: FakeProfiler("bad.prof", [_op("bad::op", now, 1.0)], log, fail)),
        "badplugin",
    )
    d5_plugin_manager.register(
        offering("fake", lambda: FakeProfiler("good.prof", good, log)), "goodplugin"
    )
    recorder = TraceRecorder("framework", "d5 test")
    ran = False
    with recorder.framework("fake"):
        ran = True
    assert ran
    assert [e["name"] for e in recorder.events] == ["good::op"]
    assert recorder.profilers == ["good.prof"]
    (note,) = recorder.document()["otherData"]["notes"]
    assert "badplugin" in note and "bad.prof" in note and said in note


def test_a_plugin_whose_hook_raises_is_named_in_the_notes(d5_plugin_manager: Any) -> None:
    def d5_trace_profiler(executor: str) -> Any:
        raise ImportError("no module named fakeframework")

    d5_plugin_manager.register(
        types.SimpleNamespace(d5_trace_profiler=hookimpl(d5_trace_profiler)), "broken"
    )
    recorder = TraceRecorder("full", "d5 test")
    with pytest.warns(PluginWarning, match="broken"), recorder.framework("fake"):
        pass
    (note,) = recorder.notes
    assert "broken" in note and "fakeframework" in note


# -- traced passes -------------------------------------------------------------------------


def test_a_traced_pass_starts_the_profilers_before_preparing_and_runs_ten_steps(
    d5_plugin_manager: Any,
) -> None:
    log: list[str] = []
    d5_plugin_manager.register(offering("fake", lambda: FakeProfiler("fake.prof", [], log)), "fake")
    recorder = TraceRecorder("framework", "d5 test")

    def prepare() -> Callable[[], None]:
        log.append("prepare")
        return lambda: log.append("call")

    trace_steps(recorder, "fake", None, prepare, model="m")
    assert log == ["start fake.prof", "prepare", *["call"] * (TRACED_STEPS + 1), "stop fake.prof"]
    document = recorder.document()
    steps = step_events(document, "fake")
    assert len(steps) == TRACED_STEPS
    assert [s["args"]["step"] for s in steps] == list(range(TRACED_STEPS))
    assert all(s["name"] == "bench.step" and s["args"]["model"] == "m" for s in steps)
    spans = [e["name"] for e in document["traceEvents"] if e["ph"] == "X"]
    assert spans.index("prepare") < spans.index("first call") < spans.index("bench.step")


def test_a_traced_pass_records_the_bus_spans_of_its_steps_on_a_bus_of_its_own() -> None:
    # at framework level with no profiler for the executor, its graph nodes are heard
    recorder = TraceRecorder("framework", "d5 test")
    outside = MetricBus()

    def prepare() -> Callable[[], None]:
        from d5core.bus import get_bus

        def step() -> None:
            with get_bus().span("graph.node", node="n1", op_type="Relu"):
                pass

        return step

    with use_bus(outside):
        trace_steps(recorder, "fake", None, prepare, steps=3)
    nodes = [e for e in recorder.events if e["name"] == "graph.node"]
    assert len(nodes) == 3 + 1  # the steps and the first call
    steps = [e for e in recorder.events if e["name"] == "bench.step"]
    for node in nodes[1:]:
        assert any(
            s["ts"] <= node["ts"] and node["ts"] + node["dur"] <= s["ts"] + s["dur"] for s in steps
        )


def test_a_traced_block_without_a_recorder_leaves_the_bus_unheard() -> None:
    bus = MetricBus()
    with use_bus(bus), traced_block(None, "fake"):
        assert not bus.wants("train.step.end")  # untraced: publishing stays on its fast path
    recorder = TraceRecorder("step", "d5 test")
    with use_bus(bus), traced_block(recorder, "fake"):
        assert bus.wants("train.step.end")
    assert not bus.wants("train.step.end")  # and it unsubscribes at the end


def test_graph_nodes_are_heard_only_where_no_framework_profiler_runs(
    d5_plugin_manager: Any,
) -> None:
    # an executor may run its graph node by node while somebody listens to the nodes:
    # where its profiler gives the operators, the trace must not change how it runs
    bus = MetricBus()
    for level in ("step", "framework"):
        with use_bus(bus), traced_block(TraceRecorder(level, "d5 test"), "fake"):
            assert bus.wants("graph.node.end") == (level == "framework")
    d5_plugin_manager.register(offering("fake", lambda: FakeProfiler("fake.prof", [], [])), "f")
    with use_bus(bus), traced_block(TraceRecorder("framework", "d5 test"), "fake"):
        assert bus.wants("train.step.end") and not bus.wants("graph.node.end")


def test_a_traced_block_hears_the_bus_and_runs_the_profilers(d5_plugin_manager: Any) -> None:
    log: list[str] = []
    d5_plugin_manager.register(offering("fake", lambda: FakeProfiler("fake.prof", [], log)), "fake")
    recorder = TraceRecorder("framework", "d5 test")
    bus = MetricBus()
    with traced_block(recorder, "fake", bus=bus), bus.span("train.step"):
        log.append("step")
    with bus.span("train.step"):  # after the block: not heard
        pass
    assert log == ["start fake.prof", "step", "stop fake.prof"]
    assert [e["name"] for e in recorder.events] == ["train.step"]


def test_a_step_trace_leaves_the_trainer_handing_steps_over_in_blocks() -> None:
    from d5core.metrics._common import StepBlock, StepFeed

    bus = MetricBus()
    recorder = TraceRecorder("step", "d5 test")
    stop = recorder.attach(bus)
    feed = StepFeed.of(bus)
    assert feed.takes_blocks()  # no event per step: the step trace costs the training little
    feed.deliver(
        StepBlock(
            epoch=0, first_step=3, batch_sizes=[4, 4], losses=[1.0, 0.5], seconds=[0.001, 0.002],
            lrs=[0.1, 0.1], starts_ns=[10_000, 50_000], data_t0_ns=[9_000, 49_000],
            data_ns=[800, 700],
        )
    )  # fmt: skip
    steps = [e for e in recorder.events if e["name"] == "train.step"]
    data = [e for e in recorder.events if e["name"] == "train.data"]
    assert [(e["ts"], e["dur"], e["args"]["step"]) for e in steps] == [
        (10.0, 1000.0, 3), (50.0, 2000.0, 4),
    ]  # fmt: skip
    assert [(e["ts"], e["dur"]) for e in data] == [(9.0, 0.8), (49.0, 0.7)]
    stop()
    assert not bus.wants("train.step.end")


def test_a_full_trace_hears_every_step_as_it_ends_for_the_counters() -> None:
    from d5core.metrics._common import StepFeed

    bus = MetricBus()
    recorder = TraceRecorder("full", "d5 test")
    recorder.attach(bus)
    assert bus.wants("train.step.end")
    assert not StepFeed.of(bus).takes_blocks()
    with bus.span("train.step", step=0, epoch=0, data_t0_ns=5, data_ns=10):
        pass
    names = [e["name"] for e in recorder.events]
    assert names.count("train.step") == 1 and names.count("train.data") == 1
    assert {"cpu time (ms)", "page faults", "context switches"} <= set(names)


def test_a_traced_pass_that_raises_is_a_note_and_the_next_executor_is_still_traced() -> None:
    # d5 bench stores its timings first: a failing traced pass must not fail the run
    recorder = TraceRecorder("step", "d5 test")

    def broken() -> Callable[[], None]:
        def step() -> None:
            raise RuntimeError("kernel exploded")

        return step

    trace_steps(recorder, "broken", None, broken, steps=2)
    trace_steps(recorder, "fine", None, lambda: lambda: None, steps=2)
    assert recorder.notes == ["broken: the traced steps failed: RuntimeError: kernel exploded"]
    steps = [e["args"]["subject"] for e in recorder.events if e["name"] == "bench.step"]
    assert steps == ["fine", "fine"]
