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
from d5core.teamstore.documents import import_document

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


# -- merge, export --format jsonl, import (issue 34) ---------------------------------------


def _small_store(path: Path, *names: str) -> list[str]:
    """A store of quick runs (plain samples, no timing), one per name."""
    ids = []
    with _open(path) as store:
        for name in names:
            with store.run("op", name, environment=ENV, tags=["job"]) as rid:
                store.add_measurement(rid, "forward", [1e-3, float("nan"), 2e-3],
                                      processes=[0, 1, 1])  # fmt: skip
                store.add_metric(rid, "accuracy", 0.5)
            ids.append(rid)
    return ids


def _transfer_documents(path: Path | str) -> dict[str, str]:
    from d5core.teamstore.transfer import canonical_text

    with _open(path) as store:
        return {r.id: canonical_text(store.export_run(r.id)) for r in store.list_runs()}


def test_merge_prints_counts_per_source_and_exits_zero(d5_cli, tmp_path):
    from json_schema_doc import check

    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    _small_store(a, "a1", "a2")
    _small_store(b, "b1")
    dest = tmp_path / "merged.sqlite"
    result = d5_cli("results", "merge", str(a), str(b), "--into", str(dest), "--json")
    assert result.exit_code == 0, result.stderr
    data = read_json(result.stdout, "results merge")
    check("results merge", data)
    assert data["destination"] == str(dest)
    assert [(s["source"], s["copied"]) for s in data["sources"]] == [(str(a), 2), (str(b), 1)]
    assert data["total"] == {"copied": 3, "already_there": 0, "conflicts": 0,
                             "skipped_running": 0}  # fmt: skip
    table = d5_cli("results", "merge", str(a), str(b), "--into", str(dest))
    assert table.exit_code == 0, table.stderr
    assert f"runs merged into {dest}" in table.stdout
    (total,) = [line for line in table.stdout.splitlines() if "total" in line]
    assert [cell.strip() for cell in total.split("│")[1:-1]] == ["total", "0", "3", "0", "0"]


def test_merge_with_a_conflict_exits_one_naming_the_run(d5_cli, tmp_path):
    a = tmp_path / "a.sqlite"
    (rid,) = _small_store(a, "a1")
    dest = tmp_path / "merged.sqlite"
    assert d5_cli("results", "merge", str(a), "--into", str(dest)).exit_code == 0
    with _open(a) as store:
        changed = store.export_run(rid)
    changed["metrics"][0]["value"] = 0.75
    b = tmp_path / "b.sqlite"
    with _open(b) as store:
        import_document(store, changed)
    (fresh,) = _small_store(b, "b1")
    result = d5_cli("results", "merge", str(b), "--into", str(dest))
    assert result.exit_code == 1
    assert f"conflict: run {rid} of {b} differs from the one in {dest} (metrics[0].value)" in (
        result.stdout
    )
    (error,) = result.stderr.strip().splitlines()
    assert error.startswith(f"d5: error: 1 run(s) conflict with runs of the same id in {dest}")
    assert rid in error
    assert fresh in _transfer_documents(dest)


@pytest.mark.parametrize("case", ["missing source", "not a store", "dest is a source"])
def test_merge_bad_input_exits_two_with_one_line_and_writes_nothing(d5_cli, tmp_path, case):
    a = tmp_path / "a.sqlite"
    _small_store(a, "a1")
    dest = tmp_path / "merged.sqlite"
    if case == "missing source":
        args = [str(a), str(tmp_path / "none.sqlite")]
    elif case == "not a store":
        (tmp_path / "notes.txt").write_text("hello\n")
        args = [str(a), str(tmp_path / "notes.txt")]
    else:
        args, dest = [str(a)], a
    before = _transfer_documents(a)
    result = d5_cli("results", "merge", *args, "--into", str(dest))
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("d5: error: ")
    assert _transfer_documents(a) == before
    assert dest == a or not dest.exists()


def test_export_jsonl_then_import_round_trips(d5_cli, tmp_path):
    from json_schema_doc import check

    a = tmp_path / "a.sqlite"
    ids = _small_store(a, "a1", "a2")
    out = tmp_path / "runs.jsonl"
    exported = d5_cli("results", "export", "--all", "--format", "jsonl", "-o", str(out),
                      "--db", str(a))  # fmt: skip
    assert exported.exit_code == 0, exported.stderr
    assert exported.stderr.strip() == f"wrote 2 run(s), 6 samples, 0 artifact(s), to {out}"
    assert [json.loads(line)["run"]["run_id"] for line in out.read_text().splitlines()] == ids
    dest = tmp_path / "site-b" / "results.sqlite"
    imported = d5_cli("results", "import", str(out), "--db", str(dest), "--json")
    assert imported.exit_code == 0, imported.stderr
    data = read_json(imported.stdout, "results import")
    check("results import", data)
    assert data["sources"][0]["source"] == str(out) and data["total"]["copied"] == 2
    assert _transfer_documents(dest) == _transfer_documents(a)
    again = d5_cli("results", "import", str(out), "--db", str(dest))
    assert again.exit_code == 0, again.stderr
    assert f"runs imported into {dest}" in again.stdout


