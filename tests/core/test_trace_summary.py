"""``--top`` (d5core.trace.summary) on synthetic traces: each event is charged its self
time, so nested operators never count a microsecond twice and, on the steps' thread, the
operators and the time in no operator add up to the steps; other threads are counted
apart; the notes say when the rows cannot be trusted."""

from __future__ import annotations

from typing import Any

import pytest

from d5core.trace.document import D5_CATEGORY, new_document
from d5core.trace.summary import top_operators

PID, MAIN, POOL = 100, 100, 101


def _x(
    name: str, ts: float, dur: float, cat: str = "fw.profiler", tid: int = MAIN, **args: Any
) -> dict[str, Any]:
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": PID, "tid": tid,
            "args": args}  # fmt: skip


def _step(
    ts: float, dur: float, subject: str | None = "fw", name: str = "bench.step"
) -> dict[str, Any]:
    step = _x(name, ts, dur, cat=D5_CATEGORY)
    if subject is not None:
        step["args"]["subject"] = subject
    return step


def _nested_steps(steps: int = 2) -> list[dict[str, Any]]:
    """Steps of 1000 µs, 1100 µs apart: ``outer`` (600 µs) holds ``inner`` (400 µs) on the
    steps' thread, ``pooled`` (300 µs) runs on another thread."""
    events: list[dict[str, Any]] = []
    for index in range(steps):
        t = 10_000.0 + 1100.0 * index
        events += [
            _step(t, 1000.0),
            _x("outer", t + 100, 600.0),
            _x("inner", t + 200, 400.0),
            _x("pooled", t + 150, 300.0, tid=POOL),
        ]
    return events


def test_nested_operators_are_charged_their_self_time() -> None:
    top = top_operators(new_document(_nested_steps(2)))
    rows = {r.name: r for r in top.rows}
    assert rows["inner"].self_us == pytest.approx(2 * 400.0)
    assert rows["outer"].self_us == pytest.approx(2 * 200.0)
    assert rows["inner"].calls == rows["outer"].calls == 2
    selfs = [r.self_us for r in top.rows]
    assert selfs == sorted(selfs, reverse=True)  # most self time first
    assert top.steps == 2 and top.step_total_us == pytest.approx(2000.0)
    assert top.step_median_us == pytest.approx(1000.0)


def test_on_the_steps_thread_operators_and_the_rest_add_up_to_the_steps() -> None:
    top = top_operators(new_document(_nested_steps(3)))
    on_thread = [r for r in top.rows if r.on_step_thread]
    assert sum(r.self_us for r in on_thread) == pytest.approx(top.on_thread_us)
    report = top.to_json(10)
    shares = [r["share"] for r in report["rows"] if r["on_step_thread"]]
    outside = report["outside_operators_s"] / report["step_total_s"]
    assert sum(shares) + outside == pytest.approx(1.0)
    assert outside == pytest.approx(0.4)  # 1000 µs steps, 600 µs of operators


def test_operators_of_other_threads_are_listed_apart() -> None:
    top = top_operators(new_document(_nested_steps(2)))
    (pooled,) = [r for r in top.rows if r.name == "pooled"]
    assert not pooled.on_step_thread
    assert top.off_thread_us == pytest.approx(2 * 300.0)
    assert top.on_thread_us == pytest.approx(2 * 600.0)


def test_events_outside_the_steps_and_d5s_containers_are_not_rows() -> None:
    events = [
        _x("prepare", 0.0, 5000.0, cat=D5_CATEGORY),
        _x("fw::load", 100.0, 4000.0),  # while preparing: before the steps
        *_nested_steps(1),
        _x("fw::late", 50_000.0, 10.0),  # after them
    ]
    top = top_operators(new_document(events))
    names = {r.name for r in top.rows}
    assert names == {"outer", "inner", "pooled"}


def test_a_graph_nodes_span_is_named_by_its_type_and_node() -> None:
    events = [_step(0.0, 100.0), _x("graph.node", 10.0, 50.0, cat=D5_CATEGORY, node="conv1",
                                    op_type="Conv")]  # fmt: skip
    (row,) = top_operators(new_document(events)).rows
    assert (row.name, row.source) == ("Conv conv1", D5_CATEGORY)


def test_only_the_steps_of_the_subject_asked_are_summed() -> None:
    events = [
        _step(0.0, 100.0, subject="a"),
        _x("a::op", 10.0, 50.0),
        _step(200.0, 100.0, subject="b"),
        _x("b::op", 210.0, 20.0),
    ]
    document = new_document(events)
    assert [r.name for r in top_operators(document, "a").rows] == ["a::op"]
    assert [r.name for r in top_operators(document, "b").rows] == ["b::op"]
    both = top_operators(document)
    assert both.steps == 2 and {r.name for r in both.rows} == {"a::op", "b::op"}


def test_per_step_time_divides_by_the_steps() -> None:
    report = top_operators(new_document(_nested_steps(4))).to_json(1)
    (row,) = report["rows"]  # only the top one
    assert row["name"] == "inner"
    assert row["per_step_s"] == pytest.approx(400e-6)
    assert row["self_s"] == pytest.approx(4 * 400e-6)
    assert row["share"] == pytest.approx(0.4)


def test_a_trace_without_steps_says_so() -> None:
    top = top_operators(new_document([_x("fw::op", 0.0, 10.0)]))
    assert top.steps == 0 and top.rows == []
    assert top.notes == ["the trace holds no steps of this subject"]
    assert top.to_json(5)["rows"] == []


def test_steps_without_operator_events_point_to_the_framework_level() -> None:
    top = top_operators(new_document([_step(0.0, 100.0, subject=None, name="train.step")]))
    assert top.rows == [] and top.subject is None
    assert any("--trace framework" in note for note in top.notes)
    assert top.to_json(3)["outside_operators_s"] == pytest.approx(100e-6)


def test_a_partial_overlap_on_one_thread_is_charged_once() -> None:
    events = [_step(0.0, 1000.0), _x("first", 0.0, 700.0), _x("second", 500.0, 500.0)]
    top = top_operators(new_document(events))
    assert top.on_thread_us == pytest.approx(1000.0)
    assert not any("exceed" in note for note in top.notes)


def test_operator_time_past_the_steps_is_noted() -> None:
    # an event that began before the step (its middle inside it) and operators that fill
    # the step: their self times add up to more than the step
    events = [
        _step(0.0, 1000.0),
        _x("early", -200.0, 900.0),
        _x("inside", 0.0, 700.0),
        _x("late", 700.0, 300.0),
    ]
    top = top_operators(new_document(events))
    assert top.on_thread_us > top.step_total_us
    assert any("exceed the steps" in note for note in top.notes)


@pytest.mark.parametrize(
    ("measured_s", "noted"), [(1000e-6, False), (1080e-6, False), (500e-6, True), (2000e-6, True)]
)
def test_a_note_says_when_the_traced_steps_are_far_off_the_measured_ones(
    measured_s: float, noted: bool
) -> None:
    top = top_operators(new_document(_nested_steps(2)), measured_step_s=measured_s)
    off = [n for n in top.notes if "off the measured step" in n]
    assert bool(off) == noted
    if noted:
        sign = "+" if measured_s < 1000e-6 else "-"
        assert f"{sign}" in off[0] and "read the shares" in off[0]
    assert top.to_json(1)["measured_step_s"] == measured_s
