"""The timeline of one traced step in ``d5 report``: which step is drawn, that every
track and every event overlapping it is drawn where the trace puts it, and that a
report of a traced run writes the merged trace beside the page and links it."""

from __future__ import annotations

import itertools
import json
import random
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from d5core.levels.report import ReportFigure
from d5core.plugins import PluginManager
from d5core.report import trace_figure
from d5core.report.build import build_report
from d5core.report.figures import FigureWarning
from d5core.report.html import render_html
from d5core.report.trace_figure import choose_step, step_timeline, timeline_figures
from d5core.report.traces import report_figures, write_report_traces
from d5core.results.store import ResultsStore
from d5core.testing.report_runs import report_runs
from d5core.trace.document import artifact_name, new_document, read_document

ENV = {"cpu": {"model": "Test CPU"}}


def meta(pid: int, process: str, threads: dict[int, str]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": process}}
    ]
    for tid, name in threads.items():
        events.append(
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
        )
    return events


def span(
    name: str, cat: str, ts: float, dur: float, pid: int, tid: int, **args: Any
) -> dict[str, Any]:
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": tid,
            "args": args}  # fmt: skip


def traced_steps(
    durations_us: Sequence[float], subject: str = "torch", pid: int = 100, start: float = 5e6
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Steps of ``subject`` on pid's thread 1 with nested profiler ops, a worker thread
    busy inside each step and an instant; (steps, all events)."""
    steps: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    t = start
    for i, dur in enumerate(durations_us):
        step = span("bench.step", "d5", t, dur, pid, 1, subject=subject, step=i)
        steps.append(step)
        events += [
            step,
            span("aten::linear", "torch.profiler", t + 0.05 * dur, 0.8 * dur, pid, 1),
            span("aten::addmm", "torch.profiler", t + 0.1 * dur, 0.6 * dur, pid, 1),
            span("aten::relu", "torch.profiler", t + 0.86 * dur, 0.1 * dur, pid, 1),
            span("gemm.macro", "d5_kernels", t + 0.2 * dur, 0.3 * dur, pid, 7),
            {"name": "marker", "cat": "d5", "ph": "i", "s": "t", "ts": t + 0.5 * dur,
             "pid": pid, "tid": 1},
        ]  # fmt: skip
        t += dur + 300.0
    return steps, events


def two_rank_document() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Rank 0 (pid 100: main thread, kernel thread, an idle thread) and rank 1 (pid 200)
    stepping at the same times; a counter that is never drawn."""
    durations = [3000.0, 1000.0, 5000.0, 2000.0, 4000.0]
    steps0, events0 = traced_steps(durations, pid=100)
    _, events1 = traced_steps(durations, pid=200)
    events = [
        *meta(100, "rank 0 (pid 100)", {1: "main", 7: "kernels", 9: "loader"}),
        *meta(200, "rank 1 (pid 200)", {1: "main", 7: "kernels"}),
        *events0,
        *events1,
        span("load batch", "d5", 1e6, 10.0, 100, 9),  # long before: the idle thread's only
        {"name": "cpu", "ph": "C", "ts": steps0[0]["ts"] + 1, "pid": 100, "args": {"u": 1}},
    ]
    return new_document(events, run_id="r", profilers=["torch.profiler"], notes=[]), steps0


def overlapping(events: Sequence[dict[str, Any]], step: dict[str, Any]) -> list[dict[str, Any]]:
    end = step["ts"] + step["dur"]
    return [
        e for e in events
        if e.get("ph") == "X" and e["ts"] < end and e["ts"] + e["dur"] > step["ts"]
    ]  # fmt: skip


def drawn_rectangles(figure: ReportFigure) -> list[tuple[float, float]]:
    """(x, width) of every bar on the figure's axes."""
    from matplotlib.collections import PolyCollection

    ax = figure.figure.axes[0]
    found = []
    for collection in ax.collections:
        if not isinstance(collection, PolyCollection):
            continue  # the instants' markers
        for path in collection.get_paths():
            xs = np.asarray(path.vertices)[:, 0]
            if len(xs) >= 4:
                found.append((float(xs.min()), float(xs.max() - xs.min())))
    return found


# -- choosing the step --------------------------------------------------------------


@pytest.mark.parametrize("durations", [[3000, 1000, 5000, 2000, 4000], [4000, 1000, 3000, 2000]])
def test_the_median_duration_step_is_chosen(durations: list[float]) -> None:
    steps, events = traced_steps(durations)
    choice = choose_step(new_document(events), "torch")
    assert choice is not None
    middle = sorted(durations)[(len(durations) - 1) // 2]  # the lower median
    assert choice.step is steps[durations.index(middle)]
    assert choice.index == durations.index(middle)
    assert choice.durations_us == tuple(float(d) for d in durations)


def test_each_traced_executor_gets_its_own_figure_of_its_own_median_step() -> None:
    steps_a, events_a = traced_steps([2000, 6000, 4000], subject="torch", start=1e6)
    steps_b, events_b = traced_steps([900, 700, 800], subject="onnxruntime", start=2e6)
    figures = timeline_figures(new_document(events_a + events_b), "run1", section="traces")
    assert [f.data["subject"] for f in figures] == ["torch", "onnxruntime"]
    assert len({f.key for f in figures}) == 2
    assert figures[0].data["step"]["ts_us"] == steps_a[2]["ts"]
    assert figures[1].data["step"]["ts_us"] == steps_b[2]["ts"]
    assert all(f.runs == ("run1",) and f.section == "traces" for f in figures)


def test_a_trace_without_steps_draws_nothing() -> None:
    events = [span("prepare", "d5", 0.0, 10.0, 1, 1)]
    assert timeline_figures(new_document(events), "run1", section="traces") == []


# -- what is drawn ------------------------------------------------------------------------


def test_every_track_is_drawn_named_from_its_metadata_the_steps_process_first() -> None:
    document, _ = two_rank_document()
    (figure,) = timeline_figures(document, "run1", section="traces", run_name="mlp")
    names = [t["name"] for t in figure.data["tracks"]]
    assert names == [
        "rank 0 (pid 100) · main",
        "rank 0 (pid 100) · kernels",
        "rank 0 (pid 100) · loader",  # idle during the step, still a row
        "rank 1 (pid 200) · main",
        "rank 1 (pid 200) · kernels",
    ]
    ticks = [t.get_text() for t in figure.figure.axes[0].get_yticklabels()]
    assert ticks == names


def test_tracks_follow_the_processes_sort_index() -> None:
    document, _ = two_rank_document()
    document["traceEvents"] += [
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
         "args": {"sort_index": index}}
        for pid, index in ((100, 1), (200, 0))
    ]  # fmt: skip
    (figure,) = timeline_figures(document, "run1", section="traces")
    assert [t["pid"] for t in figure.data["tracks"]] == [200, 200, 100, 100, 100]


def test_the_numbers_drawn_are_the_events_overlapping_the_step_as_stored() -> None:
    document, _ = two_rank_document()
    (figure,) = timeline_figures(document, "run1", section="traces")
    chosen = figure.data["step"]
    (step,) = (
        e for e in document["traceEvents"]
        if e.get("name") == "bench.step" and (e["ts"], e["pid"]) == (chosen["ts_us"], chosen["pid"])
    )  # fmt: skip
    expected = sorted(
        (e["pid"], e["tid"], e["name"], e["cat"],
         round((e["ts"] - step["ts"]) / 1000, 4), round(e["dur"] / 1000, 4))
        for e in overlapping(document["traceEvents"], step)
    )  # fmt: skip
    drawn = sorted(
        (t["pid"], t["tid"], name, cat, begin, length)
        for t in figure.data["tracks"]
        for name, cat, begin, length, _ in t["spans"]
    )
    assert drawn == expected
    assert figure.data["step"]["duration_ms"] == pytest.approx(step["dur"] / 1000)
    # Each of them is a bar where the data says (every event lies inside the step, so
    # no bar is cut at the window's edges).
    bars = [v for bar in sorted(drawn_rectangles(figure)) for v in bar]
    stored = [v for bar in sorted((b, w) for *_, b, w in drawn) for v in bar]
    assert bars == pytest.approx(stored, abs=1e-9)
    # The instant inside the step is a marker on its track; the counter is not drawn.
    instants = [i for t in figure.data["tracks"] for i in t["instants"]]
    assert [i[0] for i in instants] == ["marker", "marker"]
    assert figure.data["colors"]["d5"] != figure.data["colors"]["torch.profiler"]
    assert set(figure.data["colors"]) == {"d5", "torch.profiler", "d5_kernels"}


def test_nested_spans_stack_and_overlapping_ones_never_share_a_lane() -> None:
    rng = random.Random(3)
    step = span("bench.step", "d5", 0.0, 1000.0, 1, 1, subject="x")
    events = [step]
    for _ in range(60):  # a tree of nested calls plus spans that only overlap
        begin = rng.uniform(0, 900)
        events.append(span("op", "prof", begin, rng.uniform(1, 1000 - begin), 1, 1))
    choice = choose_step(new_document(events), "x")
    assert choice is not None
    (track,) = step_timeline(new_document(events), choice).tracks
    lanes: dict[int, list[tuple[float, float]]] = {}
    for _, _, begin, length, lane in track.spans:
        lanes.setdefault(lane, []).append((begin, begin + length))
    deep = trace_figure.MAX_LANES - 1
    for lane, spans in lanes.items():
        if lane == deep:
            continue  # the last lane takes everything deeper
        spans.sort()
        assert all(a[1] <= b[0] + 1e-3 for a, b in itertools.pairwise(spans)), lane
    nested = timeline_figures(
        new_document([step, span("outer", "p", 10, 500, 1, 1), span("inner", "p", 20, 100, 1, 1)]),
        "r",
        section="traces",
    )[0]
    by_name = {s[0]: s[4] for s in nested.data["tracks"][0]["spans"]}
    assert by_name == {"bench.step": 0, "outer": 1, "inner": 2}


def test_past_the_cap_the_shortest_events_are_left_out_and_said_to_be(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trace_figure, "MAX_EVENTS", 3)
    document, _ = two_rank_document()
    (figure,) = timeline_figures(document, "run1", section="traces")
    spans = [s for t in figure.data["tracks"] for s in t["spans"]]
    assert len(spans) == 3
    assert {s[0] for s in spans} == {"bench.step"} | {"aten::linear"}
    assert figure.data["left_out"]["events"] == 10 - 3
    assert any("not drawn" in note for note in figure.notes)


def test_past_the_track_cap_the_steps_track_and_the_busiest_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trace_figure, "MAX_TRACKS", 2)
    document, steps = two_rank_document()
    (figure,) = timeline_figures(document, "run1", section="traces")
    chosen = next(s for s in steps if s["ts"] == figure.data["step"]["ts_us"])
    busy: dict[tuple[int, int], float] = {}
    for event in overlapping(document["traceEvents"], chosen):
        key = (event["pid"], event["tid"])
        busy[key] = busy.get(key, 0.0) + event["dur"]
    kept = [(t["pid"], t["tid"]) for t in figure.data["tracks"]]
    assert kept[0] == (chosen["pid"], chosen["tid"])
    assert len(kept) == 2
    others = {k: v for k, v in busy.items() if k != kept[0]}
    assert busy[kept[1]] == max(others.values())
    assert figure.data["left_out"]["tracks"] == 5 - 2
    assert any("least busy tracks" in note for note in figure.notes)


