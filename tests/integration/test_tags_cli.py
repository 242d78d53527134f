"""``--tag`` on every command that makes runs: each run it stores carries the tags
(``d5 bench op|net``, ``d5 run`` with --repeat and --ranks, ``d5 validate op|net``,
``d5 conformance``), ``d5 results list --tag`` finds them, and a bad tag is refused
with one line and exit 2 before anything runs. ``d5 conformance`` stores one run per
executor with its counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from d5core.cli.output import read_json
from d5core.results import ResultsStore
from d5core.testing.training import SMALL_DIGITS_RECIPE

TINY_BENCH = ["--processes", "1", "--time-budget", "0.05", "--min-samples", "6",
              "--max-samples", "20", "--warmup", "1"]  # fmt: skip

# Two epochs of the digits MLP: a run of about a second, thresholds that always hold.
RECIPE = SMALL_DIGITS_RECIPE + """
[metrics]
final_test_accuracy = { min = 0.0 }
"""


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "results.sqlite"
    monkeypatch.setenv("D5_DB", str(path))
    return path


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "digits-tiny.toml"
    path.write_text(RECIPE, encoding="utf-8")
    return path


def _tags(db: Path, run_id: str) -> tuple[str, ...]:
    with ResultsStore.open(db) as store:
        return store.get_run(run_id).tags


def _ok(result) -> None:
    assert result.exit_code == 0, result.stdout + result.stderr


def test_bench_op_tags_its_run_and_results_list_finds_it(db, d5_cli):
    result = d5_cli("bench", "op", "Relu", "--backends", "numpy", "--shape", "8x8",
                    *TINY_BENCH, "--tag", "nightly", "--tag", "<b>x</b>", "--json")  # fmt: skip
    _ok(result)
    (row,) = read_json(result.stdout)
    assert _tags(db, row["run_id"]) == ("<b>x</b>", "nightly")
    with ResultsStore.open(db) as store, store.run("op", "bench Relu", tags=["other"]):
        pass  # a run the selection leaves out
    listed = d5_cli("results", "list", "--tag", "nightly", "--json")
    _ok(listed)
    assert [r["run_id"] for r in read_json(listed.stdout, "results list")] == [row["run_id"]]


def test_bench_net_tags_its_run(db, d5_cli):
    result = d5_cli("bench", "net", "mlp", "--executors", "numpy", "--batch", "2",
                    *TINY_BENCH, "--tag", "net-tag", "--json")  # fmt: skip
    _ok(result)
    (row,) = read_json(result.stdout)
    assert _tags(db, row["run_id"]) == ("net-tag",)


def test_validate_op_and_net_tag_their_runs(db, d5_cli):
    op = d5_cli("validate", "op", "Relu", "--backend", "numpy", "--shape", "3x4",
                "--tag", "checked", "--json")  # fmt: skip
    _ok(op)
    assert _tags(db, read_json(op.stdout)["run_id"]) == ("checked",)
    net = d5_cli("validate", "net", "mlp", "--executor", "numpy", "--tag", "checked", "--json")
    _ok(net)
    assert _tags(db, read_json(net.stdout)["run_id"]) == ("checked",)


def test_run_tags_every_repeat(db, recipe, d5_cli):
    result = d5_cli("run", str(recipe), "--repeat", "2", "--tag", "sweep", "--tag", "a b",
                    "--json")  # fmt: skip
    _ok(result)
    runs = read_json(result.stdout)["runs"]
    assert len(runs) == 2
    assert [_tags(db, r["run_id"]) for r in runs] == [("a b", "sweep")] * 2
    with ResultsStore.open(db) as store:
        assert {r.id for r in store.list_runs(tag="sweep", kind="train")} == {
            r["run_id"] for r in runs
        }


def test_run_on_two_ranks_tags_the_one_run(tmp_path, recipe, d5_ranks):
    db = tmp_path / "ranks.sqlite"
    proc = d5_ranks("run", str(recipe), "--ranks", "2", "--db", str(db), "--tag", "dp", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with ResultsStore.open(db) as store:
        (run,) = store.list_runs()
    assert run.tags == ("dp",) and run.config["distributed"]["ranks"] == 2


def test_conformance_stores_its_counts_as_a_tagged_run(db, d5_cli):
    result = d5_cli("conformance", "onnxruntime", "--pattern", r"^test_(relu|abs)$",
                    "--tag", "ort", "--json")  # fmt: skip
    _ok(result)
    data = read_json(result.stdout)
    with ResultsStore.open(db) as store:
        run = store.get_run(data["run_id"])
        metrics = {k.name: k.value for k in store.metrics(run.id)}
    assert (run.kind, run.name, run.status) == (
        "conformance",
        "conformance onnxruntime",
        "complete",
    )
    assert run.tags == ("ort",)
    counts = data["counts"]
    assert metrics == {
        "passed": counts["passed"], "failed": counts["failed"], "errors": counts["error"],
        "unsupported": counts["unsupported"], "total": data["total"],
    }  # fmt: skip
    assert data["total"] == 2 and counts["passed"] == 2
    assert run.config["failing"] == [] and run.config["pattern"] == r"^test_(relu|abs)$"
    text = d5_cli("conformance", "onnxruntime", "--pattern", r"^test_relu$")
    _ok(text)
    assert "1/1 onnx" in text.stdout and "stored as run " in text.stdout


def test_conformance_stores_the_failing_cases_and_still_checks_the_baseline(db, tmp_path, d5_cli):
    baseline = tmp_path / "baseline.json"
    baseline.write_text('{"numpy": {"passed": 99}}', encoding="utf-8")
    result = d5_cli("conformance", "numpy", "--pattern", r"^test_relu$", "--baseline",
                    str(baseline), "--json")  # fmt: skip
    assert result.exit_code == 1, result.stdout + result.stderr
    data = read_json(result.stdout)
    with ResultsStore.open(db) as store:
        run = store.get_run(data["run_id"])
    assert run.kind == "conformance" and run.config["baseline"]["ok"] is False


@pytest.mark.parametrize(
    "command",
    [
        ("bench", "op", "Relu", "--backends", "numpy", "--shape", "8x8"),
        ("run", "RECIPE", "--repeat", "2"),
        ("conformance", "onnxruntime", "--pattern", r"^test_relu$"),
    ],
)
def test_a_bad_tag_exits_2_before_anything_is_stored(command, db, recipe, d5_cli):
    args = [str(recipe) if a == "RECIPE" else a for a in command]
    result = d5_cli(*args, "--tag", "ok", "--tag", "bad\ttag")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("d5: error: tag ") and "control characters" in line
    assert not db.exists()
