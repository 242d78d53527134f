"""Issue 19: ``d5 bench net --scenario`` end to end under the real MLPerf LoadGen, numpy
and torch side by side; an inference recipe run by ``d5 run``; ``d5 results compare``
of two inference runs. Runs are short (a fraction of a second of load each)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from json_schema_doc import check

from d5core.cli.app import run
from d5core.cli.output import read_json
from d5core.results import ResultsStore
from d5core.testing import CliResult

SHORT = ("--min-duration", "0.3", "--min-query-count", "64")
RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "lenet5-server.toml"


def _invoke(*args: str) -> CliResult:
    """The ``d5`` command line in this process, as the ``d5_cli`` fixture runs it (for
    the module's shared runs, made once outside any one test)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(list(args))
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("scenario") / "results.sqlite"


@pytest.fixture(scope="module")
def runs(db: Path) -> dict[str, object]:
    """Three runs shared by the tests: offline on numpy and torch (JSON), single-stream
    on numpy and torch with one thread (the table), and single-stream on numpy with two
    threads (JSON)."""
    cli = _invoke
    out: dict[str, object] = {}
    out["offline"] = cli(
        "bench", "net", "lenet5", "--executors", "numpy,torch", "--scenario", "offline",
        "--threads", "1", *SHORT, "--json", "--db", str(db),
    )  # fmt: skip
    out["single"] = cli(
        "bench", "net", "lenet5", "--executors", "numpy,torch", "--scenario",
        "single-stream", "--threads", "1", *SHORT, "--db", str(db),
    )  # fmt: skip
    out["single2"] = cli(
        "bench", "net", "lenet5", "--executors", "numpy", "--scenario", "single-stream",
        "--threads", "2", *SHORT, "--json", "--db", str(db),
    )  # fmt: skip
    return out


def _run_ids(db: Path) -> list[str]:
    with ResultsStore.open(db) as store:
        return [r.id for r in sorted(store.list_runs(), key=lambda r: r.created)]


def test_offline_rows_are_valid_documented_and_stored(runs, db):
    result = runs["offline"]
    assert result.exit_code == 0, result.stderr
    rows = read_json(result.stdout, "bench net scenario")
    check("bench net scenario", rows)
    assert [r["executor"] for r in rows] == ["numpy", "torch"]
    run_id = rows[0]["run_id"]
    for row in rows:
        assert row["valid"] is True and row["failed_checks"] == []
        assert row["scenario"] == "offline" and row["metric_value"] > 0
        assert row["metric"] == "Samples per second"
        assert row["settings"]["threads"] == 1 and row["threads"]["count"] == 1

    with ResultsStore.open(db) as store:
        stored = store.get_run(run_id)
        assert stored.kind == "inference" and stored.status == "complete"
        kept = store.artifact_names(run_id)
        for executor in ("numpy", "torch"):  # the logs, kept in the database
            assert f"{executor}/mlperf_log_summary.txt" in kept
        assert stored.name == "inference lenet5 offline"
        latencies = {m.labels["executor"]: m for m in store.measurements(run_id)
                     if m.metric == "latency"}  # fmt: skip
        assert set(latencies) == {"numpy", "torch"}
        assert all(m.unit == "s" and m.better == "lower" for m in latencies.values())
        metrics = {(k.name, k.labels["executor"]): k.value for k in store.metrics(run_id)}
    for row in rows:
        name = row["executor"]
        assert metrics[("valid", name)] == 1.0
        assert metrics[("latency_p99", name)] == pytest.approx(row["percentiles_s"]["99"])
        assert metrics[("latency_p50", name)] == pytest.approx(row["percentiles_s"]["50"])


def test_single_stream_prints_one_table_with_both_executors(runs):
    result = runs["single"]
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "lenet5, single-stream scenario under LoadGen" in lines[0]
    header = next(line for line in lines if "executor" in line and "p99.9" in line)
    for column in ("result", "metric", "p50", "p90", "QPS w/o overhead", "early stopping",
                   "threads"):  # fmt: skip
        assert column in header
    numpy_row = next(line for line in lines if line.lstrip("│ ").startswith("numpy"))
    torch_row = next(line for line in lines if line.lstrip("│ ").startswith("torch"))
    for row in (numpy_row, torch_row):
        assert "VALID" in row and "INVALID" not in row
        assert "90th percentile latency = " in row and "1 thread" in row


def test_compare_of_two_inference_runs_judges_latency_and_percentiles(runs, db, d5_cli):
    assert runs["single2"].exit_code == 0, runs["single2"].stderr
    ids = _run_ids(db)
    baseline, candidate = ids[1], ids[2]  # single-stream, 1 thread then 2 threads
    result = d5_cli("results", "compare", baseline, candidate, "--json", "--db", str(db))
    assert result.exit_code == 0, result.stderr
    data = read_json(result.stdout, "results compare")
    check("results compare", data)
    (latency,) = [c for c in data["comparisons"] if c["metric"] == "latency"]
    assert latency["labels"] == {
        "executor": "numpy", "scenario": "single-stream", "mode": "performance"
    }  # fmt: skip
    assert latency["better"] == "lower" and latency["verdict"] in ("better", "worse", "same")
    assert latency["baseline"]["n"] > 50 and latency["candidate"]["n"] > 50
    torch_only = [m for m in data["only_in_baseline"] if m["labels"].get("executor") == "torch"]
    assert torch_only, "torch ran in the baseline only"
    better = {m["name"]: m["better"] for m in data["metrics"]}
    for name in ("latency_p50", "latency_p90", "latency_p99", "latency_p99.9"):
        assert better[name] == "lower", name
    assert better["qps"] == better["qps_without_overhead"] == "higher"
    assert better["valid"] == "higher"
    for row in data["metrics"]:
        assert row["labels"]["executor"] == "numpy"
        if row["baseline"] and row["candidate"] and row["change"] != "none":
            direction = "higher" if row["candidate"] > row["baseline"] else "lower"
            assert row["change"] == direction
            assert row["verdict"] == ("better" if direction == row["better"] else "worse")
    assert any("numpy" in w and "thread" in w for w in data["threads"]["warnings"]), data["threads"]
    assert data["settings_warnings"] == []  # the same load: only the threads differ
    other = d5_cli("results", "compare", ids[0], baseline, "--json", "--db", str(db))
    warned = read_json(other.stdout, "results compare")["settings_warnings"]
    assert [w.split()[0] for w in warned] == ["numpy", "torch"]
    assert all("scenario 'offline' vs 'single-stream'" in w for w in warned)


def test_the_recipe_runs_and_is_stored_like_the_bench_command(d5_cli, db):
    result = d5_cli("run", str(RECIPE), "--set", "executor=torch", "--json", "--db", str(db))
    data = read_json(result.stdout, "run inference")
    check("run inference", data)
    (run,) = data["runs"]
    assert result.exit_code == (0 if data["passed"] else 1), result.stderr
    assert run["result"]["executor"] == "torch" and run["result"]["scenario"] == "server"
    assert run["result"]["settings"]["latency_bound_ms"] == 50
    assert run["result"]["settings"]["target_qps"] == 300
    assert [c["metric"] for c in run["checks"]] == ["latency_p99"]
    with ResultsStore.open(db) as store:
        stored = store.get_run(run["run_id"])
        assert stored.kind == "inference" and stored.name == "inference lenet5 server"
        assert stored.config["mutable"] == {"executor": "torch", "threads": 1}
        assert stored.config["overrides"] == {"executor": "torch"}
        assert stored.config["checks"] == run["checks"]
        assert {m.metric for m in store.measurements(run["run_id"])} == {"latency"}


def test_a_recipe_that_misses_its_bound_exits_1(d5_cli, tmp_path):
    recipe = tmp_path / "tight.toml"
    recipe.write_text(
        'kind = "inference"\n[fixed]\nmodel = "lenet5"\nscenario = "single-stream"\n'
        "latency_bound_ms = 0.000001\nmin_duration_s = 0.2\nmin_query_count = 32\n"
        '[mutable]\nexecutor = "numpy"\nthreads = 1\n'
    )
    db = tmp_path / "tight.sqlite"
    result = d5_cli("run", str(recipe), "--db", str(db))
    assert result.exit_code == 1, result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("d5: error: recipe tight: run ")
    assert "numpy: INVALID" in last and "Latency bound" in last and "p90" in last
    with ResultsStore.open(db) as store:
        (stored,) = store.list_runs()
        assert stored.kind == "inference" and stored.status == "complete"
