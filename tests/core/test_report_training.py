"""Level 2 figures (d5core.lv2.figures): what they draw is what the store holds.

The runs are stored by hand, as d5core.lv2.recording stores ``d5 run``'s (the
core lane has no executor plugin to train with).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from d5core.levels.report import ReportRun
from d5core.lv2 import figures as training
from d5core.lv2.training_table import training_table
from d5core.results.store import ResultsStore
from d5core.testing.report_runs import report_runs, stored_measurement

FIXED = {
    "model": "mlp",
    "dataset": "digits",
    "epochs": 30,
    "test_every": "epoch",
    "target_accuracy": 0.9,
}


class Runs:
    """A tmp store of hand-made training runs, read back as a report reads them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ids: list[str] = []

    def add(
        self,
        *,
        name: str = "digits-mlp",
        fixed: dict[str, Any] | None = None,
        mutable: dict[str, Any] | None = None,
        overrides: dict[str, Any] | None = None,
        losses: list[float] | None = None,
        accuracies: list[float] | None = None,
        perplexities: list[float] | None = None,
        metrics: dict[str, float] | None = None,
        status: str = "complete",
        diverged_at: dict[str, int] | None = None,
        host: str = "box",
        distributed: dict[str, Any] | None = None,
        kind: str = "train",
    ) -> str:
        fixed = dict(FIXED if fixed is None else fixed)
        mutable = {"executor": "numpy", "optimizer": "momentum", "lr": 0.05, **(mutable or {})}
        config: dict[str, Any] = {
            "recipe": f"recipes/{name}.toml",
            "fixed": fixed,
            "mutable": mutable,
            "overrides": overrides or {},
            "settings": {**fixed, **mutable, "seed": len(self.ids)},
            "stop_reason": "target_accuracy",
            "diverged_at": diverged_at,
        }
        if distributed is not None:
            config["distributed"] = distributed
        recipe_hash = f"{name}-{json.dumps(mutable, sort_keys=True)}"
        with ResultsStore.open(self.path) as store:
            run_id = store.begin_run(
                kind,
                name,
                config=config,
                environment={"hostname": host, "cpu": {"model": "TestCPU"}},
                seed=len(self.ids),
                recipe_hash=recipe_hash,
            )
            if losses:
                store.add_measurement(run_id, "loss", losses, unit="loss")
            if accuracies:
                store.add_measurement(run_id, "test_accuracy", accuracies, unit="fraction")
            if perplexities:
                store.add_measurement(
                    run_id, "validation_perplexity", perplexities, unit="perplexity"
                )
            for metric, value in (metrics or {}).items():
                store.add_metric(run_id, metric, value, unit="s" if "time" in metric else "")
            if status != "running":
                error = "loss became nan" if status == "diverged" else None
                store.finish_run(run_id, status, error)
        self.ids.append(run_id)
        return run_id

    def read(self) -> list[ReportRun]:
        with ResultsStore.open(self.path) as store:
            return report_runs(store, self.ids)

    def stored(self, run_id: str, metric: str) -> list[float]:
        with ResultsStore.open(self.path) as store:
            return store.samples(stored_measurement(store, run_id, metric).id)

    def table(self, by: str = "executor") -> list[dict[str, Any]]:
        with ResultsStore.open(self.path) as store:
            records = [store.get_run(i) for i in self.ids]
            return training_table(store, records, by)


@pytest.fixture
def runs(tmp_path: Path) -> Runs:
    return Runs(tmp_path / "results.sqlite")


def _curve(seed: int, n: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(v) for v in 2.3 * np.exp(-np.arange(n) / 20) + rng.uniform(0, 0.1, n)]


def _only(figures: list[training.ReportFigure]) -> training.ReportFigure:
    assert len(figures) == 1, [f.key for f in figures]
    return figures[0]