def test_the_longest_events_are_labelled() -> None:
    document, _ = two_rank_document()
    (figure,) = timeline_figures(document, "run1", section="traces")
    texts = {t.get_text() for t in figure.figure.axes[0].texts}
    assert {"bench.step", "aten::linear"} <= texts
    assert set(figure.data["labelled"]) <= {s[0] for t in figure.data["tracks"] for s in t["spans"]}


# -- a stored run's trace in a report ----------------------------------------------------


def store_traced_run(db: Path, ranks: Sequence[dict[str, Any]]) -> str:
    manager = PluginManager({}, discover_installed=False)
    with ResultsStore.open(db, manager=manager) as store:
        run_id = store.record_measurement_run("mlp", {"latency": [0.1, 0.2]}, environment=ENV)
        for rank, document in enumerate(ranks):
            name = artifact_name(rank if len(ranks) > 1 else None)
            store.add_artifact(run_id, name, json.dumps(document).encode())
    return run_id


def split_by_rank(document: dict[str, Any]) -> list[dict[str, Any]]:
    ranks = []
    for rank, pid in enumerate((100, 200)):
        events = [e for e in document["traceEvents"] if e["pid"] == pid]
        ranks.append(new_document(events, rank=rank, notes=[f"rank {rank} note"]))
    return ranks


