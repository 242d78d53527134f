"""The parts of a time to accuracy (issue 30) reach the store, ``d5 run`` and ``results show``.

What d5 spends beside the training itself must be named, measured and shown apart: each
run that reaches its target stores ``time_to_accuracy_part`` once per part, and the parts
add up to the stored time to accuracy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from d5core.cli import cli
from d5core.lv2.trainer import TTA_PARTS
from d5core.results import ResultsStore
from d5core.testing.training import SMALL_DIGITS_RECIPE


def test_a_run_stores_prints_and_shows_the_parts_of_its_time_to_accuracy(tmp_path: Path):
    recipe, db = tmp_path / "small.toml", tmp_path / "d5.db"
    recipe.write_text(SMALL_DIGITS_RECIPE)
    runner = CliRunner()
    done = runner.invoke(cli, ["run", str(recipe), "--db", str(db), "--json"])
    assert done.exit_code == 0, done.output
    run = json.loads(done.output)["data"]["runs"][0]
    parts = run["time_to_accuracy_parts"]
    assert list(parts) == list(TTA_PARTS)
    assert sum(parts.values()) == pytest.approx(run["metrics"]["time_to_accuracy"], rel=1e-6)
    with ResultsStore.open(db) as store:
        stored = {
            m.labels["part"]: m.value
            for m in store.metrics(run["run_id"])
            if m.name == "time_to_accuracy_part"
        }
    assert stored == pytest.approx(parts)
    shown = runner.invoke(cli, ["results", "show", run["run_id"], "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    assert shown.output.count("time_to_accuracy_part") == len(TTA_PARTS)
    text = runner.invoke(cli, ["run", str(recipe), "--db", str(db)])
    assert "time to accuracy in seconds: setup " in text.output
