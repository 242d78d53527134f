"""Issue 11, item 3 (and ``--by`` from item 18): ``d5 results table`` keeps recipes apart,
counts failed and diverged runs, summarises time to accuracy over every run as MLPerf
does, takes true medians, and never pools the steps of different runs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from d5core.cli.output import read_json
from d5core.lv2.summaries import (
    median_interval,
    olympic_mean,
    time_to_accuracy_summary,
    true_median,
)
from d5core.plugins import PluginManager
from d5core.results import ResultsStore

ENV = {"packages": {"d5core": "0.1.0"}, "cpu": {"model": "Test CPU", "logical_cores": 2}}


def _train(
    db: Path,
    *,
    recipe_hash: str = "h-mlp",
    executor: str = "numpy",
    status: str = "complete",
    tta: float | None = None,
    accuracy: float | None = None,
    rate: float | None = None,
    step_rates: list[float] | None = None,
    target: float | None = 0.9,
) -> str:
    """A training run stored the way ``d5 run`` stores one."""
    settings = {"executor": executor, "target_accuracy": target, "batch_size": 32}
    with ResultsStore.open(db, manager=PluginManager({}, discover_installed=False)) as store:
        rid = store.begin_run(
            "train",
            "digits-mlp",
            config={"settings": settings},
            environment=ENV,
            recipe_hash=recipe_hash,
        )
        if tta is not None:
            store.add_metric(rid, "time_to_accuracy", tta, unit="s")
        if accuracy is not None:
            store.add_metric(rid, "final_test_accuracy", accuracy)
        if rate is not None:
            store.add_metric(rid, "throughput", rate, unit="samples/s")
        if step_rates:
            store.add_measurement(rid, "throughput", step_rates, unit="samples/s")
        store.finish_run(rid, status, None if status == "complete" else "it went wrong")
    return rid


def _table(d5_cli, db: Path, *args: str) -> tuple[list[dict], str]:
    result = d5_cli("results", "table", "--last", "50", "--json", "--db", str(db), *args)
    assert result.exit_code == 0, result.stderr
    return read_json(result.stdout), result.stderr


def test_runs_of_different_recipes_never_share_a_row(tmp_path, d5_cli):
    db = tmp_path / "r.sqlite"
    for i, recipe_hash in enumerate(["h1", "h1", "h2", "h2", "h3", "h4", "h4"]):
        _train(db, recipe_hash=recipe_hash, tta=10.0 + i, accuracy=0.95)
    rows, err = _table(d5_cli, db)
    assert [(r["executor"], r["recipe_hash"], r["runs"]) for r in rows] == [
        ("numpy", "h1", 2),
        ("numpy", "h2", 2),
        ("numpy", "h3", 1),
        ("numpy", "h4", 2),
    ]
    assert "executor=numpy has runs of 4 different recipes" in err


def test_failed_and_diverged_runs_are_counted_and_not_reaching_runs_count(tmp_path, d5_cli):
    db = tmp_path / "r.sqlite"
    for tta in (12.0, 10.0, 14.0):
        _train(db, tta=tta, accuracy=0.95)
    _train(db, status="diverged", accuracy=0.1)
    _train(db, status="failed")
    (row,) = _table(d5_cli, db)[0]
    assert (row["runs"], row["failed"], row["diverged"], row["summarised"]) == (5, 1, 1, 4)
    assert row["statuses"] == {"complete": 3, "diverged": 1, "failed": 1}
    tta = row["time_to_accuracy"]
    assert (tta["runs"], tta["reached"]) == (4, 3)
    # Over all four finished runs, the diverged one infinitely slow: [10, 12, 14, inf].
    assert tta["median"] == pytest.approx(13.0)
    assert (tta["ci_low"], tta["ci_high"]) == (10.0, None)  # None: not reached
    assert tta["olympic_mean"] == pytest.approx(13.0)

    table = d5_cli("results", "table", "--last", "9", "--db", str(db)).stdout
    text = " ".join(table.split())
    assert "5 (1 failed, 1 diverged)" in text
    assert "3/4" in text and "13 [10, not reached]" in text


def test_time_to_accuracy_is_not_reached_when_most_runs_missed_the_target(tmp_path, d5_cli):
    db = tmp_path / "r.sqlite"
    _train(db, tta=10.0, accuracy=0.95)
    for _ in range(2):
        _train(db, accuracy=0.5)  # complete, but the target was never reached
    (row,) = _table(d5_cli, db)[0]
    tta = row["time_to_accuracy"]
    assert (tta["runs"], tta["reached"], tta["median"], tta["olympic_mean"]) == (3, 1, None, None)
    assert row["reached_target"] == 1


def test_final_accuracy_median_of_an_even_count_is_the_mean_of_the_middle_two(tmp_path, d5_cli):
    db = tmp_path / "r.sqlite"
    for accuracy, tta in ((0.90, 40.0), (0.96, 10.0), (0.92, 30.0), (0.94, 20.0)):
        _train(db, tta=tta, accuracy=accuracy)
    (row,) = _table(d5_cli, db)[0]
    assert row["final_test_accuracy"] == {
        "runs": 4,
        "median": pytest.approx(0.93),
        "min": 0.90,
        "max": 0.96,
    }
    assert row["time_to_accuracy"]["median"] == pytest.approx(25.0)


def test_throughput_takes_one_value_per_run_never_pooled_steps(tmp_path, d5_cli):
    db = tmp_path / "r.sqlite"
    # Many steps per run: pooled, they would give an interval far inside the two runs.
    _train(db, tta=5.0, rate=1000.0, step_rates=[1000.0 + (i % 7) for i in range(500)])
    _train(db, tta=6.0, rate=1200.0, step_rates=[1200.0 + (i % 7) for i in range(500)])
    (row,) = _table(d5_cli, db)[0]
    assert row["throughput"] == {
        "runs": 2,
        "median": pytest.approx(1100.0),
        "ci_low": 1000.0,
        "ci_high": 1200.0,
    }


def test_a_run_without_a_throughput_metric_uses_its_median_step_rate(tmp_path, d5_cli):
    db = tmp_path / "r.sqlite"
    _train(db, tta=5.0, step_rates=[90.0, 100.0, 110.0, 500.0])
    (row,) = _table(d5_cli, db)[0]
    assert row["throughput"]["median"] == pytest.approx(105.0)
    assert row["throughput"]["runs"] == 1


def test_runs_without_a_target_have_no_time_to_accuracy(tmp_path, d5_cli):
    db = tmp_path / "r.sqlite"
    _train(db, accuracy=0.8, target=None)
    (row,) = _table(d5_cli, db)[0]
    assert row["time_to_accuracy"] is None and row["final_test_accuracy"]["median"] == 0.8


def test_the_by_setting_still_tells_rows_apart(tmp_path, d5_cli):
    db = tmp_path / "r.sqlite"
    for executor in ("numpy", "torch", "numpy"):
        _train(db, executor=executor, tta=3.0, accuracy=0.9)
    rows, err = _table(d5_cli, db)
    assert [(r["executor"], r["runs"]) for r in rows] == [("numpy", 2), ("torch", 1)]
    assert "warning" not in err
    by_batch, _ = _table(d5_cli, db, "--by", "batch_size")
    assert [(r["batch_size"], r["runs"]) for r in by_batch] == [("32", 3)]


def test_an_unknown_by_key_is_refused_naming_the_valid_keys(tmp_path, d5_cli):
    db = tmp_path / "r.sqlite"
    _train(db, tta=3.0)
    result = d5_cli("results", "table", "--last", "3", "--by", "colour", "--db", str(db))
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "--by 'colour' is not a recipe setting" in line
    assert "executor" in line and "batch_size" in line and "optimizer" in line


# -- the statistics -------------------------------------------------------------------


def test_true_median_averages_the_two_middle_values():
    assert true_median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert true_median([3.0, 1.0, 2.0]) == 2.0
    assert true_median([1.0, math.inf]) == math.inf
    with pytest.raises(ValueError, match="no values"):
        true_median([])


def test_time_to_accuracy_summary_counts_missed_targets_as_infinitely_slow():
    summary = time_to_accuracy_summary([5.0, None, 3.0, 4.0, 6.0, None, 2.0])
    assert (summary["runs"], summary["reached"]) == (7, 5)
    assert summary["median"] == 5.0  # of [2, 3, 4, 5, 6, inf, inf]
    assert summary["olympic_mean"] is None  # one missed target is kept after dropping
    assert median_interval([2.0, 3.0, 4.0, 5.0, 6.0, math.inf, math.inf]) == (2.0, math.inf)
    assert olympic_mean([1.0, 2.0, 4.0, math.inf]) == 3.0


def _rows(ttas, accs):
    return [
        {"metrics": {"time_to_accuracy": t, "final_test_accuracy": a}}
        for t, a in zip(ttas, accs, strict=True)
    ]


def test_repeat_summary_takes_the_true_median_of_an_even_count():
    from d5core.lv2.runner import repeat_summary

    summary = repeat_summary(_rows([4.0, 1.0, 3.0, 2.0], [0.90, 0.80, 0.96, 0.94]))
    assert summary["time_to_accuracy"]["median"] == 2.5
    assert summary["final_test_accuracy"] == {
        "median": pytest.approx(0.92),
        "min": 0.80,
        "max": 0.96,
    }


def test_repeat_summary_counts_runs_that_missed_the_target_as_infinitely_slow():
    from d5core.lv2.runner import repeat_summary

    summary = repeat_summary(_rows([1.0, None, 3.0], [0.95, 0.5, 0.95]))
    assert summary["reached_target"] == 2
    assert summary["time_to_accuracy"]["median"] == 3.0  # the middle of 1, 3, not reached
    assert summary["time_to_accuracy"]["ci_high"] is None  # falls on the run that missed
    assert summary["time_to_accuracy_olympic_mean"] == 3.0
