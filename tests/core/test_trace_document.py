"""The stored trace document (d5core.trace.document): artifact names, the events d5
accepts as Chrome trace events, reading a stored artifact back, merging the ranks of a
run onto one timeline (one host or several) and finding the steps."""

from __future__ import annotations

import json
from typing import Any

import pytest

from d5core.errors import UsageError
from d5core.trace.document import (
    ARTIFACT,
    D5_CATEGORY,
    STEP_NAMES,
    TRACE_FORMAT,
    artifact_name,
    check_events,
    is_trace_artifact,
    merge_documents,
    new_document,
    read_document,
    step_events,
)


def _span(
    name: str, ts: float, dur: float, pid: int = 10, tid: int = 10, **args: Any
) -> dict[str, Any]:
    return {"name": name, "cat": D5_CATEGORY, "ph": "X", "ts": ts, "dur": dur, "pid": pid,
            "tid": tid, "args": args}  # fmt: skip


def _rank(rank: int, pid: int, host: str = "node-a", offset: float | None = None) -> dict[str, Any]:
    """One rank's document: its process named, two training steps."""
    events = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"rank {rank}"}},
        _span("train.step", 1000.0, 100.0, pid, pid, step=0),
        _span("train.step", 1200.0, 100.0, pid, pid, step=1),
    ]
    described: dict[str, Any] = {"rank": rank, "host": host, "notes": [f"note of rank {rank}"]}
    if offset is not None:
        described["wall_offset_us"] = offset
    return new_document(events, **described)


# -- names -------------------------------------------------------------------------------


def test_a_rank_keeps_its_own_artifact_and_every_part_is_recognised_as_trace() -> None:
    assert artifact_name() == ARTIFACT
    assert artifact_name(3) == "trace.rank3.json" != artifact_name(0)
    for name in (ARTIFACT, artifact_name(0), artifact_name(12)):
        assert is_trace_artifact(name)
    for name in ("trace.txt", "trace.rank0.csv", "report.json", "rank0.json"):
        assert not is_trace_artifact(name)


def test_a_new_document_is_the_object_form_with_its_format_and_description() -> None:
    events = [_span("bench.step", 1.0, 2.0)]
    document = new_document(events, run_id="abc", level="step")
    assert document["traceEvents"] is events
    assert document["displayTimeUnit"] == "ms"
    assert document["otherData"] == {"format": TRACE_FORMAT, "run_id": "abc", "level": "step"}


# -- conformance -------------------------------------------------------------------------


def test_events_of_every_phase_d5_writes_conform() -> None:
    events = [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "d5"}},
        _span("bench.step", 10.0, 5.0),
        {"name": "validation", "ph": "i", "s": "t", "ts": 11.0, "pid": 1, "tid": 1},
        {"name": "cpu time (ms)", "ph": "C", "ts": 12, "pid": 1, "args": {"user": 1.0}},
        _span("an instant span", 20.0, 0.0),
    ]
    assert check_events(events) == []


@pytest.mark.parametrize(
    ("event", "problem"),
    [
        ({"name": "x", "ph": "B", "ts": 1.0, "pid": 1, "tid": 1}, "phase 'B'"),
        ({"name": "x", "ts": 1.0, "pid": 1, "tid": 1}, "phase None"),
        ({"name": "x", "ph": "X", "ts": 1.0, "pid": 1, "tid": 1}, "no dur"),
        ({"name": "x", "ph": "X", "dur": 1.0, "tid": 1}, "no ts, pid"),
        ({"name": "x", "ph": "i", "ts": 1.0, "pid": 1}, "no tid"),
        ({"name": "c", "ph": "C", "ts": 1.0, "pid": 1}, "no args"),
        ({"ph": "M", "pid": 1, "args": {}}, "no name"),
        (
            {"name": "x", "ph": "X", "ts": "1.0", "dur": 1.0, "pid": 1, "tid": 1},
            "ts is not a number",
        ),
        ({"name": "x", "ph": "X", "ts": 1.0, "dur": -0.5, "pid": 1, "tid": 1}, "negative duration"),
    ],
)
def test_an_event_that_does_not_conform_is_named_with_its_problem(
    event: dict[str, Any], problem: str
) -> None:
    problems = check_events([_span("fine", 0.0, 1.0), event])
    assert len(problems) == 1
    assert problems[0].startswith("event 1") and problem in problems[0]