def test_curves_and_bands_are_the_stored_samples(runs: Runs) -> None:
    lengths = {"numpy": [40, 30, 35], "torch": [25, 40, 38]}
    accuracies = {
        "numpy": [[0.7, 0.85, 0.91], [0.8, 0.92], [0.75, 0.88, 0.93]],
        "torch": [[0.6, 0.95], [0.7, 0.8, 0.9], [0.72, 0.91]],
    }
    made: dict[str, list[str]] = {"numpy": [], "torch": []}
    for executor in ("numpy", "torch"):
        for i, n in enumerate(lengths[executor]):
            made[executor].append(
                runs.add(
                    mutable={"executor": executor},
                    overrides={"executor": executor},
                    losses=_curve(i, n),
                    accuracies=accuracies[executor][i],
                    metrics={"time_to_accuracy": 1.0 + i},
                )
            )
    fig = _only(training.figures(runs.read()))
    data = json.loads(json.dumps(fig.data))  # plain JSON types only
    assert data == fig.data
    assert fig.section == "training" and fig.key.startswith("training-digits-mlp-")
    assert set(fig.runs) == set(runs.ids)
    assert data["setting_keys"] == ["executor"]
    assert data["settings"] == ["executor=numpy", "executor=torch"]
    assert data["band"] == training.BAND == "min-max"
    assert data["targets"] == {"target_accuracy": [0.9]}
    for metric, x_of in (("loss", lambda i: i + 1), ("test_accuracy", lambda i: i + 1)):
        curve = data["curves"][metric]
        assert curve["stride"] == 1
        assert curve["x"] == ("step" if metric == "loss" else "epoch")
        for executor, ids in made.items():
            drawn = curve["settings"][f"executor={executor}"]
            stored = {run_id: runs.stored(run_id, metric) for run_id in ids}
            for run_id, values in stored.items():
                line = drawn["runs"][run_id]
                assert line["y"] == values
                assert line["x"] == [float(x_of(i)) for i in range(len(values))]
                assert line["status"] == "complete" and "marker" not in line
            # the band, from the stored samples: min-max where >= 2 runs have a value
            longest = max(len(v) for v in stored.values())
            xs, lows, highs = [], [], []
            for i in range(longest):
                at = [v[i] for v in stored.values() if len(v) > i]
                if len(at) >= 2:
                    xs.append(float(i + 1))
                    lows.append(min(at))
                    highs.append(max(at))
            assert drawn["band"] == {"x": xs, "low": lows, "high": highs}
    assert "one thin line per run (6 with a loss curve)" in fig.caption
    assert "min-max" in fig.caption and fig.notes == ()


def test_time_to_accuracy_matches_the_results_table_and_counts_misses(runs: Runs) -> None:
    times = {"numpy": [3.0, 1.0, None, 2.0, 8.0], "torch": [0.5, 0.7, 0.6]}
    for executor, values in times.items():
        for i, value in enumerate(values):
            runs.add(
                mutable={"executor": executor},
                losses=_curve(i, 10),
                accuracies=[0.5, 0.95 if value is not None else 0.8],
                metrics={} if value is None else {"time_to_accuracy": value},
            )
    diverged = runs.add(
        mutable={"executor": "numpy"},
        losses=_curve(9, 6),
        accuracies=[0.4],
        status="diverged",
        diverged_at={"step": 6, "epoch": 0},
    )
    failed = runs.add(mutable={"executor": "numpy"}, losses=_curve(8, 3), status="failed")
    fig = _only(training.figures(runs.read()))
    drawn = fig.data["time_to_target"]["time_to_accuracy"]
    rows = {row["executor"]: row for row in runs.table()}
    for executor in ("numpy", "torch"):
        entry, row = drawn[f"executor={executor}"], rows[executor]
        assert entry["olympic_mean"] == row["time_to_accuracy"]["olympic_mean"]
        assert entry["runs"] == row["summarised"]
        assert entry["reached"] == row["reached_target"]
        assert entry["missed"] == row["summarised"] - row["reached_target"]
        assert sorted(entry["times"]) == sorted(t for t in times[executor] if t is not None)
        for key in ("median", "ci_low", "ci_high"):
            assert entry[key] == row["time_to_accuracy"][key]
    numpy_entry = drawn["executor=numpy"]
    # 6 complete or diverged runs: 2 missed (one never reached 0.9, one diverged)
    assert (numpy_entry["runs"], numpy_entry["missed"]) == (6, 2)
    assert diverged in numpy_entry["missed_runs"]
    assert numpy_entry["not_summarised"] == {failed: "failed"}
    # olympic mean: 6 values, inf x2 -> drop best and worst (one inf): a kept run missed
    assert numpy_entry["olympic_mean"] is None
    assert drawn["executor=torch"]["olympic_mean"] == pytest.approx(0.6)
    assert drawn["executor=torch"]["missed"] == 0
    ax = fig.figure.axes[-1]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks[0].endswith("6 runs\n2 missed\nolympic mean n/a\n+1 not finished")
    assert ticks[1].endswith("3 runs\n0 missed")


