"""Issue 12, item 2, end to end: real ``d5 bench op`` runs of the sleepy test backend
(tests/fixtures/sleepy, installed with pip) compared by ``d5 results compare``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from d5core.cli.output import read_json

SLEEPY = Path(__file__).resolve().parents[1] / "fixtures" / "sleepy" / "d5-plugin-sleepy"
# Brief runs: three processes (the fewest the test between processes needs), 1 ms calls.
BENCH = ["bench", "op", "Relu", "--backends", "sleepy", "--shape", "8x8", "--processes", "3"]
BRIEF = ["--warmup", "1", "--min-samples", "6", "--time-budget", "0.05", "--json"]


@pytest.fixture(scope="module")
def sleepy_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A baseline, an identical run and one 30% slower, in one database."""
    site = tmp_path_factory.mktemp("sleepy-site")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target"]
    subprocess.run([*pip, str(site), str(SLEEPY)], check=True, capture_output=True)
    db = tmp_path_factory.mktemp("compare-noise") / "results.sqlite"
    d5 = str(Path(sys.executable).with_name("d5"))
    runs: dict[str, object] = {"db": db, "site": site}
    for name, factor in (("base", "1"), ("same", "1"), ("slow", "1.3")):
        env = {
            **os.environ,
            "PYTHONPATH": str(site),
            "D5_DB": str(db),
            "D5_NOISE_FLOOR": "0.03",
            "D5_SLEEPY_MS": "1",
            "D5_SLEEPY_FACTOR": factor,
        }
        done = subprocess.run(
            [d5, *BENCH, *BRIEF], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr
        (row,) = read_json(done.stdout, "bench op")
        assert row["processes"] == 3, row
        runs[name] = row["run_id"]
    return runs


def _compare(run_d5, runs, a: str, b: str) -> dict:
    result = run_d5(
        "results", "compare", runs[a], runs[b], "--json", "--db", str(runs["db"]),
        path=[runs["site"]],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    comparisons = read_json(result.stdout, "results compare")["comparisons"]
    (row,) = [r for r in comparisons if r["metric"] == "time"]
    return row


def test_two_identical_sleepy_runs_are_the_same_between_processes(sleepy_runs, run_d5):
    row = _compare(run_d5, sleepy_runs, "base", "same")
    assert (row["method"], row["verdict"]) == ("welch", "same"), row
    assert row["processes"] == {"baseline": 3, "candidate": 3}
    assert row["labels"]["backend"] == "sleepy"


def test_a_sleepy_run_made_slower_is_worse(sleepy_runs, run_d5):
    row = _compare(run_d5, sleepy_runs, "base", "slow")
    assert (row["method"], row["verdict"], row["change"]) == ("welch", "worse", "higher"), row
    assert row["ratio"] == pytest.approx(1.3, rel=0.05)
    assert row["noise_floor"] == 0.03
