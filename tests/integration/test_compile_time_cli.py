"""Issue 31, compile time apart from run time, on the shared plugins: ``d5 bench net``
and ``d5 bench op`` store what preparing each executor's or operator's callable and its
first call cost, and ``d5 results show`` prints them apart from the samples."""

from __future__ import annotations

import json

import pytest

QUICK = ("--processes", "1", "--warmup", "1", "--min-samples", "6", "--time-budget", "0.05")
HEADER = "compile and first call (not in the samples; median over processes)"


@pytest.fixture(autouse=True)
def _private_db(tmp_path, monkeypatch):
    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))


def _bench(d5_cli, *args: str) -> list[dict[str, object]]:
    result = d5_cli("bench", *args, *QUICK, "--json")
    assert result.exit_code == 0, result.stderr
    rows: list[dict[str, object]] = json.loads(result.stdout)["data"]
    return rows


def _startup_lines(d5_cli, run_id: object) -> list[str]:
    shown = d5_cli("results", "show", str(run_id))
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    start = lines.index(HEADER) + 1
    return [line for line in lines[start:] if line.startswith("  ")]


def test_bench_net_stores_and_shows_each_executors_prepare_and_first_call(d5_cli):
    rows = _bench(d5_cli, "net", "mlp", "--executors", "numpy,torch")
    for row in rows:
        assert isinstance(row["prepare_s"], float) and isinstance(row["first_call_s"], float)
    lines = _startup_lines(d5_cli, rows[0]["run_id"])
    assert [line.split(":")[0] for line in lines] == [
        "  batch=32, executor=numpy, mode=inference",
        "  batch=32, executor=torch, mode=inference",
    ]
    assert all(", first call " in line and ": prepare " in line for line in lines)


def test_bench_op_backward_times_the_preparation_of_the_backward(d5_cli):
    rows = _bench(d5_cli, "op", "Relu", "--backends", "torch", "--shape", "16x16",
                  "--direction", "both")  # fmt: skip
    assert [row["direction"] for row in rows] == ["forward", "backward"]
    assert all(isinstance(row["prepare_s"], float) for row in rows)
    lines = _startup_lines(d5_cli, rows[0]["run_id"])
    assert [line.split(", dtype")[0] for line in lines] == [
        "  backend=torch, direction=forward",
        "  backend=torch, direction=backward",
    ]
