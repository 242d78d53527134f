"""Issue 11, item 2: every quantity declares which direction is better, and ``d5 results
compare`` calls changes better or worse by it (an accuracy drop is worse, not faster)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

import d5core.metrics as builtin_metrics
from d5core.cli.output import read_json
from d5core.errors import UsageError
from d5core.levels.metrics import Metric
from d5core.measure.compare import DEFAULT_ALPHA, DEFAULT_MIN_EFFECT
from d5core.metrics.directions import QUANTITIES, better_of
from d5core.plugins import PluginManager
from d5core.results import ResultsStore
from d5core.results import schema as schema_mod

ENV = {"packages": {"d5core": "0.1.0"}, "cpu": {"model": "Test CPU", "logical_cores": 2}}


def _open(db: Path) -> ResultsStore:
    return ResultsStore.open(db, manager=PluginManager({}, discover_installed=False))


def _noisy(center: float, seed: int, n: int = 40, spread: float = 0.003) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(v) for v in center + spread * rng.standard_normal(n)]


def _train_run(db: Path, name: str, accuracy: float, loss: float, step_s: float, seed: int):
    """A run shaped like ``d5 run`` stores it: curves as measurements, scalars as metrics."""
    with _open(db) as store, store.run("train", name, environment=ENV) as rid:
        store.add_measurement(rid, "test_accuracy", _noisy(accuracy, seed), unit="fraction")
        store.add_measurement(rid, "loss", _noisy(loss, seed + 1), unit="loss")
        store.add_measurement(rid, "step_time", _noisy(step_s, seed + 2, spread=1e-4))
        store.add_measurement(
            rid, "throughput", _noisy(32 / step_s, seed + 3, spread=1.0), unit="samples/s"
        )
        store.add_metric(rid, "final_test_accuracy", accuracy)
        store.add_metric(rid, "final_loss", loss)
    return rid


@pytest.fixture(scope="module")
def worse_run(tmp_path_factory) -> dict[str, object]:
    """A baseline and a candidate that is worse in every respect."""
    db = tmp_path_factory.mktemp("direction") / "results.sqlite"
    base = _train_run(db, "good", accuracy=0.975, loss=0.10, step_s=0.010, seed=1)
    bad = _train_run(db, "bad", accuracy=0.80, loss=0.60, step_s=0.013, seed=11)
    return {"db": db, "base": base, "bad": bad}


def _compare(d5_cli, runs, a: str, b: str, *extra: str):
    result = d5_cli(
        "results", "compare", runs[a], runs[b], "--json", "--db", str(runs["db"]), *extra
    )
    return result, (read_json(result.stdout) if result.stdout else None)


def test_an_accuracy_drop_and_a_rising_loss_are_worse(worse_run, d5_cli):
    result, doc = _compare(d5_cli, worse_run, "base", "bad")
    assert result.exit_code == 0, result.stderr
    verdicts = {r["metric"]: (r["better"], r["change"], r["verdict"]) for r in doc["comparisons"]}
    assert verdicts == {
        "test_accuracy": ("higher", "lower", "worse"),
        "loss": ("lower", "higher", "worse"),
        "step_time": ("lower", "higher", "worse"),
        "throughput": ("higher", "lower", "worse"),
    }


def test_the_reverse_comparison_is_better_everywhere(worse_run, d5_cli):
    _result, doc = _compare(d5_cli, worse_run, "bad", "base")
    assert {r["verdict"] for r in doc["comparisons"]} == {"better"}


def test_scalar_metrics_get_an_untested_verdict_by_their_direction(worse_run, d5_cli):
    _result, doc = _compare(d5_cli, worse_run, "base", "bad")
    scalars = {m["name"]: m for m in doc["metrics"]}
    accuracy, loss = scalars["final_test_accuracy"], scalars["final_loss"]
    assert (accuracy["better"], accuracy["change"], accuracy["verdict"]) == (
        "higher",
        "lower",
        "worse",
    )
    assert (loss["better"], loss["change"], loss["verdict"]) == ("lower", "higher", "worse")
    assert accuracy["tested"] is False


def test_the_table_says_worse_with_slower_only_for_times_and_rates(worse_run, d5_cli):
    result = d5_cli(
        "results", "compare", worse_run["base"], worse_run["bad"], "--db", str(worse_run["db"])
    )
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "faster" not in out
    assert "worse (lower)" in out  # test accuracy
    assert "worse (higher)" in out  # loss
    assert "worse (slower)" in out  # step time and throughput


def test_fail_if_worse_fails_on_an_accuracy_drop(worse_run, d5_cli):
    result, _doc = _compare(d5_cli, worse_run, "base", "bad", "--fail-if-worse")
    assert result.exit_code == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"d5: error: run {worse_run['bad']} is worse than")
    assert "test_accuracy (lower)" in last and "loss (higher)" in last


def test_a_quantity_of_unknown_direction_is_changed_never_better_or_worse(tmp_path, d5_cli):
    db = tmp_path / "r.sqlite"
    ids = []
    for center in (10.0, 20.0):
        with _open(db) as store, store.run("op", "widgets", environment=ENV) as rid:
            store.add_measurement(rid, "widgets", _noisy(center, 3), unit="widgets")
        ids.append(rid)
    result = d5_cli("results", "compare", *ids, "--json", "--fail-if-worse", "--db", str(db))
    assert result.exit_code == 0, result.stderr
    (row,) = read_json(result.stdout)["comparisons"]
    assert (row["better"], row["lower_is_better"]) == (None, None)
    assert (row["change"], row["verdict"]) == ("higher", "changed")


def test_a_declared_direction_is_stored_and_wins_over_the_name(tmp_path):
    with _open(tmp_path / "r.sqlite") as store, store.run("op", "x", environment=ENV) as rid:
        store.add_measurement(rid, "score", [1.0, 2.0], unit="points", better="higher")
        store.add_measurement(rid, "queue_time", [1.0, 2.0], better="higher")
        store.add_metric(rid, "score", 3.0, better="lower")
        store.add_metric(rid, "val_accuracy", 0.5)
        by_metric = {m.metric: m.better for m in store.measurements(rid)}
        assert by_metric == {"score": "higher", "queue_time": "higher"}
        assert [(k.name, k.better) for k in store.metrics(rid)] == [
            ("score", "lower"),
            ("val_accuracy", "higher"),
        ]


def test_a_bad_declared_direction_is_a_one_line_usage_error(tmp_path):
    with _open(tmp_path / "r.sqlite") as store:
        rid = store.begin_run("op", "x", environment=ENV)
        with pytest.raises(UsageError, match="must be 'lower' or 'higher', not 'up'"):
            store.add_metric(rid, "score", 1.0, better="up")
        with pytest.raises(UsageError, match="must be 'lower' or 'higher'"):
            store.add_measurement(rid, "score", [1.0], better="faster")


@pytest.mark.parametrize(
    ("name", "unit", "better"),
    [
        ("time", "s", "lower"),
        ("forward", "s", "lower"),
        ("throughput", "samples/s", "higher"),
        ("gflops", "GFLOP/s", "higher"),
        ("test_accuracy", "fraction", "higher"),
        ("final_test_accuracy", "", "higher"),
        ("loss", "loss", "lower"),
        ("val_loss", "", "lower"),
        ("max_abs_error", "", "lower"),
        ("peak_memory", "B", "lower"),
        ("passed", "", "higher"),
        ("steps", "", None),
        ("widgets", "widgets", None),
    ],
)
def test_better_of_knows_names_then_endings_then_units(name, unit, better):
    assert better_of(name, unit) == better


def _builtin_metric_classes() -> list[type[Metric]]:
    return [getattr(builtin_metrics, name) for name in builtin_metrics.__all__]


@pytest.mark.parametrize("cls", _builtin_metric_classes(), ids=lambda c: c.__name__)
def test_every_builtin_metric_declares_its_direction_and_unit(cls):
    own = [c for c in cls.__mro__ if issubclass(c, Metric) and c is not Metric]
    # Declared by the class or a built-in parent, never Metric's default.
    assert any("better" in vars(c) for c in own) and any("unit" in vars(c) for c in own)
    assert cls.better in ("lower", "higher") and cls.unit
    assert QUANTITIES[cls.name] == (cls.better, cls.unit)


def test_a_metric_class_with_a_misspelt_direction_is_refused():
    with pytest.raises(TypeError, match="better = 'up'; it must be 'lower' or 'higher'"):

        class Upward(Metric):
            name = "upward"
            better = "up"

            def result(self) -> dict[str, object]:
                return {}


def test_runs_stored_before_directions_were_recorded_are_judged_by_name(tmp_path, monkeypatch):
    db = tmp_path / "old.sqlite"
    monkeypatch.setattr(schema_mod, "MIGRATIONS", schema_mod.MIGRATIONS[:1])
    conn = sqlite3.connect(db, isolation_level=None)
    schema_mod.apply_migrations(conn, schema_mod.MIGRATIONS)
    conn.execute(
        "INSERT INTO runs (id, kind, name, status, created, config) "
        "VALUES ('0123456789ab', 'train', 'old', 'complete', '2025-01-01T00:00:00', '{}')"
    )
    conn.execute(
        "INSERT INTO measurements (run_id, metric, unit, n) "
        "VALUES ('0123456789ab', 'test_accuracy', 'fraction', 0)"
    )
    conn.execute(
        "INSERT INTO run_metrics (run_id, name, value) VALUES ('0123456789ab', 'final_loss', 1)"
    )
    conn.close()
    monkeypatch.undo()
    with _open(db) as store:
        (m,) = store.measurements("0123456789ab")
        (k,) = store.metrics("0123456789ab")
        run = store.get_run("0123456789ab")
    assert (m.better, k.better) == ("higher", "lower")
    assert (run.load_start, run.load_end) == (None, None)
    version = sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0]
    assert version == schema_mod.SCHEMA_VERSION


def test_min_effect_help_states_the_real_default(d5_cli):
    result = d5_cli("results", "compare", "--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert f"else d5's, {DEFAULT_MIN_EFFECT:g} = {DEFAULT_MIN_EFFECT:.0%}" in text
    assert "$D5_NOISE_FLOOR, else the machine's noise floor" in text
    assert f"default: d5's, {DEFAULT_ALPHA:g}" in text
