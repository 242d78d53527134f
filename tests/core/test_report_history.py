"""Issue 18, the history figure: one benchmark over its runs, with the changes that
``d5 results compare`` calls marked, and no verdict across a change of machine."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.levels.report import ReportFigure
from d5core.measure.noise import machine_fingerprint, machine_identity_of
from d5core.plugins import PluginManager
from d5core.report.comparison import compare_runs
from d5core.report.history import SKIPPED_METRICS, figures, history_series
from d5core.results import ResultsStore
from d5core.testing.report_runs import report_runs, store_nested

ENV: dict[str, Any] = {
    "packages": {"d5core": "0.1.0"},
    "cpu": {"model": "Test CPU", "logical_cores": 2},
    "memory": {"total_bytes": 8 << 30},
    "hostname": "testbox",
}
OTHER_MACHINE = {**ENV, "hostname": "otherbox"}
LABELS = {"backend": "torch", "problem": "gemm 64", "direction": "forward", "dtype": "float32"}
STEADY = [1.0, 1.01, 0.99, 1.0, 1.02]  # process medians in ms, within 2%


@pytest.fixture(autouse=True)
def _no_floor_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("D5_NOISE_FLOOR", raising=False)


@pytest.fixture
def store(tmp_path: Path):
    manager = PluginManager({}, discover_installed=False)
    with ResultsStore.open(tmp_path / "r.sqlite", manager=manager) as opened:
        yield opened


def _processes(medians_ms: list[float], seed: int, n: int = 12) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [list(m * 1e-3 * (1 + 0.003 * rng.standard_normal(n))) for m in medians_ms]


def _commit(i: int) -> str:
    return f"{i:02d}" + "c0ffee" * 6 + "ab"


def _op_run(
    store: ResultsStore,
    per_process: list[list[float]],
    commit: str | None,
    *,
    env: dict[str, Any] = ENV,
    labels: dict[str, Any] | None = None,
    extra: dict[str, list[list[float]]] | None = None,
) -> str:
    """A run stored as ``d5 bench op`` stores one: samples by process, nested summary."""
    environment = {**env, "git": {"commit": commit}} if commit else dict(env)
    with store.run("op", "bench Gemm", environment=environment) as rid:
        for label_set, samples in [(labels or LABELS, per_process), *_extra(extra)]:
            store_nested(store, rid, "time", samples, labels=label_set)
    return rid


def _extra(extra: dict[str, list[list[float]]] | None) -> list[tuple[dict[str, Any], Any]]:
    return [({**LABELS, "backend": k}, v) for k, v in (extra or {}).items()]


def _only(found: list[ReportFigure]) -> tuple[ReportFigure, dict[str, Any]]:
    (figure,) = found
    (series,) = figure.data["series"]
    return figure, series


def test_a_clear_2x_slowdown_is_marked_worse(store) -> None:
    ids = [
        _op_run(store, _processes(STEADY, 1), _commit(1)),
        _op_run(store, _processes(STEADY, 2), _commit(2)),
        _op_run(store, _processes([2 * m for m in STEADY], 3), _commit(3)),
    ]
    figure, series = _only(figures(report_runs(store, ids)))
    assert figure.key == "history-operators" and figure.section == "history"
    assert series["run_ids"] == ids
    assert [s["verdict"] for s in series["steps"]] == ["same", "worse"]
    (change,) = series["changes"]
    assert (change["from_run"], change["to_run"], change["verdict"]) == (ids[1], ids[2], "worse")
    assert change["change"] == "higher" and change["tested"] is True
    assert change["ratio"] == pytest.approx(2.0, rel=0.02)
    # The mark is drawn: a red triangle pointing up at the third run.
    ax = figure.figure.axes[0]
    marks = [line for line in ax.lines if line.get_marker() == "^"]
    assert len(marks) == 1 and marks[0].get_markeredgecolor() == "#D55E00"
    assert marks[0].get_ydata()[0] == pytest.approx(series["medians"][2] * series["scale"])
    # Ticks name the short commits; the figure renders.
    svg = io.StringIO()
    figure.figure.savefig(svg, format="svg")
    assert _commit(3)[:8] in svg.getvalue() and "×2" in svg.getvalue()
    assert figure.notes == ()


def test_a_speedup_is_marked_better_by_the_direction_of_time(store) -> None:
    ids = [
        _op_run(store, _processes(STEADY, 1), _commit(1)),
        _op_run(store, _processes([m / 2 for m in STEADY], 2), _commit(2)),
    ]
    _figure, series = _only(figures(report_runs(store, ids)))
    (change,) = series["changes"]
    assert (change["verdict"], change["change"]) == ("better", "lower")


def test_identical_distributions_are_not_marked(store) -> None:
    samples = _processes(STEADY, 7)
    ids = [_op_run(store, samples, _commit(1)), _op_run(store, samples, _commit(2))]
    figure, series = _only(figures(report_runs(store, ids)))
    (step,) = series["steps"]
    assert step["verdict"] == "same" and step["ratio"] == 1.0
    assert series["changes"] == [] and series["machine_changes"] == []
    assert not [line for line in figure.figure.axes[0].lines if line.get_marker() in "^v"]


def test_runs_of_different_machines_are_never_compared(store) -> None:
    ids = [
        _op_run(store, _processes(STEADY, 1), _commit(1)),
        _op_run(store, _processes([2 * m for m in STEADY], 2), _commit(2), env=OTHER_MACHINE),
        _op_run(store, _processes([2 * m for m in STEADY], 3), _commit(3), env=OTHER_MACHINE),
    ]
    figure, series = _only(figures(report_runs(store, ids)))
    first, second = series["steps"]
    assert first["machine_changed"] is True and first["verdict"] is None
    assert "ratio" not in first
    assert second["machine_changed"] is False and second["verdict"] == "same"
    assert series["changes"] == []
    (moved,) = series["machine_changes"]
    assert (moved["from_run"], moved["to_run"]) == (ids[0], ids[1])
    assert moved["from_machine"] != moved["to_machine"]
    assert "otherbox" in moved["to_machine"] and "testbox" in moved["from_machine"]
    # The figure says it mixes machines, and draws the change as a vertical line.
    assert figure.notes and "2 different machines" in figure.notes[0]
    assert any(line.get_linestyle() == "--" for line in figure.figure.axes[0].lines)


def test_the_data_is_the_stored_medians_and_intervals(store) -> None:
    ids = [
        _op_run(store, _processes(STEADY, 1), _commit(1)),
        _op_run(store, _processes([1.3, 1.2, 1.25, 1.31, 1.28], 2), None),
        _op_run(store, _processes([1.0], 3), _commit(3)),  # one process: within-run CI
    ]
    _figure, series = _only(figures(report_runs(store, ids)))
    for i, rid in enumerate(ids):
        (m,) = store.measurements(rid)
        assert m.summary is not None
        nested = m.summary["nested"]
        low = nested["ci_low"] if nested["ci_low"] is not None else m.summary["ci_low"]
        high = nested["ci_high"] if nested["ci_high"] is not None else m.summary["ci_high"]
        assert series["medians"][i] == m.summary["median"]
        assert (series["ci_low"][i], series["ci_high"][i]) == (low, high)
        assert series["created"][i] == store.get_run(rid).created
    assert series["commits"] == [_commit(1), None, _commit(3)]
    assert series["x"] == sorted(series["x"])
    assert (series["unit"], series["axis_unit"], series["scale"]) == ("s", "ms", 1e3)
    assert series["labels"] == LABELS and series["metric"] == "time"


def test_series_held_by_a_single_run_produce_nothing(store) -> None:
    only = _op_run(store, _processes(STEADY, 1), _commit(1))
    assert figures(report_runs(store, [only])) == []
    # A second run that shares one series: only that one gets a history.
    other = _op_run(
        store, _processes(STEADY, 2), _commit(2), extra={"numpy": _processes(STEADY, 3)}
    )
    _figure, series = _only(figures(report_runs(store, [only, other])))
    assert series["labels"]["backend"] == "torch"
    # Runs no level draws (a calibration) are ignored.
    with store.run("calibration", "machine", environment=ENV) as rid:
        store.add_measurement(rid, "time", [1.0, 2.0], labels=LABELS)
    with store.run("calibration", "machine", environment=ENV) as rid2:
        store.add_measurement(rid2, "time", [1.0, 2.0], labels=LABELS)
    assert figures(report_runs(store, [only, rid, rid2])) == []


@pytest.mark.parametrize(
    ("medians", "seeds"),
    [
        (([1.0] * 5, [1.3] * 5), (1, 2)),  # 30% slower
        ((STEADY, STEADY), (1, 2)),  # alike
        (([1.0, 1.1, 0.9, 1.2, 0.95], [1.08, 0.97, 1.25, 1.02, 1.15]), (3, 4)),  # scattered
        (([1.0], [1.08]), (5, 6)),  # one process a side: the noise-floor test
        (([1.0], [3.0]), (5, 6)),
    ],
)
def test_each_verdict_is_the_one_results_compare_gives(store, medians, seeds) -> None:
    ids = [
        _op_run(store, _processes(list(m), seed), _commit(i))
        for i, (m, seed) in enumerate(zip(medians, seeds, strict=True))
    ]
    _figure, series = _only(figures(report_runs(store, ids)))
    (step,) = series["steps"]
    (row,) = compare_runs(store, ids[0], ids[1]).comparisons
    assert (step["verdict"], step["change"], step["ratio"]) == (
        row["verdict"], row["change"], row["ratio"],
    )  # fmt: skip
    assert (step["p_value"], step["method"], step["noise_floor"]) == (
        row["p_value"], row["method"], row["noise_floor"],
    )  # fmt: skip


def test_with_the_store_the_calibrated_noise_floor_decides_as_compare_does(store) -> None:
    ids = [
        _op_run(store, _processes([1.0] * 5, 1), _commit(1)),
        _op_run(store, _processes([1.3] * 5, 2), _commit(2)),
    ]
    identity = machine_identity_of(ENV)
    config = {"fingerprint": machine_fingerprint(identity), "machine_floor": 0.4,
              "floors": {"gemm": 0.4}, "processes": 10}  # fmt: skip
    with store.run("calibration", "machine", config=config):
        pass
    runs = report_runs(store, ids)
    # Without the store: d5's default floor of 5%, the 30% change is called...
    (without,) = history_series(runs)
    assert without.steps[0]["verdict"] == "worse"
    assert without.steps[0]["noise_floor_source"] == "default"
    # ...with it, the machine's calibrated 40% floor, as 'd5 results compare' has it.
    (calibrated,) = history_series(runs, store=store)
    (row,) = compare_runs(store, ids[0], ids[1]).comparisons
    assert calibrated.steps[0]["verdict"] == row["verdict"] == "same"
    assert calibrated.steps[0]["noise_floor"] == row["noise_floor"] == 0.4
    # An explicit smallest effect wins over both, as --min-effect does.
    (explicit,) = history_series(runs, store=store, min_effect=0.1)
    assert explicit.steps[0]["verdict"] == "worse"


def test_the_noise_floor_variable_is_honoured(store, monkeypatch) -> None:
    ids = [
        _op_run(store, _processes([1.0] * 5, 1), _commit(1)),
        _op_run(store, _processes([1.3] * 5, 2), _commit(2)),
    ]
    monkeypatch.setenv("D5_NOISE_FLOOR", "0.5")
    (series,) = history_series(report_runs(store, ids))
    assert series.steps[0]["verdict"] == "same"
    assert series.steps[0]["noise_floor_source"] == "D5_NOISE_FLOOR"


def _train_run(
    store: ResultsStore, tta: float, commit: str, distributed: dict | None = None
) -> str:
    env = {**ENV, "git": {"commit": commit}}
    config: dict = {"settings": {"batch": 32}, "mutable": {"executor": "numpy", "batch_size": 32}}
    if distributed:
        config["distributed"] = distributed
    with store.run("train", "mnist-mlp", environment=env, config=config) as rid:
        store.add_measurement(rid, "loss", [2.0, 1.0, 0.5], unit="loss")
        store.add_metric(rid, "time_to_accuracy", tta, unit="s")
        store.add_metric(rid, "final_test_accuracy", 0.97, unit="fraction")
        store.add_metric(rid, "wall_time", tta * 2, unit="s")
    return rid


def _texts(figure: ReportFigure) -> list[str]:
    return [t.get_text() for ax in figure.figure.axes for t in ax.texts]


def test_single_training_runs_are_scalar_series_and_get_no_verdict(store) -> None:
    ids = [_train_run(store, 10.0, _commit(1)), _train_run(store, 20.0, _commit(2))]
    (figure,) = figures(report_runs(store, ids))
    assert figure.key == "history-training"
    by_metric = {s["metric"]: s for s in figure.data["series"]}
    assert set(by_metric) == {"time_to_accuracy", "final_test_accuracy"}  # no curves
    tta = by_metric["time_to_accuracy"]
    assert tta["medians"] == tta["ci_low"] == tta["ci_high"] == [10.0, 20.0]
    assert tta["labels"] == {"setting": "executor=numpy, batch_size=32"}
    # One value a side: no test can tell them apart, so no verdict, however large the ratio.
    assert tta["changes"] == []
    (step,) = tta["steps"]
    assert step["verdict"] is None and step["tested"] is False and step["ratio"] == 2.0
    assert step["no_verdict"] == "no verdict (n=1/1)"
    assert by_metric["final_test_accuracy"]["changes"] == []
    assert "no verdict" in figure.caption and "at least 5 repeats a side" in figure.caption
    assert _texts(figure).count("no verdict (n=1/1)") == 2
    triangles = [line for ax in figure.figure.axes for line in ax.lines
                 if line.get_marker() in ("^", "v")]  # fmt: skip
    assert triangles == []


def test_a_hollow_better_of_too_few_repeats_is_no_verdict(store) -> None:
    """Issue 28: a 9.6% difference of medians between points of 4 and 3 repeats was
    marked 'better' though no test of so few repeats can be significant."""
    before = [_train_run(store, v, _commit(1)) for v in (10.0, 12.5, 9.0, 11.5)]
    after = [_train_run(store, v, _commit(2)) for v in (9.8, 10.0, 12.0)]
    (figure,) = figures(report_runs(store, before + after))
    tta = {s["metric"]: s for s in figure.data["series"]}["time_to_accuracy"]
    assert tta["medians"] == [10.75, 10.0]
    (step,) = tta["steps"]
    assert step["verdict"] is None and tta["changes"] == []
    assert step["no_verdict"] == "no verdict (n=4/3)" and step["repeats"] == [4, 3]
    assert "no verdict (n=4/3)" in _texts(figure)


def test_the_repeats_needed_follow_what_the_test_can_reach() -> None:
    from d5core.report.history import can_reach, min_repeats

    assert min_repeats(0.01) == 5 and min_repeats(0.05) == 4 and min_repeats(0.001) == 7
    assert can_reach(5, 5, 0.01) and can_reach(4, 6, 0.01)  # smallest p 0.0079, 0.0095
    assert not can_reach(4, 5, 0.01) and not can_reach(4, 4, 0.01)  # 0.016, 0.029
    assert not can_reach(1, 100, 0.01)  # 2/101 = 0.0198


def test_repeats_at_one_commit_are_one_point_and_commits_are_told_apart_by_a_test(
    store,
) -> None:
    first = [_train_run(store, v, _commit(1)) for v in (10.0, 10.5, 9.8, 10.2, 10.1)]
    second = [_train_run(store, v, _commit(2)) for v in (20.0, 19.5, 20.4, 20.1, 20.2)]
    (figure,) = figures(report_runs(store, first + second))
    tta = {s["metric"]: s for s in figure.data["series"]}["time_to_accuracy"]
    assert tta["medians"] == [10.1, 20.1]  # the repeats' medians
    assert (tta["ci_low"], tta["ci_high"]) == ([9.8, 19.5], [10.5, 20.4])  # their range
    assert tta["run_ids"] == [first[-1], second[-1]]
    (step,) = tta["steps"]
    assert step["tested"] is True and step["verdict"] == "worse"
    assert step["repeats"] == [5, 5] and step["p_value"] < 0.01
    few = [_train_run(store, v, _commit(3)) for v in (20.0, 30.0)]  # two repeats: no test
    (figure,) = figures(report_runs(store, second + few))
    tta = {s["metric"]: s for s in figure.data["series"]}["time_to_accuracy"]
    assert tta["steps"][0]["tested"] is False and tta["steps"][0]["ratio"] == 25.0 / 20.1
    assert tta["steps"][0]["verdict"] is None and tta["changes"] == []
    assert tta["steps"][0]["no_verdict"] == "no verdict (n=5/2)"


def test_repeats_alone_make_no_history_and_distributed_runs_are_their_own_series(
    store,
) -> None:
    repeats = [_train_run(store, v, _commit(1)) for v in (10.0, 30.0, 12.0)]
    assert figures(report_runs(store, repeats)) == []  # one commit: no history to draw
    ranks = {"ranks": 2, "scheme": "allreduce"}
    mixed = [
        _train_run(store, 10.0, _commit(2)),
        _train_run(store, 5.0, _commit(3), distributed=ranks),
        _train_run(store, 11.0, _commit(4)),
        _train_run(store, 6.0, _commit(5), distributed=ranks),
    ]
    found = history_series(report_runs(store, mixed))
    tta = [s for s in found if s.metric == "time_to_accuracy"]
    assert sorted(s.labels["setting"] for s in tta) == [
        "executor=numpy, batch_size=32",
        "executor=numpy, batch_size=32, ranks=2, scheme=allreduce",
    ]
    assert sorted([p.median for p in s.points] for s in tta) == [[5.0, 6.0], [10.0, 11.0]]


def test_the_number_of_panels_is_capped_and_the_caption_says_so(store) -> None:
    extra = {"numpy": _processes(STEADY, 5)}
    ids = [
        _op_run(store, _processes(STEADY, 1), _commit(1), extra=extra),
        _op_run(store, _processes(STEADY, 2), _commit(2), extra=extra),
        _op_run(store, _processes(STEADY, 3), _commit(3)),
    ]
    (figure,) = figures(report_runs(store, ids), max_series=1)
    (series,) = figure.data["series"]
    assert series["labels"]["backend"] == "torch"  # held by three runs, numpy by two
    assert (figure.data["series_total"], figure.data["series_left_out"]) == (2, 1)
    assert "1 more benchmark with a history is not drawn" in figure.caption
    (full,) = figures(report_runs(store, ids))
    assert [s["labels"]["backend"] for s in full.data["series"]] == ["torch", "numpy"]
    assert len([ax for ax in full.figure.axes if ax.get_visible()]) == 2


def test_derived_measurements_get_no_history_of_their_own(store) -> None:
    ids = []
    for _ in range(2):
        with store.run("op", "bench Gemm", environment=ENV) as rid:
            store.add_measurement(rid, "time", [1e-3, 1.1e-3, 0.9e-3], labels=LABELS)
            store.add_measurement(rid, "gflops", [10.0, 11.0, 9.0], labels=LABELS)
        ids.append(rid)
    _figure, series = _only(figures(report_runs(store, ids)))
    assert series["metric"] == "time" and "gflops" in SKIPPED_METRICS["op"]


def test_a_bad_panel_cap_is_a_usage_error(store) -> None:
    with pytest.raises(UsageError, match="max_series"):
        figures([], max_series=0)


def test_only_the_newest_runs_of_a_series_are_drawn_and_judged(store) -> None:
    ids = [_op_run(store, _processes(STEADY, i, n=4), _commit(i)) for i in range(4)]
    (figure,) = figures(report_runs(store, ids), max_points=3)
    (series,) = figure.data["series"]
    assert series["run_ids"] == ids[1:] and series["runs_left_out"] == 1
    assert [(s["from_run"], s["to_run"]) for s in series["steps"]] == [
        (ids[1], ids[2]), (ids[2], ids[3]),
    ]  # fmt: skip
    assert "1 older run is not drawn" in figure.caption
    with pytest.raises(UsageError, match="max_points"):
        figures(report_runs(store, ids), max_points=1)
