"""A plugin's metric selected by name in real training runs (issue 13, item 7): in a
recipe's METRICS with a threshold that holds and one that fails, on the command line
with ``d5 run --metric``, and the events docs/metrics.md says a metric can read."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from json_schema_doc import check
from qa_plugin import add_qa_plugin

from d5core.results.store import ResultsStore

ROOT = Path(__file__).resolve().parents[2]
DIGITS = (ROOT / "recipes" / "digits-mlp.toml").read_text()
METRICS_DOC = ROOT / "docs" / "metrics.md"


@pytest.fixture
def qa_site(d5_site):
    """``d5-plugin-qa`` installed: it offers ``qa_step_count`` and ``qa_event_log``."""
    return add_qa_plugin(d5_site, {"qa_step_count": "QAStepCount", "qa_event_log": "QAEventLog"})


def _recipe(tmp_path: Path, metrics: str = "") -> Path:
    """The digits recipe for one epoch, with a threshold it meets and ``metrics`` added."""
    text = DIGITS.replace("epochs = 30", "epochs = 1")
    text = text.replace(
        "final_test_accuracy = { min = 0.9 }", "final_test_accuracy = { min = 0.5 }"
    )
    text = text.replace("time_to_accuracy = { max = 60 }\n", metrics)
    path = tmp_path / "r.toml"
    path.write_text(text)
    return path


def _run(d5_cli, tmp_path: Path, recipe: Path, *args: str, code: int = 0) -> dict:
    result = d5_cli("run", str(recipe), "--db", str(tmp_path / "r.sqlite"), "--json", *args)
    assert result.exit_code == code, result.stderr
    data = json.loads(result.stdout)["data"]
    check("run", data)
    return data


def test_a_plugin_metric_threshold_that_holds_passes_and_is_stored(qa_site, d5_cli, tmp_path):
    recipe = _recipe(tmp_path, "qa_step_count = { min = 1, options = { min_batch = 1 } }\n")
    (run,) = _run(d5_cli, tmp_path, recipe)["runs"]
    steps = run["steps"]
    assert steps > 0 and run["passed"] is True
    assert run["metrics"]["qa_step_count"] == steps
    assert {"metric": "qa_step_count", "min": 1.0, "value": steps, "passed": True} in run["checks"]
    assert run["metric_results"] == {
        "qa_step_count": {"value": steps, "unit": "steps", "min_batch": 1}
    }
    with ResultsStore.open(tmp_path / "r.sqlite") as store:
        (stored,) = [m for m in store.metrics(run["run_id"]) if m.name == "qa_step_count"]
        config = store.get_run(run["run_id"]).config
    assert (stored.value, stored.unit, stored.better) == (steps, "steps", "higher")
    assert config["metric_results"] == run["metric_results"]


def test_a_plugin_metric_threshold_that_fails_exits_1_naming_it(qa_site, d5_cli, tmp_path):
    # every batch has 32 samples or fewer, so none counts
    recipe = _recipe(tmp_path, "qa_step_count = { min = 1, options = { min_batch = 33 } }\n")
    result = d5_cli("run", str(recipe), "--db", str(tmp_path / "r.sqlite"))
    assert result.exit_code == 1
    assert re.fullmatch(
        r"d5: error: recipe r: qa_step_count = 0, needs >= 1\.0 \(run \w+, complete\)\n",
        result.stderr,
    )
    assert "  FAIL qa_step_count = 0.0 (min 1.0)" in result.stdout


def test_d5_run_metric_measures_an_installed_metric_without_a_threshold(qa_site, d5_cli, tmp_path):
    recipe = _recipe(tmp_path)
    result = d5_cli("run", str(recipe), "--db", str(tmp_path / "r.sqlite"),
                    "--metric", "qa_step_count")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    steps = int(re.search(r", (\d+) steps,", result.stdout).group(1))
    assert f"\n       qa_step_count = {steps} steps\n" in result.stdout
    (run,) = _run(d5_cli, tmp_path, recipe, "--metric", "qa_step_count")["runs"]
    assert run["metrics"]["qa_step_count"] == run["steps"]
    assert [c["metric"] for c in run["checks"]] == ["final_test_accuracy"]
    assert run["metric_results"]["qa_step_count"]["unit"] == "steps"
    with ResultsStore.open(tmp_path / "r.sqlite") as store:
        assert store.get_run(run["run_id"]).config["extra_metrics"] == ["qa_step_count"]


def test_a_threshold_on_a_metric_that_cannot_measure_fails_with_its_reason(d5_cli, tmp_path):
    # numerical_error is fed directly by validation, so a training run gives it nothing
    recipe = _recipe(tmp_path, "numerical_error = { max = 1 }\n")
    result = d5_cli("run", str(recipe), "--db", str(tmp_path / "r.sqlite"))
    assert result.exit_code == 1
    assert result.stderr.startswith(
        "d5: error: recipe r: numerical_error = unavailable (no arrays were compared"
    )
    assert result.stderr.count("\n") == 1


def _documented_events() -> dict[str, set[str]]:
    """The events table of docs/metrics.md: each event and the payload keys it lists."""
    text = METRICS_DOC.read_text().split("### Events a metric can read", 1)[1]
    rows = re.findall(r"^\| `([\w.]+)` \|[^|]*\|([^|]*)\|$", text, re.MULTILINE)
    return {event: set(re.findall(r"`(\w+)`", payload)) for event, payload in rows}


@pytest.mark.parametrize("executor", ["numpy", "torch"])
def test_the_events_docs_list_are_those_a_run_publishes(qa_site, d5_cli, tmp_path, executor):
    recipe = _recipe(tmp_path)
    (run,) = _run(d5_cli, tmp_path, recipe, "--set", f"executor={executor}",
                  "--metric", "qa_event_log")["runs"]  # fmt: skip
    seen = run["metric_results"]["qa_event_log"]["events"]
    documented = _documented_events()
    assert set(seen) == set(documented)
    for event, keys in seen.items():
        assert set(keys) <= documented[event], event


def _mpi_problem() -> str | None:
    """Why a data-parallel run cannot be started here (as tests/integration/
    test_distributed_run.py decides it), or ``None``."""
    here = Path(sys.executable).with_name("mpiexec")
    if not here.is_file() and shutil.which("mpiexec") is None:
        return "mpiexec is not installed (pip install mpich, or a system MPI)"
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed"
    return None


@pytest.mark.skipif(_mpi_problem() is not None, reason=str(_mpi_problem()))
def test_d5_run_metric_reaches_every_rank_of_a_data_parallel_run(qa_site, tmp_path):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "D5_TEST_"))}
    environ["PYTHONPATH"] = str(qa_site.path)
    d5 = Path(sys.executable).with_name("d5")
    proc = subprocess.run(
        [str(d5), "run", str(_recipe(tmp_path)), "--ranks", "2", "--metric", "qa_step_count",
         "--db", str(tmp_path / "r.sqlite"), "--json"],
        capture_output=True, text=True, env=environ, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run,) = json.loads(proc.stdout)["data"]["runs"]
    assert run["distributed"]["ranks"] == 2
    assert run["metrics"]["qa_step_count"] == run["steps"] > 0