def test_the_olympic_mean_is_drawn_where_defined(runs: Runs) -> None:
    for value in (4.0, 1.0, 2.0, 3.0, None):
        runs.add(
            losses=_curve(1, 5),
            accuracies=[0.95],
            metrics={} if value is None else {"time_to_accuracy": value},
        )
    fig = _only(training.figures(runs.read()))
    entry = fig.data["time_to_target"]["time_to_accuracy"]["executor=numpy"]
    # best (1.0) and worst (the miss) dropped: (2 + 3 + 4) / 3
    assert entry["olympic_mean"] == pytest.approx(3.0)
    assert entry["olympic_mean"] == runs.table()[0]["time_to_accuracy"]["olympic_mean"]
    ax = fig.figure.axes[-1]
    diamonds = [line for line in ax.get_lines() if line.get_marker() == "D"]
    assert len(diamonds) == 1 and list(diamonds[0].get_ydata()) == [entry["olympic_mean"]]
    triangles = [line for line in ax.get_lines() if line.get_marker() == "^"]
    assert len(triangles) == 1 and len(triangles[0].get_xdata()) == 1  # the one miss


def test_every_run_missing_the_target_is_counted_not_dropped(runs: Runs) -> None:
    for i in range(3):
        runs.add(losses=_curve(i, 8), accuracies=[0.5, 0.6])
    fig = _only(training.figures(runs.read()))
    entry = fig.data["time_to_target"]["time_to_accuracy"]["executor=numpy"]
    assert entry["runs"] == entry["missed"] == 3
    assert entry["times"] == [] and entry["olympic_mean"] is None and entry["median"] is None
    assert sorted(entry["missed_runs"]) == sorted(runs.ids)
    assert "3 runs\n3 missed" in fig.figure.axes[-1].get_xticklabels()[0].get_text()


def test_diverged_and_unfinished_runs_are_marked_where_they_stopped(runs: Runs) -> None:
    ok = runs.add(losses=_curve(0, 20), accuracies=[0.8, 0.92], metrics={"time_to_accuracy": 1})
    bad = runs.add(
        losses=_curve(1, 12),
        accuracies=[0.7],
        status="diverged",
        diverged_at={"step": 12, "epoch": 1},
    )
    cut = runs.add(losses=_curve(2, 7), status="incomplete")
    fig = _only(training.figures(runs.read()))
    loss = fig.data["curves"]["loss"]["settings"]["executor=numpy"]["runs"]
    assert "marker" not in loss[ok]
    assert loss[bad]["marker"] == {
        "x": 12.0,
        "y": runs.stored(bad, "loss")[-1],
        "status": "diverged",
    }
    assert loss[cut]["marker"]["x"] == 7.0 and loss[cut]["status"] == "incomplete"
    stopped = {item["run"]: item for item in fig.data["stopped"]}
    assert set(stopped) == {bad, cut}
    assert stopped[bad]["diverged_at_step"] == 13 and stopped[cut]["loss_steps"] == 7
    assert f"{bad} (executor=numpy) diverged at step 13" in fig.caption
    assert f"{cut} (executor=numpy) incomplete after 7 stored steps" in fig.caption
    markers = {line.get_marker() for line in fig.figure.axes[0].get_lines()}
    assert {"x", "v"} <= markers


