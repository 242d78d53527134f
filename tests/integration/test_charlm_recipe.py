"""The character-level language model recipe (``recipes/charlm-stdlib.toml``) end to end,
at tiny sizes: perplexity metrics stored and shown, seeded re-runs with identical
validation-perplexity curves on numpy and torch, and one-line errors for bad input."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tomllib
from json_schema_doc import check

from d5core.cli.output import read_json
from d5core.lv2.recipes import load_recipe
from d5core.results.store import ResultsStore

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
RECIPE = RECIPES / "charlm-stdlib.toml"
SMALL = RECIPES / "charlm-stdlib-small.toml"

#: The recipe's problem shrunk to seconds: a one-layer model on 4 kB of text (8 steps).
TINY = {
    "model_options": {"hidden": 16, "heads": 2, "layers": 1},
    "dataset_options": {"seq_len": 16, "max_bytes": 4000},
    "test_dataset_options": {"max_bytes": 1200},
    "epochs": 1,
    "test_every": 4,
    "target_perplexity": 85.0,
}


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def _tiny(tmp_path: Path, name: str = "charlm-tiny", *, timed: bool = True, **changes: Any) -> Path:
    """The real recipe with its FIXED sizes replaced by :data:`TINY` (and ``changes``);
    ``timed=False`` leaves the ``time_to_perplexity`` threshold out."""
    data = tomllib.loads(RECIPE.read_text(encoding="utf-8"))
    fixed = {**data["fixed"], **TINY, **changes}
    fixed = {k: v for k, v in fixed.items() if v is not None}
    # the reference digests belong to the recipe's own sizes
    for key in ("dataset_options", "test_dataset_options"):
        fixed[key] = {k: v for k, v in fixed[key].items() if k != "reference_sha256"}
    lines = ["[fixed]"] + [f"{k} = {_toml(v)}" for k, v in fixed.items()]
    lines += ["[mutable]"] + [f"{k} = {_toml(v)}" for k, v in data["mutable"].items()]
    lines += ["[metrics]", "final_perplexity = { max = 90.0 }"]
    lines += ["time_to_perplexity = { max = 120 }"] if timed else []
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _curve(recipe: Path, sets: list[str], seed: int) -> tuple[list[float], list[float]]:
    from d5core.lv2.assembly import prepare

    result = prepare(recipe, sets, seed).trainer.run()
    return [float(p["perplexity"]) for p in result.test_curve], result.losses


@pytest.mark.parametrize(
    "sets", [["executor=numpy", "optimizer=adam"], ["executor=torch", "optimizer=torch-adam"]]
)
def test_a_seeded_rerun_gives_an_identical_perplexity_curve(tmp_path, sets):
    recipe = _tiny(tmp_path, timed=False, target_perplexity=None)
    first, losses = _curve(recipe, sets, seed=3)
    second, again = _curve(recipe, sets, seed=3)
    assert len(first) == 2 and all(math.isfinite(p) for p in first)
    assert first == second and losses == again
    # training lowers the perplexity from about the vocabulary's size (98)
    assert first[-1] < first[0] < 120
    other, _ = _curve(recipe, sets, seed=4)
    assert other != first


def test_the_two_executors_agree_on_the_curve(tmp_path):
    recipe = _tiny(tmp_path, timed=False, target_perplexity=None)
    numpy_curve, _ = _curve(recipe, ["executor=numpy", "optimizer=adam"], seed=5)
    torch_curve, _ = _curve(recipe, ["executor=torch", "optimizer=torch-adam"], seed=5)
    assert np.allclose(numpy_curve, torch_curve, rtol=2e-3)


def test_d5_run_stores_and_shows_perplexity(d5_cli, tmp_path):
    db = tmp_path / "r.sqlite"
    recipe = _tiny(tmp_path)
    result = d5_cli("run", str(recipe), "--db", str(db), "--json", "--set", "executor=numpy",
                    "--set", "optimizer=adam")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    data = read_json(result.stdout, "run")
    check("run", data)
    (doc,) = data["runs"]
    metrics = doc["metrics"]
    assert doc["stop_reason"] == "target_perplexity" and doc["passed"]
    assert metrics["final_perplexity"] <= 85.0 and metrics["time_to_perplexity"] > 0
    assert data["summary"]["reached_target_perplexity"] == 1
    assert metrics["best_perplexity"] <= metrics["final_perplexity"]
    with ResultsStore.open(db) as store:
        run = store.get_run(doc["run_id"])
        stored = {m.name: m for m in store.metrics(run.id)}
        assert stored["final_perplexity"].better == "lower"
        assert stored["time_to_perplexity"].unit == "s"
        curves = {m.metric for m in store.measurements(run.id)}
        assert "validation_perplexity" in curves
        identity = run.config["data"]["train"]["identity"]
        assert identity["bytes"] == 4000 and identity["files"] >= 1
        assert identity["sha256"] == run.config["data"]["train"]["sha256"]
    table = d5_cli("results", "table", doc["run_id"], "--db", str(db), "--json")
    assert table.exit_code == 0, table.stderr
    rows = read_json(table.stdout, "results table")
    check("results table", rows, by="executor")
    (row,) = rows
    assert row["reached_target_perplexity"] == 1
    assert row["final_perplexity"]["median"] == pytest.approx(metrics["final_perplexity"])
    shown = d5_cli("results", "table", doc["run_id"], "--db", str(db))
    assert "final perplexity" in shown.stdout


def test_the_shipped_recipes_load_and_fix_the_problem():
    for path in (RECIPE, SMALL):
        recipe = load_recipe(path)
        assert recipe.fixed["model"] == "gpt"
        assert recipe.fixed["dataset"] == "python_stdlib_text"
        assert recipe.fixed["target_perplexity"] > 1
        assert {"executor", "optimizer", "lr", "batch_size"} <= set(recipe.mutable)
        assert "time_to_perplexity" in recipe.metrics


def _one_line_exit_2(result: Any) -> str:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    message = result.stderr.strip()
    assert message and "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize(
    ("changes", "sets", "expected"),
    [
        ({}, ["dataset_options.seq_len=8"], "dataset_options is FIXED"),
        ({"dataset_options": {"seq_len": 0}}, [], "seq_len must be a positive integer"),
        ({"dataset_options": {"seq_len": 16, "max_bytes": 10}}, [], "max_bytes must be"),
        ({"dataset_options": {"seq_len": 16, "vocab": "words"}}, [], "vocab 'words'"),
        ({"target_perplexity": 1.0}, [], "target_perplexity must be above 1"),
        ({"target_perplexity": None}, [], "time_to_perplexity needs target_perplexity"),
    ],
)
def test_bad_input_is_a_one_line_exit_2_and_stores_nothing(
    d5_cli, tmp_path, changes, sets, expected
):
    db = tmp_path / "r.sqlite"
    recipe = _tiny(tmp_path, **changes)
    args = [arg for item in sets for arg in ("--set", item)]
    result = d5_cli("run", str(recipe), "--db", str(db), *args)
    assert expected in _one_line_exit_2(result)
    if db.exists():
        with ResultsStore.open(db) as store:
            assert store.list_runs() == []


def test_the_recipe_runs_on_two_ranks(tmp_path):
    """``d5 run --ranks 2`` under mpiexec (mpi4py and mpich are in the environment)."""
    db = tmp_path / "r.sqlite"
    recipe = _tiny(tmp_path, timed=False, target_perplexity=None)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "D5_TEST_"))}
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("d5")), "run", str(recipe), "--ranks", "2",
         "--db", str(db), "--json", "--set", "executor=numpy", "--set", "optimizer=adam"],
        capture_output=True, text=True, env=environ, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (doc,) = read_json(proc.stdout, "run")["runs"]
    assert doc["distributed"]["ranks"] == 2
    assert [r["rank"] for r in doc["distributed"]["per_rank"]] == [0, 1]
    ppl = doc["metrics"]["final_perplexity"]
    assert ppl is not None and 1 < ppl < 120
    with ResultsStore.open(db) as store:
        names = {m.name for m in store.metrics(doc["run_id"])}
    assert {"final_perplexity", "best_perplexity"} <= names
