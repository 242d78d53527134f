"""The conformance figure draws what ``d5 conformance`` stored: one stacked bar per
conformance run whose segments are the stored counts. Runs are stored here with
:func:`store_conformance` (what the command calls) from hand-made reports, in a
database under tmp_path; no executor runs."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from d5core.levels.report import ReportRun
from d5core.lv1.conformance import CaseResult, ConformanceReport
from d5core.lv1.conformance_figures import (
    CONFORMANCE_SEGMENTS,
    FALLBACK_SEGMENT,
    MAX_BARS,
    figures,
)
from d5core.lv1.conformance_run import CONFORMANCE_KIND, store_conformance
from d5core.results import ResultsStore
from d5core.testing.report_runs import report_runs

ENV = {"hostname": "box", "cpu": {"model": "Test CPU", "logical_cores": 2}}


def _report(executor: str, statuses: dict[str, int], pattern: str | None = None) -> Any:
    results = [
        CaseResult(f"test_{status}_{i}", "Relu", status, "" if status == "passed" else "why")
        for status, n in statuses.items()
        for i in range(n)
    ]
    return ConformanceReport(executor, results, pattern=pattern, onnx_version="1.23.2")


def _store(db: Path, report: ConformanceReport, env: dict | None = None, **kw) -> str:
    with ResultsStore.open(db) as store:
        if env is None:
            return store_conformance(store, report, **kw)
        # the same metrics, under a given environment (another machine)
        with store.run(CONFORMANCE_KIND, f"conformance {report.executor}", environment=env,
                       config={"executor": report.executor}) as run_id:  # fmt: skip
            for metric, key in (("passed", "passed"), ("failed", "failed"),
                                ("errors", "error"), ("unsupported", "unsupported")):  # fmt: skip
                store.add_metric(run_id, metric, float(report.counts[key]))
            store.add_metric(run_id, "total", float(report.total))
        return run_id


def _runs(db: Path) -> list[ReportRun]:
    with ResultsStore.open(db) as store:
        return report_runs(store, [r.id for r in store.list_runs()])


def _stored_counts(db: Path, run_id: str) -> dict[str, int]:
    with ResultsStore.open(db) as store:
        return {k.name: round(k.value) for k in store.metrics(run_id)}


def test_the_bars_are_the_stored_counts(tmp_path):
    db = tmp_path / "r.sqlite"
    ort = _store(db, _report("onnxruntime", {"passed": 7, "failed": 2, "error": 1}))
    npy = _store(db, _report("numpy", {"passed": 3, "unsupported": 4}), tags=["nightly"])
    (fig,) = figures(_runs(db))
    assert (fig.key, fig.section) == ("net-conformance", "networks")
    assert set(fig.runs) == {ort, npy}
    bars = {b["run_id"]: b for b in fig.data["bars"]}
    for run_id in (ort, npy):
        stored = _stored_counts(db, run_id)
        assert {k: bars[run_id][k] for k in (*fig.data["segments"], "total")} == stored
    assert [b["executor"] for b in fig.data["bars"]] == ["numpy", "onnxruntime"]
    assert fig.data["left_out"] == 0 and fig.notes == ()
    # what is drawn: one bar series per segment some run has, each bar its count
    ax = fig.figure.axes[0]
    legend = {label: name for name, label, _ in CONFORMANCE_SEGMENTS}
    drawn = {legend[c.get_label()]: [p.get_width() for p in c] for c in ax.containers}
    assert drawn == {
        name: [b[name] for b in fig.data["bars"]]
        for name in fig.data["segments"]
        if any(b[name] for b in fig.data["bars"])
    }
    assert {"7", "2", "1", "3", "4"} <= {t.get_text() for t in ax.texts}
    texts = {t.get_text() for t in ax.texts}
    assert {"10 cases, 70.0% passed", "7 cases, 42.9% passed"} <= texts
    svg = io.BytesIO()
    fig.figure.savefig(svg, format="svg")
    assert b"onnx backend node cases" in svg.getvalue()


def test_the_failing_cases_are_in_the_config_and_counts_in_the_metrics(tmp_path):
    db = tmp_path / "r.sqlite"
    report = _report("torch", {"passed": 2, "failed": 1, "error": 2}, pattern="relu")
    run_id = _store(db, report, tags=["b", "a"], settings={"timeout_s": 5.0})
    with ResultsStore.open(db) as store:
        run = store.get_run(run_id)
    assert (run.kind, run.name, run.status) == ("conformance", "conformance torch", "complete")
    assert run.tags == ("a", "b")
    assert run.config["failing"] == ["test_error_0", "test_error_1", "test_failed_0"]
    assert run.config["pattern"] == "relu" and run.config["timeout_s"] == 5.0
    assert _stored_counts(db, run_id) == {
        "passed": 2, "failed": 1, "errors": 2, "unsupported": 0, "total": 5,
    }  # fmt: skip


def test_other_runs_are_ignored_and_nothing_is_drawn_without_conformance_runs(tmp_path):
    db = tmp_path / "r.sqlite"
    with ResultsStore.open(db) as store, store.run("op", "bench Gemm", environment=ENV) as rid:
        store.add_metric(rid, "passed", 1.0)
    assert figures(_runs(db)) == []
    assert figures([]) == []


def test_a_conformance_run_without_counts_is_left_out(tmp_path):
    db = tmp_path / "r.sqlite"
    with ResultsStore.open(db) as store:
        store.finish_run(store.begin_run(CONFORMANCE_KIND, "conformance x", environment=ENV),
                         "failed", error="broke")  # fmt: skip
    assert figures(_runs(db)) == []
    kept = _store(db, _report("numpy", {"passed": 1}))
    (fig,) = figures(_runs(db))
    assert fig.runs == (kept,)


def test_runs_of_two_machines_and_selections_are_noted(tmp_path):
    db = tmp_path / "r.sqlite"
    _store(db, _report("numpy", {"passed": 1}), env=ENV)
    _store(db, _report("numpy", {"passed": 2}, pattern="add"),
           env={**ENV, "hostname": "other"})  # fmt: skip
    (fig,) = figures(_runs(db))
    assert any("2 different machines" in n for n in fig.notes)
    labels = [t.get_text() for t in fig.figure.axes[0].get_yticklabels()]
    assert len(labels) == 2 and all(label.startswith("numpy (") for label in labels)


def test_many_runs_are_capped_to_the_newest_and_the_caption_says_so(tmp_path):
    db = tmp_path / "r.sqlite"
    ids = [_store(db, _report(f"e{i:02d}", {"passed": i + 1})) for i in range(MAX_BARS + 3)]
    (fig,) = figures(_runs(db))
    assert fig.data["left_out"] == 3
    assert len(fig.data["bars"]) == MAX_BARS
    assert set(fig.runs) == set(ids[3:])
    assert "3 oldest" in fig.caption


@pytest.mark.parametrize("name", [name for name, _, _ in CONFORMANCE_SEGMENTS])
def test_each_segment_is_a_stored_metric_name(name, tmp_path):
    db = tmp_path / "r.sqlite"
    run_id = _store(db, _report("numpy", {"passed": 1}))
    assert name in _stored_counts(db, run_id)


def test_the_passes_a_fallback_engine_ran_are_drawn_apart_with_both_rates(tmp_path):
    """numpy's rate counts passes that onnx.reference computed: the figure splits them
    from the executor's own and writes both rates, so the lifted one is not read alone."""
    db = tmp_path / "r.sqlite"
    results = [CaseResult(f"test_fb_{i}", "Sin", "passed", fallback=("Sin",)) for i in range(6)] + [
        CaseResult("test_own", "Relu", "passed"),
        CaseResult("test_bad", "Relu", "failed", "x"),
    ]
    run_id = _store(db, ConformanceReport("numpy", results, onnx_version="1.23.2"))
    with ResultsStore.open(db) as store:
        assert store.get_run(run_id).config["passed_with_fallback"] == 6
    (fig,) = figures(_runs(db))
    (bar,) = fig.data["bars"]
    assert (bar["passed"], bar["passed_with_fallback"]) == (7, 6)
    ax = fig.figure.axes[0]
    drawn = {c.get_label(): [p.get_width() for p in c] for c in ax.containers}
    assert drawn[FALLBACK_SEGMENT[1]] == [6]
    assert drawn["passed on its own code"] == [1]
    texts = {t.get_text() for t in ax.texts}
    assert "8 cases, 87.5% passed,\n12.5% on its own code" in texts
    assert fig.notes == ()


def test_a_run_that_did_not_record_its_fallback_passes_is_noted(tmp_path):
    db = tmp_path / "r.sqlite"
    _store(db, _report("numpy", {"passed": 3}), env=ENV)  # stored without the record
    (fig,) = figures(_runs(db))
    assert fig.data["bars"][0]["passed_with_fallback"] is None
    assert any("did not record which passes needed a fallback" in n for n in fig.notes)