def test_export_jsonl_to_standard_output_writes_one_line_per_run(d5_cli, tmp_path):
    a = tmp_path / "a.sqlite"
    ids = _small_store(a, "a1", "a2")
    result = d5_cli("results", "export", ids[1][:6], "--format", "jsonl", "--db", str(a))
    assert result.exit_code == 0, result.stderr
    (line,) = result.stdout.splitlines()
    document = json.loads(line)
    assert document["format"] == "d5-run/1" and document["run"]["run_id"] == ids[1]
    assert document["measurements"][0]["samples"] == [1e-3, None, 2e-3]


def test_export_leaves_a_running_run_out_of_jsonl_with_a_warning(d5_cli, tmp_path):
    a = tmp_path / "a.sqlite"
    (done,) = _small_store(a, "a1")
    with _open(a) as store:
        live = store.begin_run("op", "live", environment=ENV)
    result = d5_cli("results", "export", "--all", "--format", "jsonl", "--db", str(a))
    assert result.exit_code == 0, result.stderr
    assert [json.loads(x)["run"]["run_id"] for x in result.stdout.splitlines()] == [done]
    assert f"d5: warning: run {live} is still running: left out" in result.stderr


@pytest.mark.parametrize(
    "args",
    [["--all", "--json", "--format", "jsonl"], [], ["RUN", "--all"]],
    ids=["json-and-jsonl", "no-runs", "runs-and-all"],
)
def test_export_contradictions_exit_two(d5_cli, tmp_path, args):
    a = tmp_path / "a.sqlite"
    (rid,) = _small_store(a, "a1")
    args = [rid if x == "RUN" else x for x in args]
    result = d5_cli("results", "export", *args, "--db", str(a))
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_import_of_a_malformed_line_exits_two_and_changes_nothing(d5_cli, tmp_path):
    a = tmp_path / "a.sqlite"
    _small_store(a, "a1", "a2")
    out = tmp_path / "runs.jsonl"
    d5_cli("results", "export", "--all", "--format", "jsonl", "-o", str(out), "--db", str(a))
    good = out.read_text().splitlines()
    out.write_text("\n".join([good[0], '{"format": "d5-run/1", "run": {}}', good[1]]) + "\n")
    dest = tmp_path / "dest.sqlite"
    _small_store(dest, "d1")
    before = _transfer_documents(dest)
    result = d5_cli("results", "import", str(out), "--db", str(dest))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"d5: error: {out} line 2: malformed run document: run.run_id is missing"
    ]
    assert _transfer_documents(dest) == before


def test_import_of_a_missing_file_exits_two(d5_cli, tmp_path):
    dest = tmp_path / "dest.sqlite"
    result = d5_cli("results", "import", str(tmp_path / "none.jsonl"), "--db", str(dest))
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert not dest.exists()


def test_merge_of_three_rank_job_stores_into_postgresql(d5_cli, tmp_path, postgres_url):
    from json_schema_doc import check

    jobs = [tmp_path / f"job-{j}.sqlite" for j in (1, 2, 3)]
    ids = [rid for j, job in enumerate(jobs) for rid in _small_store(job, f"j{j}-r0", f"j{j}-r1")]
    args = ("results", "merge", *map(str, jobs), "--into", postgres_url, "--json")
    result = d5_cli(*args)
    assert result.exit_code == 0, result.stderr
    data = read_json(result.stdout, "results merge")
    check("results merge", data)
    assert [s["copied"] for s in data["sources"]] == [2, 2, 2]
    assert data["destination"] == postgres_url
    again = d5_cli(*args)
    assert read_json(again.stdout, "results merge")["total"] == {
        "copied": 0, "already_there": 6, "conflicts": 0, "skipped_running": 0
    }  # fmt: skip
    with _open(postgres_url) as store:
        assert sorted(r.id for r in store.list_runs()) == sorted(ids)


def test_import_into_the_postgresql_store_named_by_d5_db(
    d5_cli, tmp_path, postgres_url, monkeypatch
):
    a = tmp_path / "a.sqlite"
    ids = _small_store(a, "a1", "a2")
    out = tmp_path / "runs.jsonl"
    assert d5_cli("results", "export", *ids, "--format", "jsonl", "-o", str(out),
                  "--db", str(a)).exit_code == 0  # fmt: skip
    monkeypatch.setenv("D5_DB", postgres_url)
    result = d5_cli("results", "import", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    data = read_json(result.stdout, "results import")
    assert data["destination"] == postgres_url and data["total"]["copied"] == 2
    assert _transfer_documents(postgres_url) == _transfer_documents(a)


def test_import_of_a_run_that_differs_from_the_stored_one_exits_one(d5_cli, tmp_path):
    a = tmp_path / "a.sqlite"
    (rid,) = _small_store(a, "a1")
    out = tmp_path / "runs.jsonl"
    d5_cli("results", "export", rid, "--format", "jsonl", "-o", str(out), "--db", str(a))
    dest = tmp_path / "dest.sqlite"
    assert d5_cli("results", "import", str(out), "--db", str(dest)).exit_code == 0
    document = json.loads(out.read_text())
    document["run"]["tags"] = ["job", "renamed"]
    out.write_text(json.dumps(document) + "\n")
    result = d5_cli("results", "import", str(out), "--db", str(dest), "--json")
    assert result.exit_code == 1
    (source,) = read_json(result.stdout, "results import")["sources"]
    assert source["conflict_runs"] == [{"run_id": rid, "differences": ["run.tags"]}]
    (error,) = result.stderr.strip().splitlines()
    assert error.startswith("d5: error: 1 run(s) conflict") and rid in error
