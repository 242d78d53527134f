"""``d5 run`` and the trainer end to end on the digits recipe (CPU, seconds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from d5core.cli.output import read_json
from d5core.results.store import ResultsStore

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "digits-mlp.toml"


def _run(d5_cli, db: Path, *args: str, recipe: Path = RECIPE):
    """The command's outcome and its one run's JSON (``None`` when nothing was printed)."""
    result = d5_cli("run", str(recipe), "--db", str(db), "--json", *args)
    if not result.stdout.strip():
        return result, None
    (doc,) = read_json(result.stdout, "run")["runs"]
    return result, doc


def _runs(db: Path) -> list:
    if not db.exists():
        return []
    with ResultsStore.open(db) as store:
        return store.list_runs()


@pytest.mark.parametrize("executor", ["numpy", "torch"])
def test_digits_mlp_reaches_the_target_and_is_stored(d5_cli, tmp_path, executor):
    db = tmp_path / "r.sqlite"
    result, doc = _run(d5_cli, db, "--set", f"executor={executor}")
    assert result.exit_code == 0, result.stderr
    assert doc["status"] == "complete" and doc["passed"] is True
    assert doc["metrics"]["final_test_accuracy"] >= 0.9
    assert doc["metrics"]["time_to_accuracy"] is not None
    with ResultsStore.open(db) as store:
        run = store.get_run(doc["run_id"])
        assert run.status == "complete" and run.kind == "train"
        names = {m.name for m in store.metrics(doc["run_id"])}
        assert {"final_test_accuracy", "time_to_accuracy", "throughput"} <= names
        assert {m.metric for m in store.measurements(doc["run_id"])} >= {"loss", "step_time"}


@pytest.mark.parametrize("executor", ["numpy", "torch"])
def test_same_seed_gives_identical_loss_curves(executor):
    from d5core.lv2.assembly import prepare

    curves = []
    for _ in range(2):
        prep = prepare(RECIPE, [f"executor={executor}", "lr=0.05"], seed=7)
        curves.append(np.array(prep.trainer.run().losses))
    assert curves[0].shape == curves[1].shape and len(curves[0]) > 0
    assert np.array_equal(curves[0], curves[1])
    other = prepare(RECIPE, [f"executor={executor}"], seed=8).trainer.run().losses
    assert not np.array_equal(curves[0][: len(other)], np.array(other)[: len(curves[0])])


def test_unreachable_threshold_exits_1_naming_the_metric(d5_cli, tmp_path):
    recipe = tmp_path / "hard.toml"
    recipe.write_text(
        RECIPE.read_text()
        .replace("epochs = 30", "epochs = 1")
        .replace("final_test_accuracy = { min = 0.9 }", "final_test_accuracy = { min = 0.999 }")
    )
    db = tmp_path / "r.sqlite"
    result, doc = _run(d5_cli, db, recipe=recipe)
    assert result.exit_code == 1
    assert "final_test_accuracy" in result.stderr and result.stderr.count("\n") == 1
    assert doc["passed"] is False and _runs(db)[0].status == "complete"


def test_overflowing_learning_rate_ends_diverged_and_is_stored(d5_cli, tmp_path):
    db = tmp_path / "r.sqlite"
    result, doc = _run(d5_cli, db, "--set", "lr=1e30")
    assert result.exit_code == 1
    assert doc["status"] == "diverged"
    assert doc["metrics"]["final_loss"] is None  # NaN or infinite: null in standard JSON
    assert _runs(db)[0].status == "diverged"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "epochs=1"], "epochs is FIXED in recipe digits-mlp"),
        (["--set", "dataset=mnist"], "dataset is FIXED"),
        (["--set", "nonsense=1"], "unknown key 'nonsense'"),
        (["--set", "executor=no-such-framework"], "no-such-framework"),
    ],
)
def test_bad_input_exits_2_before_anything_is_stored(d5_cli, tmp_path, args, message):
    db = tmp_path / "r.sqlite"
    result, _ = _run(d5_cli, db, *args)
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert _runs(db) == []


def test_toml_parse_error_exits_2_with_one_line(d5_cli, tmp_path):
    recipe = tmp_path / "broken.toml"
    recipe.write_text("[fixed]\nmodel = \n")
    result, _ = _run(d5_cli, tmp_path / "r.sqlite", recipe=recipe)
    assert result.exit_code == 2 and "does not parse" in result.stderr
    assert "line 2" in result.stderr and result.stderr.count("\n") == 1


def test_python_recipe_runs(d5_cli, tmp_path):
    recipe = tmp_path / "digits.py"
    recipe.write_text(
        "FIXED = dict(model='mlp', model_options={'hidden': [64]}, dataset='digits',\n"
        "             epochs=10, target_accuracy=0.9)\n"
        "MUTABLE = dict(executor='numpy', optimizer='momentum', lr=0.05, batch_size=32)\n"
        "METRICS = {'final_test_accuracy': {'min': 0.9}}\n"
    )
    result, doc = _run(d5_cli, tmp_path / "r.sqlite", recipe=recipe)
    assert result.exit_code == 0, result.stderr
    assert doc["passed"] and len(doc["recipe_hash"]) == 64


def test_missing_cifar_files_exit_2(d5_cli, tmp_path):
    recipe = tmp_path / "c.toml"
    text = (RECIPE.parent / "cifar10-resnet.toml").read_text()
    recipe.write_text(text.replace("~/.local/share/d5/data/cifar10", str(tmp_path / "none")))
    result, _ = _run(d5_cli, tmp_path / "r.sqlite", recipe=recipe)
    assert result.exit_code == 2 and str(tmp_path / "none") in result.stderr
    assert result.stderr.count("\n") == 1


def test_repeated_runs_are_each_stored_and_summarised(tmp_path, d5_cli, monkeypatch):

    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))
    recipe = str(Path(__file__).resolve().parents[2] / "recipes" / "digits-mlp.toml")
    result = d5_cli("run", recipe, "--repeat", "3", "--json")
    assert result.exit_code == 0, result.stderr
    data = read_json(result.stdout, "run")
    assert [r["seed"] for r in data["runs"]] == [0, 1, 2]
    assert len({r["run_id"] for r in data["runs"]}) == 3
    summary = data["summary"]
    assert summary["runs"] == 3 and summary["reached_target"] == 3
    ttas = sorted(r["metrics"]["time_to_accuracy"] for r in data["runs"])
    assert summary["time_to_accuracy_olympic_mean"] == ttas[1]  # best and worst dropped


def test_results_table_puts_executors_side_by_side(tmp_path, d5_cli, monkeypatch):

    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))
    recipe = str(Path(__file__).resolve().parents[2] / "recipes" / "digits-mlp.toml")
    for executor in ("numpy", "torch"):
        assert (
            d5_cli("run", recipe, "--set", f"executor={executor}", "--repeat", "2").exit_code == 0
        )
    result = d5_cli("results", "table", "--last", "4", "--by", "executor", "--json")
    assert result.exit_code == 0, result.stderr
    rows = {row["executor"]: row for row in read_json(result.stdout, "results table")}
    assert set(rows) == {"numpy", "torch"}
    for row in rows.values():
        assert row["runs"] == 2 and row["reached_target"] == 2
        assert row["final_test_accuracy"]["min"] >= 0.9
        assert (
            row["throughput"]["ci_low"]
            <= row["throughput"]["median"]
            <= row["throughput"]["ci_high"]
        )
    both = d5_cli("results", "table", "--last", "2")
    assert both.exit_code == 0
    neither = d5_cli("results", "table")
    assert neither.exit_code == 2 and "not both and not neither" in neither.stderr


def test_an_agreed_reason_to_stop_ends_training_at_that_step():
    from d5core.lv2.assembly import prepare

    calls: list[str | None] = []

    def agree(local: str | None) -> str | None:
        calls.append(local)
        return "time_budget" if len(calls) == 3 else local  # another rank ran out of time

    prep = prepare(RECIPE, [], 0)
    prep.trainer.agree = agree
    result = prep.trainer.run()
    assert result.steps == 3
    assert result.stop_reason == "time_budget"
    assert calls == [None, None, None]


def test_a_divergence_agreed_from_another_rank_marks_the_run_diverged():
    from d5core.lv2.assembly import prepare

    prep = prepare(RECIPE, [], 0)
    prep.trainer.agree = lambda local: "diverged"
    result = prep.trainer.run()
    assert (result.status, result.steps) == ("diverged", 1)