def test_the_problems_found_stop_at_twenty() -> None:
    bad = [{"name": "x", "ph": "Q"}] * 50
    assert len(check_events(bad)) == 20


# -- reading -----------------------------------------------------------------------------


def test_a_stored_document_reads_back_as_it_was_written() -> None:
    document = _rank(0, 100)
    assert read_document(json.dumps(document).encode()) == document


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"{not json", "is not JSON"),
        (b"\xff\xfe", "is not JSON"),
        (b"[]", "is not a d5-trace/1 trace document"),
        (json.dumps({"traceEvents": [], "otherData": {}}).encode(), "is not a d5-trace/1"),
        (
            json.dumps({"traceEvents": {}, "otherData": {"format": TRACE_FORMAT}}).encode(),
            "is not a d5-trace/1",
        ),
        (
            json.dumps({"traceEvents": [], "otherData": {"format": "d5-trace/2"}}).encode(),
            "is not a d5-trace/1",
        ),
    ],
)
def test_an_artifact_that_is_no_trace_document_is_refused_naming_it(data: bytes, said: str) -> None:
    with pytest.raises(UsageError, match=said) as caught:
        read_document(data, "trace.rank1.json")
    assert "trace.rank1.json" in str(caught.value)


# -- merging -----------------------------------------------------------------------------


def test_merging_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        merge_documents([])


def test_one_document_merges_to_itself() -> None:
    document = _rank(0, 100)
    assert merge_documents([document]) == document


def test_the_ranks_of_one_host_merge_as_they_are_with_every_rank_and_note() -> None:
    ranks = [_rank(1, 201), _rank(0, 200)]
    merged = merge_documents(ranks)
    assert merged["traceEvents"] == ranks[0]["traceEvents"] + ranks[1]["traceEvents"]
    other = merged["otherData"]
    assert other["format"] == TRACE_FORMAT
    assert other["ranks"] == [0, 1] and "rank" not in other
    assert other["notes"] == ["note of rank 1", "note of rank 0"]
    assert check_events(merged["traceEvents"]) == []


def test_ranks_of_two_hosts_are_moved_onto_the_first_hosts_time_base() -> None:
    first = _rank(0, 200, host="node-a", offset=1_000_000.0)
    second = _rank(1, 300, host="node-b", offset=1_005_000.0)  # its wall clock 5 ms ahead
    merged = merge_documents([first, second])
    moved = [e for e in merged["traceEvents"] if e["pid"] == 300 and e["ph"] == "X"]
    assert [e["ts"] for e in moved] == [6000.0, 6200.0]
    kept = [e for e in merged["traceEvents"] if e["pid"] == 200 and e["ph"] == "X"]
    assert [e["ts"] for e in kept] == [1000.0, 1200.0]
    assert any("2 hosts" in note for note in merged["otherData"]["notes"])


def test_the_same_pid_on_two_hosts_becomes_two_tracks() -> None:
    merged = merge_documents([_rank(0, 200, host="node-a"), _rank(1, 200, host="node-b")])
    pids = {e["pid"] for e in merged["traceEvents"]}
    assert len(pids) == 2
    for pid in pids:
        named = [
            e for e in merged["traceEvents"] if e["pid"] == pid and e["name"] == "process_name"
        ]
        assert len(named) == 1
    assert len(step_events(merged)) == 4


# -- steps -------------------------------------------------------------------------------


def test_the_steps_are_d5s_step_spans_in_time_order_of_the_subject_asked() -> None:
    events = [
        _span("bench.step", 300.0, 10.0, subject="torch"),
        _span("bench.step", 100.0, 10.0, subject="onnxruntime"),
        _span("validate.call", 200.0, 10.0, subject="torch"),
        _span("prepare", 50.0, 10.0, subject="torch"),  # d5's, but not a step
        {**_span("bench.step", 150.0, 10.0, subject="torch"), "cat": "torch.profiler"},
        {**_span("train.step", 400.0, 10.0), "ph": "i"},
    ]
    document = new_document(events)
    assert [e["ts"] for e in step_events(document)] == [100.0, 200.0, 300.0]
    assert [e["ts"] for e in step_events(document, "torch")] == [200.0, 300.0]
    assert step_events(document, "tensorflow") == []
    assert set(STEP_NAMES) >= {e["name"] for e in step_events(document)}