def test_a_distributed_runs_ranks_are_merged_into_one_figure_and_one_file(
    tmp_path: Path,
) -> None:
    document, _ = two_rank_document()
    db = tmp_path / "results.sqlite"
    run_id = store_traced_run(db, split_by_rank(document))
    plain = store_traced_run(db, [])
    with ResultsStore.open(db) as store:
        runs = report_runs(store, [run_id, plain])
        figures = report_figures(runs, store)
        written, problems = write_report_traces(store, [run_id, plain], tmp_path / "traces")
    assert [f.runs for f in figures] == [(run_id,)]
    assert {t["pid"] for t in figures[0].data["tracks"]} == {100, 200}
    assert "trace: rank 1 note" in figures[0].notes
    assert problems == [] and set(written) == {run_id}
    merged = read_document(written[run_id].read_bytes())
    stored = sorted(json.dumps(e, sort_keys=True) for e in merged["traceEvents"])
    assert stored == sorted(json.dumps(e, sort_keys=True) for e in document["traceEvents"])
    assert merged["otherData"]["ranks"] == [0, 1]


def test_a_broken_trace_costs_only_its_own_run(tmp_path: Path) -> None:
    document, _ = two_rank_document()
    db = tmp_path / "results.sqlite"
    good = store_traced_run(db, [document])
    manager = PluginManager({}, discover_installed=False)
    with ResultsStore.open(db, manager=manager) as store:
        bad = store.record_measurement_run("mlp", {"latency": [0.1]}, environment=ENV)
        store.add_artifact(bad, artifact_name(), b"{not json")
    with ResultsStore.open(db) as store:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            figures = report_figures(report_runs(store, [bad, good]), store)
        written, problems = write_report_traces(store, [bad, good], tmp_path / "traces")
    assert [f.runs for f in figures] == [(good,)]
    messages = [str(w.message) for w in caught if issubclass(w.category, FigureWarning)]
    assert len(messages) == 1 and bad in messages[0]
    assert set(written) == {good}
    assert len(problems) == 1 and bad in problems[0]


