"""Issue 13, item 5, on the shared plugins: ``d5 run``, ``validate``, ``bench net`` and
``conformance`` print one envelope, in the shape docs/json.md gives each of them, as
standard JSON. ``d5 run`` has one shape for one run, repeated runs and a failed one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from json_schema_doc import check

from d5core import __version__
from d5core.cli.output import schema_name

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "digits-mlp.toml"


@pytest.fixture(autouse=True)
def _private_db(tmp_path, monkeypatch):
    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))


@pytest.fixture
def one_epoch(tmp_path) -> Path:
    """The digits recipe trained for one epoch, with thresholds it meets."""
    text = RECIPE.read_text().replace("epochs = 30", "epochs = 1")
    text = text.replace(
        "final_test_accuracy = { min = 0.9 }", "final_test_accuracy = { min = 0.5 }"
    )
    recipe = tmp_path / "one-epoch.toml"
    recipe.write_text(text.replace("time_to_accuracy = { max = 60 }\n", ""))
    return recipe


def _json(d5_cli, command: str, *args: str, code: int = 0) -> object:
    """The ``data`` of ``d5 COMMAND ARGS --json``, parsed as standard JSON only."""
    result = d5_cli(*command.split(), *args, "--json")
    assert result.exit_code == code, result.stderr

    def refuse(name: str) -> object:
        raise ValueError(f"{name} in the output of d5 {command}")

    document = json.loads(result.stdout, parse_constant=refuse)
    assert document["schema"] == schema_name(command) and document["d5"] == __version__
    return document["data"]


def test_run_prints_the_same_shape_for_one_run_and_for_repeats(d5_cli, one_epoch):
    one = _json(d5_cli, "run", str(one_epoch))
    check("run", one)
    assert one["passed"] is True and len(one["runs"]) == 1 and one["summary"]["runs"] == 1
    repeated = _json(d5_cli, "run", str(one_epoch), "--repeat", "2")
    check("run", repeated)
    assert [r["seed"] for r in repeated["runs"]] == [0, 1]
    assert set(repeated) == set(one) and set(repeated["runs"][0]) == set(one["runs"][0])


def test_a_diverged_run_writes_its_non_finite_loss_as_null(d5_cli, one_epoch):
    data = _json(d5_cli, "run", str(one_epoch), "--set", "lr=1e30", code=1)
    check("run", data)
    (run,) = data["runs"]
    assert run["status"] == "diverged" and data["passed"] is False
    assert run["metrics"]["final_loss"] is None
    assert run["checks"][0]["value"] is None


def test_validate_op_has_its_documented_shape(d5_cli):
    data = _json(d5_cli, "validate op", "Relu", "--backend", "torch")
    check("validate op", data)


def test_validate_net_has_its_documented_shape(d5_cli):
    data = _json(d5_cli, "validate net", "mlp", "--executor", "torch")
    check("validate net", data)


def test_bench_net_has_its_documented_shape(d5_cli):
    data = _json(d5_cli, "bench net", "mlp", "--executors", "numpy,torch",
                 "--processes", "1", "--warmup", "1", "--min-samples", "6",
                 "--time-budget", "0.05")  # fmt: skip
    check("bench net", data)
    assert len({row["run_id"] for row in data}) == 1


def test_conformance_has_its_documented_shape(d5_cli):
    data = _json(d5_cli, "conformance", "onnxruntime", "--pattern", r"^test_relu$")
    check("conformance", data)
