"""Does a SIGKILLed `d5 run` leave its run behind, with the samples it had measured?

All trials share one temporary --db. First one `d5 run recipes/digits-mlp.toml
--set lr=1e-9 --set batch_size=16` runs to its end (a tiny learning rate never reaches
the target, so the run lasts its 30 epochs, a few seconds of training); its loss curve
is the reference. Then
each trial starts the same command, waits until its run appears in the store as
`running` (the data is loaded and the model built), waits a random moment within the
reference's training time (uniform, up to 80% of it), and sends SIGKILL. A kill that
comes after the run has ended (the machine was faster this time) is repeated.

A trial passes when:
- its run reads back `incomplete` (the store sees its process is gone);
- the samples it stored are what the run had measured: its loss samples are exactly the
  first k of the reference's (same seed, same losses), and loss, step_time and
  throughput hold k samples each (the flush is one transaction);
- every earlier run (the reference and the earlier trials) reads back as before.

The trainer flushes at every test pass and at least once a second, so k falls short of
the steps run by at most about a second of steps. A kill before the run is begun
(imports, data loading, model building) leaves no run: nothing had been measured then.

    .venv/bin/python benchmarks/run_sigkill.py [--trials 20] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _machine import load, machine

from d5core.cli.output import read_json

ROOT = Path(__file__).resolve().parents[1]
D5 = str(Path(sys.executable).with_name("d5"))
RECIPE = ROOT / "recipes" / "digits-mlp.toml"
ARGS = ("--set", "lr=1e-9", "--set", "batch_size=16")
#: How long a run may take to appear in the store.
START_S = 120.0


def snapshot(db: Path) -> dict[str, Any]:
    """Every run's status, error and samples per measurement, read without side effects."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        runs = {
            rid: {"status": status, "error": error, "samples": {}}
            for rid, status, error in conn.execute("SELECT id, status, error FROM runs")
        }
        rows = conn.execute(
            "SELECT m.run_id, m.metric, s.value FROM measurements m "
            "JOIN samples s ON s.measurement_id = m.id ORDER BY m.id, s.idx"
        )
        for rid, metric, value in rows:
            runs[rid]["samples"].setdefault(metric, []).append(value)
        return runs
    finally:
        conn.close()


def read_back(db: Path, run_id: str) -> str:
    """The run's status as d5 reports it (``incomplete`` once its process is gone)."""
    from d5core.results.store import ResultsStore

    with ResultsStore.open(db) as store:
        return store.get_run(run_id).status


def run_ids(db: Path) -> set[str]:
    """The ids of the runs in ``db`` (one cheap query: polled every few milliseconds)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {rid for (rid,) in conn.execute("SELECT id FROM runs")}
    finally:
        conn.close()


def wait_for_new_run(db: Path, known: set[str], proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists():
            try:
                new = run_ids(db) - known
            except sqlite3.Error:
                new = set()
            if new:
                return new.pop()
        time.sleep(0.005)
    raise RuntimeError(f"no run appeared (d5 exited {proc.poll()})")


def reference(db: Path) -> tuple[str, list[float], float]:
    out = subprocess.run(
        [D5, "run", str(RECIPE), *ARGS, "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode not in (0, 1):  # 1: its thresholds fail, as lr=1e-9 means
        raise RuntimeError(f"the reference run failed: {out.stderr.strip()}")
    (doc,) = read_json(out.stdout, "run")["runs"]
    losses = snapshot(db)[doc["run_id"]]["samples"]["loss"]
    return doc["run_id"], losses, float(doc["metrics"]["wall_time"])


def trial(db: Path, ref_losses: list[float], train_s: float, rng: random.Random) -> dict[str, Any]:
    before = snapshot(db)
    proc = subprocess.Popen(
        [D5, "run", str(RECIPE), *ARGS, "--db", str(db)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    run_id = wait_for_new_run(db, set(before), proc)
    delay = rng.uniform(0.0, 0.8 * train_s)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    status = read_back(db, run_id)
    after = snapshot(db)
    samples = after[run_id]["samples"]
    counts = {m: len(samples.get(m, [])) for m in ("loss", "step_time", "throughput")}
    k = counts["loss"]
    problems = []
    if status != "incomplete":
        problems.append(f"status {status}")
    if len(set(counts.values())) != 1:
        problems.append(f"uneven sample counts {counts}")
    if samples.get("loss", []) != ref_losses[:k]:
        problems.append("loss samples differ from the reference's first ones")
    changed = [rid for rid, run in before.items() if after.get(rid) != run]
    if changed:
        problems.append(f"earlier runs changed: {changed}")
    return {
        # a kill that came after the run was finished (while the process exited) missed
        "missed": status in ("complete", "failed", "diverged"),
        "run_id": run_id,
        "killed_after_s": round(delay, 3),
        "status": status,
        "samples": k,
        "test_accuracy_samples": len(samples.get("test_accuracy", [])),
        "earlier_runs": len(before),
        "passed": not problems,
        "problems": problems,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="d5-sigkill-") as tmp:
        db = Path(tmp) / "results.sqlite"
        ref_id, ref_losses, train_s = reference(db)
        rows: list[dict[str, Any]] = []
        missed = 0
        while len(rows) < args.trials and missed <= args.trials:
            row = trial(db, ref_losses, train_s, rng)
            if row["missed"]:
                missed += 1
            else:
                rows.append(row)
    passed = sum(r["passed"] for r in rows)
    if args.json:
        doc = {"reference_steps": len(ref_losses), "missed": missed, "trials": rows}
        print(json.dumps(doc, indent=2))
    else:
        print(f"# {machine()}; {load()}")
        print(f"reference run {ref_id}: {len(ref_losses)} steps, {train_s:.2f} s of training")
        for i, r in enumerate(rows, 1):
            mark = "ok  " if r["passed"] else "FAIL"
            print(
                f"{mark} trial {i:2d}: killed {r['killed_after_s']:.2f} s after run "
                f"{r['run_id']} began; {r['status']} with {r['samples']} of "
                f"{len(ref_losses)} steps and {r['test_accuracy_samples']} test passes "
                f"stored; {r['earlier_runs']} earlier runs intact"
                + (f"; {'; '.join(r['problems'])}" if r["problems"] else "")
            )
        print(
            f"{passed}/{len(rows)} trials passed ({missed} kills came after the run had "
            "ended and were repeated)"
        )
    return 0 if passed == len(rows) == args.trials else 1


if __name__ == "__main__":
    sys.exit(main())