def test_the_report_writes_the_trace_beside_the_page_and_links_it(tmp_path: Path) -> None:
    document, _ = two_rank_document()
    db = tmp_path / "results.sqlite"
    run_id = store_traced_run(db, [document])
    page = tmp_path / "out" / "report.html"
    page.parent.mkdir()
    manager = PluginManager({}, discover_installed=False)
    with ResultsStore.open(db) as store:
        built = build_report(
            store, store.list_runs(), output=page, selection="all", manager=manager, formats=()
        )
    relative = f"traces/{run_id}.trace.json"
    assert dict(built.traces) == {run_id: relative}
    assert read_document((page.parent / relative).read_bytes())["traceEvents"]
    html = render_html(built)
    assert f'href="{relative}"' in html
    assert "ui.perfetto.dev" in html and "chrome://tracing" in html


def test_a_report_of_untraced_runs_has_no_traces(tmp_path: Path) -> None:
    db = tmp_path / "results.sqlite"
    store_traced_run(db, [])
    page = tmp_path / "report.html"
    with ResultsStore.open(db) as store:
        built = build_report(
            store, store.list_runs(), output=page, selection="all",
            manager=PluginManager({}, discover_installed=False), formats=(),
        )  # fmt: skip
    assert dict(built.traces) == {}
    assert not (tmp_path / "traces").exists()
    assert "Perfetto" not in render_html(built)
