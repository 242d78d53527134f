"""``d5 results list|show|export|compare``, run in-process against a temporary store."""

from __future__ import annotations

import csv
import io
import json
import os
import time
from pathlib import Path

import pytest

from d5core.cli.output import read_json
from d5core.measure.engine import MeasureOptions, measure
from d5core.plugins import PluginManager
from d5core.results import ResultsStore

ENV = {
    "packages": {"d5core": "0.1.0"},
    "cpu": {"model": "Test CPU", "logical_cores": 2, "physical_cores": 2},
    "os": {"system": "Linux", "release": "6.1", "machine": "x86_64"},
    "python": {"version": "3.11.7", "implementation": "CPython"},
    "threads": {"OMP_NUM_THREADS": "1"},
    "allocator": {"policy": "steady", "library": "glibc 2.36", "applied": True},
    "argv": ["bench.py"],
}
# Short calls: a busy-wait this short is rarely preempted, so medians hold on a busy machine.
BASE_S = 3e-4
OPTIONS = MeasureOptions(warmup=5, min_samples=60, max_samples=200, time_budget_s=2.0)


def _spinner(seconds: float):
    """A callable that busy-waits ``seconds``: steady on a loaded machine, unlike sleep."""

    def spin() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    return spin


def _open(db: Path) -> ResultsStore:
    return ResultsStore.open(db, manager=PluginManager({}, discover_installed=False))


def _record(db: Path, name: str, seconds: float, env: dict = ENV, accuracy: float = 0.9) -> str:
    """A run stored as ``d5 bench`` stores one: samples of three processes (here three
    rounds of one process, labelled as processes 0, 1 and 2)."""
    with _open(db) as store, store.run("op", name, environment=env, config={"s": seconds}) as rid:
        rounds = [measure(_spinner(seconds), OPTIONS, name=name).samples for _ in range(3)]
        samples = [s for r in rounds for s in r]
        processes = [i for i, r in enumerate(rounds) for _ in r]
        store.add_measurement(
            rid, "forward", samples, labels={"backend": "spin", "shape": [8, 8]},
            processes=processes,
        )  # fmt: skip
        store.add_metric(rid, "accuracy", accuracy)
    return rid


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, object]:
    """Four runs: two of the same callable, one 20% slower, one on another environment."""
    db = tmp_path_factory.mktemp("cli") / "results.sqlite"
    with pytest.MonkeyPatch.context() as mp:
        # A quiet machine as recorded, whatever the real load: load warnings are
        # tested in test_run_load.py.
        mp.setattr(os, "getloadavg", lambda: (0.1, 0.1, 0.1))
        base = _record(db, "base", BASE_S)
        again = _record(db, "again", BASE_S)
        slow = _record(db, "slow", 1.2 * BASE_S, accuracy=0.8)
        other_env = dict(ENV, packages={"d5core": "0.1.0", "torch": "2.13.0"})
        elsewhere = _record(db, "elsewhere", BASE_S, env=other_env)
    return {"db": db, "base": base, "again": again, "slow": slow, "elsewhere": elsewhere}


def _args(runs, *args: str) -> list[str]:
    return ["results", *args, "--db", str(runs["db"])]


# -- list and show -----------------------------------------------------------------------


def test_list_shows_every_run_newest_first(runs, d5_cli):
    result = d5_cli(*_args(runs, "list", "--json"))
    assert result.exit_code == 0, result.stderr
    rows = read_json(result.stdout, "results list")
    assert [r["name"] for r in rows] == ["elsewhere", "slow", "again", "base"]
    assert [r["run_id"] for r in rows] == [runs[n] for n in ("elsewhere", "slow", "again", "base")]
    assert {r["status"] for r in rows} == {"complete"}
    assert all(r["n_measurements"] == 1 and r["n_metrics"] == 1 for r in rows)


def test_list_table_names_each_run(runs, d5_cli):
    result = d5_cli(*_args(runs, "list", "--limit", "2"))
    assert result.exit_code == 0, result.stderr
    assert runs["elsewhere"] in result.stdout and runs["slow"] in result.stdout
    assert runs["base"] not in result.stdout


