"""Do the ranks of `d5 run --ranks N` die with their parent? SIGKILL, SIGTERM and SIGINT
trials against the launching process.

Each trial starts `d5 run recipes/digits-mlp.toml --ranks N --set lr=1e-9` (a tiny
learning rate never reaches the target, so the run lasts its 30 epochs) with its own
temporary --db, waits until N ranks run, waits a random 0-2 s more, sends the signal to
the parent only (as `kill PID` or a Ctrl-C to d5 would), and then watches, for up to
5 s, every process of the job: the descendants of the parent seen before the signal
(mpiexec, hydra_pmi_proxy, the ranks) plus any process whose command line names the
trial's database. A trial passes when all of them are gone within 5 s, the parent has
ended (it may take longer: its own interpreter's exit) and, for SIGTERM and SIGINT, the
parent exits 128 + signal with one line on stderr and the stored run reads `interrupted`;
after SIGKILL it reads `incomplete`. Survivors are killed after the trial.

    .venv/bin/python benchmarks/rank_cleanup.py [--trials 5] [--signals KILL,TERM,INT]
        [--ranks 2] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from _machine import load, machine

ROOT = Path(__file__).resolve().parents[1]
D5 = str(Path(sys.executable).with_name("d5"))
RECIPE = ROOT / "recipes" / "digits-mlp.toml"
#: How long the job may take to disappear after the signal.
DEADLINE_S = 5.0
#: How long the ranks may take to start.
START_S = 90.0
#: How long the parent may take to end after the signal (stopping the job, recording
#: the run, then the interpreter's exit, which takes seconds on a loaded machine).
PARENT_S = 30.0


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _naming(text: str, parent: int) -> list[psutil.Process]:
    """Live processes besides ``parent`` whose command line contains ``text``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if text in cmdline and proc.pid not in (os.getpid(), parent) and _alive(proc):
            found.append(proc)
    return found


def _ranks(parent: psutil.Process) -> list[psutil.Process]:
    try:
        children = parent.children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in children if _alive(p) and "d5core" in " ".join(p.cmdline())]


def _describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} {' '.join(proc.cmdline())[:80]}"
    except psutil.Error:
        return str(proc.pid)


def trial(sig: signal.Signals, ranks: int, delay: float) -> dict[str, Any]:
    """One trial: start the job, signal its parent, watch the job go."""
    with tempfile.TemporaryDirectory(prefix="d5-cleanup-") as tmp:
        db = str(Path(tmp) / "runs.sqlite")
        cmd = [D5, "run", str(RECIPE), "--ranks", str(ranks), "--set", "lr=1e-9", "--db", db]
        parent = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)  # fmt: skip
        row: dict[str, Any] = {"signal": sig.name, "ranks": ranks, "delay_s": round(delay, 2)}
        t0 = time.monotonic()
        me = psutil.Process(parent.pid)
        while len(_ranks(me)) < ranks and parent.poll() is None:
            if time.monotonic() - t0 > START_S:
                break
            time.sleep(0.1)
        if len(_ranks(me)) < ranks:
            parent.kill()
            parent.wait()
            return {**row, "passed": False, "error": "the ranks did not start"}
        time.sleep(delay)
        job = [p for p in me.children(recursive=True) if _alive(p)] + _naming(db, parent.pid)
        row["job_processes"] = len({p.pid for p in job})
        parent.send_signal(sig)
        t_sig = time.monotonic()
        left: list[psutil.Process] = []
        job_gone = parent_gone = None
        while time.monotonic() - t_sig < DEADLINE_S:
            now = round(time.monotonic() - t_sig, 2)
            if parent_gone is None and parent.poll() is not None:  # reaped as soon as it ends
                parent_gone = now
            left = [p for p in job if _alive(p)] + _naming(db, parent.pid)
            if not left:
                job_gone = now
                break
            time.sleep(0.05)
        row["job_gone_after_s"] = job_gone
        row["survivors"] = sorted({_describe(p) for p in left})
        for proc in left:  # clean up what the trial left, then fail it
            with contextlib.suppress(psutil.Error):
                proc.kill()
        try:  # the parent itself may take longer: Python's own exit, under load
            code: int | None = parent.wait(timeout=PARENT_S)
        except subprocess.TimeoutExpired:
            code = None
            parent.kill()
        row["parent_gone_after_s"] = parent_gone or round(time.monotonic() - t_sig, 2)
        row["exit"] = parent.wait()
        err = parent.stderr.read() if parent.stderr else ""
        row["stderr"] = [line for line in err.splitlines() if line.strip()]
        row["run"] = _stored_run(db)
        row["passed"] = code is not None and not left and _verdict_ok(sig, row)
        return row


def _stored_run(db: str) -> dict[str, Any] | None:
    from d5core.results.store import ResultsStore

    if not Path(db).exists():
        return None
    with ResultsStore.open(Path(db)) as store:
        runs = store.list_runs()
    return {"status": runs[0].status, "error": runs[0].error} if runs else None


def _verdict_ok(sig: signal.Signals, row: dict[str, Any]) -> bool:
    run = row["run"]
    if run is None:
        return False
    if sig == signal.SIGKILL:
        return bool(run["status"] == "incomplete")
    return (
        row["exit"] == 128 + sig
        and len(row["stderr"]) == 1
        and "interrupted" in row["stderr"][0]
        and run["status"] == "interrupted"
        and "interrupted" in (run["error"] or "")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5, help="trials per signal")
    parser.add_argument("--signals", default="KILL,TERM,INT", help="comma-separated")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="seed of the random delays")
    parser.add_argument("--json", action="store_true", help="print JSON rows, not a table")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows = []
    for name in args.signals.split(","):
        sig = signal.Signals[f"SIG{name.strip().upper()}"]
        for _ in range(args.trials):
            rows.append(trial(sig, args.ranks, rng.uniform(0.0, 2.0)))
            print(json.dumps(rows[-1]), file=sys.stderr)
    if args.json:
        print(json.dumps({"machine": machine(), "rows": rows}, indent=2))
    else:
        print(f"machine: {machine()}; {load()}\n")
        print("| signal | delay (s) | job processes | job gone after (s) | parent gone after (s) "
              "| survivors | exit | stored run | passed |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            run = r.get("run") or {}
            print(f"| {r['signal']} | {r['delay_s']} | {r.get('job_processes', '-')} | "
                  f"{r.get('job_gone_after_s', '-')} | {r.get('parent_gone_after_s', '-')} | "
                  f"{len(r.get('survivors', []))} | "
                  f"{r.get('exit', '-')} | {run.get('status', '-')} | "
                  f"{'yes' if r['passed'] else 'NO'} |")  # fmt: skip
        failed = sum(not r["passed"] for r in rows)
        print(f"\n{len(rows) - failed} of {len(rows)} trials passed")
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
