"""A real ``d5 bench op`` stores what the roofline needs besides its rates: the memory
bandwidth of the machine and each problem's FLOPs and compulsory bytes."""

from __future__ import annotations

import pytest

from d5core.cli.output import read_json
from d5core.levels.report import ReportRun
from d5core.lv0 import figures as operators
from d5core.results.store import ResultsStore


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "results.sqlite"
    monkeypatch.setenv("D5_DB", str(path))
    # a known roof, so that the stored figure can be checked (and nothing is measured)
    monkeypatch.setenv("D5_PEAK_BANDWIDTH", "12.5")
    return path


def test_bench_op_stores_problem_sizes_and_the_bandwidth(db, d5_cli):
    m, n, k = 16, 8, 4
    result = d5_cli(
        "bench", "op", "Gemm", "--backends", "numpy", "--shape", f"{m}x{k},{k}x{n}",
        "--direction", "both", "--processes", "1", "--time-budget", "0.02",
        "--min-samples", "6", "--rel-ci", "0", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = read_json(result.stdout)
    run_id = rows[0]["run_id"]
    problem = rows[0]["problem"]
    with ResultsStore.open(db) as store:
        (stored,) = store.read_runs([run_id])
    run = ReportRun.from_stored(stored)
    (bandwidth,) = run.metric_records("peak_bandwidth")
    assert (bandwidth.value, bandwidth.unit) == (12.5, "GB/s")
    assert bandwidth.labels == {"source": "D5_PEAK_BANDWIDTH"}
    inputs, output = (m * k + k * n) * 4, m * n * 4
    for direction, flops, nbytes in [
        ("forward", 2 * m * n * k, inputs + output),
        ("backward", 4 * m * n * k, 2 * inputs + output),
    ]:
        labels = {"problem": problem, "direction": direction, "dtype": "float32"}
        assert run.metric_value("problem_flops", **labels) == flops
        assert run.metric_value("problem_bytes", **labels) == nbytes
    # the roofline draws the run at the stored intensity under the stored roof
    (roofline,) = [f for f in operators.figures([run]) if f.key.startswith("op-roofline")]
    assert roofline.data["roofs"][0]["peak_bandwidth"] == 12.5
    forward = [p for p in roofline.data["points"] if p["direction"] == "forward"]
    assert forward[0]["intensity"] == 2 * m * n * k / (inputs + output)


def test_a_bad_bandwidth_override_stops_bench_op_before_it_runs(db, d5_cli, monkeypatch):
    monkeypatch.setenv("D5_PEAK_BANDWIDTH", "lots")
    result = d5_cli("bench", "op", "Gemm", "--backends", "numpy", "--processes", "1")
    assert result.exit_code == 2
    assert "D5_PEAK_BANDWIDTH" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    if db.exists():
        with ResultsStore.open(db) as store:
            assert store.list_runs(kind="op") == []