def test_list_reads_the_database_named_by_d5_db(runs, d5_cli, monkeypatch):
    monkeypatch.setenv("D5_DB", str(runs["db"]))
    result = d5_cli("results", "list", "--json", "--kind", "op")
    assert result.exit_code == 0, result.stderr
    assert len(read_json(result.stdout, "results list")) == 4


def test_show_prints_settings_environment_and_measurements(runs, d5_cli):
    result = d5_cli(*_args(runs, "show", runs["base"][:6]))
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert f"run {runs['base']}" in out and "complete" in out
    assert "Test CPU" in out and "OMP_NUM_THREADS=1" in out
    assert "allocator    steady (glibc 2.36)" in out
    assert "forward" in out and "backend=spin" in out and "µs" in out
    assert "accuracy" in out


def test_show_json_has_summary_and_samples_on_request(runs, d5_cli):
    result = d5_cli(*_args(runs, "show", runs["base"], "--json", "--samples"))
    assert result.exit_code == 0, result.stderr
    doc = read_json(result.stdout, "results show")
    assert doc["run"]["run_id"] == runs["base"]
    (m,) = doc["measurements"]
    assert len(m["samples"]) == m["n"] == m["summary"]["n"]
    assert m["summary"]["median"] == pytest.approx(BASE_S, rel=0.5)
    assert doc["environment"]["cpu"]["model"] == "Test CPU"


# -- export ------------------------------------------------------------------------------


def test_export_json_includes_raw_samples_of_each_run(runs, d5_cli):
    result = d5_cli(*_args(runs, "export", runs["base"], runs["slow"], "--format", "json"))
    assert result.exit_code == 0, result.stderr
    doc = read_json(result.stdout, "results export")
    assert [d["run"]["run_id"] for d in doc["runs"]] == [runs["base"], runs["slow"]]
    with _open(runs["db"]) as store:
        for d in doc["runs"]:
            (m,) = d["measurements"]
            assert m["samples"] == store.samples(m["id"])


def test_export_csv_has_one_row_per_sample_and_metric(runs, d5_cli, tmp_path):
    out = tmp_path / "export.csv"
    result = d5_cli(*_args(runs, "export", runs["base"], "--format", "csv", "--output", str(out)))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    with _open(runs["db"]) as store:
        (m,) = store.measurements(runs["base"])
        expected = store.samples(m.id)
    samples = [r for r in rows if r["record"] == "sample"]
    assert [float(r["value"]) for r in samples] == expected
    assert [int(r["index"]) for r in samples] == list(range(len(expected)))
    assert {r["run_id"] for r in rows} == {runs["base"]}
    assert json.loads(samples[0]["labels"]) == {"backend": "spin", "shape": [8, 8]}
    (metric,) = [r for r in rows if r["record"] == "metric"]
    assert (metric["metric"], float(metric["value"])) == ("accuracy", 0.9)


def test_export_refuses_json_and_csv_together(runs, d5_cli):
    result = d5_cli(*_args(runs, "export", runs["base"], "--json", "--format", "csv"))
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1


# -- compare -------------------------------------------------------------------------------


def _compare(runs, d5_cli, a: str, b: str, *extra: str) -> tuple[int, dict, str]:
    result = d5_cli(*_args(runs, "compare", runs[a], runs[b], "--json", *extra))
    return result.exit_code, read_json(result.stdout) if result.stdout else None, result.stderr


def test_two_runs_of_the_same_callable_are_the_same(runs, d5_cli):
    code, doc, err = _compare(runs, d5_cli, "base", "again")
    assert code == 0, err
    assert doc["same_environment"] is True and doc["environment_differences"] == []
    (row,) = doc["comparisons"]
    assert row["metric"] == "forward" and row["labels"] == {"backend": "spin", "shape": [8, 8]}
    assert row["verdict"] == "same", row
    assert "warning" not in err


def test_a_run_twenty_percent_slower_is_slower(runs, d5_cli):
    code, doc, err = _compare(runs, d5_cli, "base", "slow")
    assert code == 0, err
    (row,) = doc["comparisons"]
    assert (row["verdict"], row["change"], row["better"]) == ("worse", "higher", "lower"), row
    assert row["ratio"] == pytest.approx(1.2, rel=0.1)
    assert row["ratio_ci_low"] <= row["ratio"] <= row["ratio_ci_high"]
    assert row["p_value"] < doc["alpha"]
    assert row["effect_size"] > 0
    assert row["baseline"]["median"] < row["candidate"]["median"]
    assert row["baseline"]["ci_low"] <= row["baseline"]["median"] <= row["baseline"]["ci_high"]
    (metric,) = doc["metrics"]
    assert metric["name"] == "accuracy" and metric["ratio"] == pytest.approx(0.8 / 0.9)