def test_long_curves_are_thinned_to_stored_points(
    runs: Runs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(training, "MAX_POINTS", 50)
    a = runs.add(losses=_curve(0, 1000), accuracies=[0.95], metrics={"time_to_accuracy": 1})
    b = runs.add(losses=_curve(1, 995), accuracies=[0.95], metrics={"time_to_accuracy": 2})
    fig = _only(training.figures(runs.read()))
    curve = fig.data["curves"]["loss"]
    assert curve["stride"] == 20
    for run_id in (a, b):
        stored = runs.stored(run_id, "loss")
        line = curve["settings"]["executor=numpy"]["runs"][run_id]
        assert len(line["x"]) <= 51 and line["x"][-1] == float(len(stored))
        assert line["y"] == [stored[int(x) - 1] for x in line["x"]]
    band = curve["settings"]["executor=numpy"]["band"]
    assert band["x"] == [float(i + 1) for i in range(0, 995, 20)]
    sa, sb = runs.stored(a, "loss"), runs.stored(b, "loss")
    assert band["low"] == [min(sa[int(x) - 1], sb[int(x) - 1]) for x in band["x"]]
    assert "loss: k = 20" in fig.caption


def test_language_models_draw_perplexity_against_steps(runs: Runs) -> None:
    fixed = {"model": "gpt", "epochs": 2, "test_every": 50, "target_perplexity": 10.0}
    for i, ppl in enumerate(([30.0, 12.0, 9.5], [28.0, 11.0])):
        runs.add(
            name="charlm",
            fixed=fixed,
            losses=_curve(i, 150),
            accuracies=[0.2, 0.3, 0.35][: len(ppl)],
            perplexities=list(ppl),
            metrics={"time_to_perplexity": 5.0} if min(ppl) <= 10 else {},
        )
    fig = _only(training.figures(runs.read()))
    curve = fig.data["curves"]["validation_perplexity"]
    assert curve["x"] == "step"
    first = curve["settings"]["executor=numpy"]["runs"][runs.ids[0]]
    assert first == {"x": [50.0, 100.0, 150.0], "y": [30.0, 12.0, 9.5], "status": "complete"}
    assert fig.data["targets"] == {"target_perplexity": [10.0]}
    entry = fig.data["time_to_target"]["time_to_perplexity"]["executor=numpy"]
    assert (entry["runs"], entry["missed"], entry["times"]) == (2, 1, [5.0])
    # loss, test accuracy, validation perplexity, time to perplexity
    assert len(fig.figure.axes) == 4


def test_settings_are_the_mutable_values_that_differ(runs: Runs) -> None:
    momentum = {"optimizer_options": {"momentum": 0.9}}
    a = runs.add(mutable={**momentum, "lr": 0.1}, losses=_curve(0, 5))
    b = runs.add(mutable={**momentum, "lr": 0.2}, losses=_curve(1, 5))
    c = runs.add(
        mutable={"optimizer_options": {"momentum": 0.5}, "lr": 0.2},
        overrides={"optimizer_options.momentum": 0.5},
        losses=_curve(2, 5),
    )
    read = {run.id: run for run in runs.read()}
    keys = training.setting_keys(list(read.values()))
    assert keys == ["lr", "optimizer_options.momentum"]
    assert training.setting_label(read[a], keys) == "lr=0.1, optimizer_options.momentum=0.9"
    assert training.setting_label(read[c], keys) == "lr=0.2, optimizer_options.momentum=0.5"
    fig = _only(training.figures(list(read.values())))
    assert len(fig.data["settings"]) == 3
    assert fig.data["targets"]["target_accuracy"] == [0.9]
    assert (
        b in fig.data["curves"]["loss"]["settings"][training.setting_label(read[b], keys)]["runs"]
    )


def test_other_runs_are_ignored(runs: Runs) -> None:
    runs.add(losses=_curve(0, 5), distributed={"ranks": 2, "scheme": "allreduce"})
    runs.add(kind="op", name="gemm", losses=_curve(1, 5))
    assert training.figures(runs.read()) == []
    assert training.figures([]) == []


def test_recipes_are_capped_and_the_rest_named(runs: Runs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(training, "MAX_RECIPES", 2)
    for name, count in (("alpha", 3), ("beta", 2), ("gamma", 1)):
        for i in range(count):
            runs.add(name=name, losses=_curve(i, 5))
    drawn = training.figures(runs.read())
    assert [f.data["recipe"] for f in drawn] == ["alpha", "beta"]
    for fig in drawn:
        assert fig.data["left_out"][-1].startswith("1 more recipes are not drawn (gamma (1 runs))")
        assert "gamma (1 runs)" in fig.caption


def test_same_name_other_fixed_gets_its_own_key_and_title(runs: Runs) -> None:
    runs.add(losses=_curve(0, 5))
    runs.add(fixed={**FIXED, "epochs": 5}, losses=_curve(1, 5))
    drawn = training.figures(runs.read())
    assert len(drawn) == 2
    assert len({f.key for f in drawn}) == 2 and len({f.title for f in drawn}) == 2
    assert all("FIXED" in f.title for f in drawn)


def test_runs_of_two_machines_are_noted(runs: Runs) -> None:
    runs.add(losses=_curve(0, 5), host="left")
    runs.add(losses=_curve(1, 5), host="right")
    fig = _only(training.figures(runs.read()))
    assert len(fig.notes) == 1 and "2 different machines" in fig.notes[0]
    assert not any(math.isnan(v) for v in fig.data["curves"]["loss"]["settings"][
        "executor=numpy"]["band"]["low"])  # fmt: skip


def test_a_nan_test_pass_is_skipped_and_breaks_the_line(runs: Runs) -> None:
    from matplotlib.collections import LineCollection

    run_id = runs.add(losses=_curve(0, 5), accuracies=[0.5, math.nan, 0.7, 0.95])
    fig = _only(training.figures(runs.read()))
    line = fig.data["curves"]["test_accuracy"]["settings"]["executor=numpy"]["runs"][run_id]
    assert line == {"x": [1.0, 3.0, 4.0], "y": [0.5, 0.7, 0.95], "status": "complete"}
    (lines,) = [c for c in fig.figure.axes[1].collections if isinstance(c, LineCollection)]
    assert [len(piece) for piece in lines.get_segments()] == [1, 2]
