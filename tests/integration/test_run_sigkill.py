"""A SIGKILLed `d5 run` leaves an `incomplete` run with the samples it had measured, and
earlier runs intact (issue 11, item 16). `benchmarks/run_sigkill.py` runs 20 such trials.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from d5core.results.store import ResultsStore

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "digits-mlp.toml"
#: A learning rate that never reaches the target: the run lasts its 30 epochs.
SETS = ("lr=1e-9", "batch_size=16")
TRIALS = 3


def _snapshot(db: Path) -> dict[str, Any]:
    """Every run's status and samples, read without marking anything."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        runs: dict[str, Any] = {
            rid: {"status": status, "samples": {}}
            for rid, status in conn.execute("SELECT id, status FROM runs")
        }
        for rid, metric, value in conn.execute(
            "SELECT m.run_id, m.metric, s.value FROM measurements m "
            "JOIN samples s ON s.measurement_id = m.id ORDER BY m.id, s.idx"
        ):
            runs[rid]["samples"].setdefault(metric, []).append(value)
        return runs
    finally:
        conn.close()


def _run_ids(db: Path) -> set[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {rid for (rid,) in conn.execute("SELECT id FROM runs")}
    finally:
        conn.close()


def _start_and_wait_for_its_run(db: Path, known: set[str]) -> tuple[subprocess.Popen[bytes], str]:
    d5 = str(Path(sys.executable).with_name("d5"))
    args = [d5, "run", str(RECIPE), "--db", str(db)]
    for item in SETS:
        args += ["--set", item]
    # only the numpy plugin: the process starts in about half the time
    env = {**os.environ, "D5_LOAD_PLUGINS": "d5-plugin-numpy"}
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists():
            try:
                new = _run_ids(db) - known
            except sqlite3.Error:
                new = set()
            if new:
                return proc, new.pop()
        time.sleep(0.005)
    proc.kill()
    pytest.fail(f"d5 run began no run (exit {proc.poll()})")


@pytest.mark.slow
def test_sigkilled_runs_read_incomplete_with_the_samples_they_had(tmp_path):
    from d5core.lv2.assembly import prepare

    reference = prepare(RECIPE, list(SETS), 0).trainer.run()
    train_s = sum(reference.step_times_s)
    db = tmp_path / "r.sqlite"
    rng = random.Random(11)
    kept = 0
    for _ in range(TRIALS):
        before = _snapshot(db) if db.exists() else {}
        proc, run_id = _start_and_wait_for_its_run(db, set(before))
        time.sleep(rng.uniform(0.0, train_s))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with ResultsStore.open(db) as store:
            status = store.get_run(run_id).status
        after = _snapshot(db)
        if status == "complete":
            continue  # the kill came as the process was exiting: nothing to check
        samples = after[run_id]["samples"]
        k = len(samples.get("loss", []))
        assert status == "incomplete"
        assert samples.get("loss", []) == reference.losses[:k]
        assert len(samples.get("step_time", [])) == len(samples.get("throughput", [])) == k
        assert {rid: after[rid] for rid in before} == before  # earlier runs intact
        kept += 1
    assert kept >= 1