def test_the_faster_direction_is_better(runs, d5_cli):
    _code, doc, _err = _compare(runs, d5_cli, "slow", "base")
    assert [r["verdict"] for r in doc["comparisons"]] == ["better"], doc["comparisons"]


def test_compare_table_shows_medians_ratio_p_value_and_verdict(runs, d5_cli):
    result = d5_cli(*_args(runs, "compare", runs["base"], runs["slow"]))
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "worse (slower)" in out and "Welch's t-test" in out and "forward" in out
    assert runs["base"] in out and runs["slow"] in out


@pytest.mark.parametrize("flag", ["--fail-if-worse", "--fail-if-slower"])
def test_fail_if_worse_exits_one_naming_the_measurement(runs, d5_cli, flag):
    result = d5_cli(*_args(runs, "compare", runs["base"], runs["slow"], flag))
    assert result.exit_code == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(f"d5: error: run {runs['slow']} is worse than {runs['base']} in: forward")
    )
    same = d5_cli(*_args(runs, "compare", runs["base"], runs["again"], flag))
    assert same.exit_code == 0, same.stderr


def test_different_environments_are_flagged_never_silently_compared(runs, d5_cli):
    code, doc, err = _compare(runs, d5_cli, "base", "elsewhere")
    assert code == 0
    assert doc["same_environment"] is False
    assert any(
        d.startswith("packages.torch: None vs '2.13.0'") for d in doc["environment_differences"]
    )
    warning = [line for line in err.splitlines() if line.startswith("d5: warning:")]
    assert len(warning) == 1 and "different environments" in warning[0]
    assert "packages.torch" in warning[0]
    table = d5_cli(*_args(runs, "compare", runs["base"], runs["elsewhere"]))
    assert "different environments" in table.stdout and "different environments" in table.stderr


def test_alpha_is_passed_to_the_test(runs, d5_cli):
    _code, doc, _err = _compare(runs, d5_cli, "base", "slow", "--alpha", "0.05")
    assert doc["alpha"] == 0.05 and doc["comparisons"][0]["alpha"] == 0.05


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [("show", "feedfacecafe"), ("compare", "feedfacecafe", "BASE"), ("export", "feedfacecafe")],
)
def test_unknown_run_id_exits_two_with_one_line(runs, d5_cli, command):
    args = [runs["base"] if a == "BASE" else a for a in command]
    result = d5_cli(*_args(runs, *args))
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("d5: error: no run 'feedfacecafe' in ")


def test_missing_database_exits_two_with_one_line(d5_cli, tmp_path):
    result = d5_cli("results", "list", "--db", str(tmp_path / "none.sqlite"))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"d5: error: no results database at {tmp_path / 'none.sqlite'}; run a benchmark "
        "first, or pass --db PATH or set D5_DB to the database to read"
    ]
    assert not (tmp_path / "none.sqlite").exists()


def test_a_text_file_as_database_exits_two_and_is_left_alone(d5_cli, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n")
    result = d5_cli("results", "list", "--db", str(path))
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"d5: error: {path} is not a d5 results database: file is not a database"
    )
    assert path.read_text() == "not a database\n"


def test_run_left_by_a_dead_process_lists_as_incomplete(d5_cli, tmp_path):
    import subprocess
    import sys

    db = tmp_path / "results.sqlite"
    code = (
        "import os, sys\n"
        "from d5core.plugins import PluginManager\n"
        "from d5core.results import ResultsStore\n"
        "s = ResultsStore.open(sys.argv[1], manager=PluginManager({}, discover_installed=False))\n"
        "s.begin_run('train', 'crashed', environment={})\n"
        "os._exit(3)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(db)], check=False)
    result = d5_cli("results", "list", "--json", "--db", str(db))
    assert result.exit_code == 0, result.stderr
    (row,) = read_json(result.stdout, "results list")
    assert row["name"] == "crashed" and row["status"] == "incomplete"
