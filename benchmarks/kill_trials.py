"""Does every worker d5 starts die with d5? SIGKILL trials, one kind of worker at a time.

Each trial starts one d5 command that runs for minutes in its workers, waits until the
workers run, waits a random 0-1 s more, SIGKILLs d5 alone (no chance to clean up), and
watches for up to 5 s every descendant of d5 seen before the kill. A trial's survivors
are those still alive after 5 s (they are then killed). The kinds:

- ``measure``: ``d5 bench op Gemm`` with a 600-s time budget (the measurement worker);
- ``measure-custom``: ``d5 bench op --custom`` on an operator stuck in an endless loop
  (d5core.testing.customop's crash source, fault 5), the case issue 28 reported;
- ``loadgen``: ``d5 bench net lenet5 --scenario single-stream --min-duration 600``;
- ``ranks``: ``d5 bench comm --ranks 2`` with ten million samples (mpiexec, its proxy
  and the ranks);
- ``check``: ``d5 validate op --custom`` on the endless-loop operator (the check
  worker of ``d5 validate``).

With ``--db PATH|URL`` (a SQLite file, or ``postgresql://user@host:port/dbname``) or
``--backend sqlite|postgresql`` (a fresh SQLite file, or a fresh database on a private
PostgreSQL cluster started for the trials and stopped after them), every trial writes
to that one store, and the store is checked too (issue 34): before each trial a short
``d5 bench op Gemm`` runs to its end, and after each kill the killed command's run must
read ``incomplete`` and every run finished before, in this trial or an earlier one, must
read back as it was (status, measurements, samples); a changed or missing one is lost.
The table then adds the killed runs, how many read ``incomplete``, the finished runs
lost, and the earlier trials' killed runs that changed since. Without either option
each trial writes to a file of its own and the store is not checked.

    .venv/bin/python benchmarks/kill_trials.py [--trials 20] [--kinds measure,loadgen,...]
        [--seed 0] [--db PATH|URL | --backend sqlite|postgresql] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from _machine import load, machine

D5 = str(Path(sys.executable).with_name("d5"))
#: How long the workers may take to disappear after d5 was killed.
DEADLINE_S = 5.0
#: How long the workers may take to start (a custom operator is built first).
START_S = 300.0
KINDS = ("measure", "measure-custom", "loadgen", "ranks", "check")
#: The short run finished before each trial when the store is checked.
FINISHED = [D5, "bench", "op", "Gemm", "--backends", "numpy", "--shape", "16x16,16x16",
            "--processes", "1", "--min-samples", "20", "--max-samples", "20", "--json"]  # fmt: skip


def _alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _command(kind: str, store: str, source: Path) -> tuple[list[str], str, int]:
    """The command of ``kind`` writing to ``store``, the text its workers' command lines
    contain, and how many of them to wait for."""
    db = ["--db", store]
    if kind == "measure":
        return [D5, "bench", "op", "Gemm", "--backends", "numpy", "--shape", "64x64,64x64",
                "--processes", "1", "--time-budget", "600", "--max-samples", "10000000",
                "--rel-ci", "0", *db], "d5core.measure._worker", 1  # fmt: skip
    if kind == "measure-custom":
        return [D5, "bench", "op", "--custom", str(source), "--backends", "numpy", "--attr",
                "fault=5", "--processes", "1", *db], "d5core.measure._worker", 1  # fmt: skip
    if kind == "loadgen":
        return [D5, "bench", "net", "lenet5", "--executors", "numpy", "--scenario",
                "single-stream", "--min-duration", "600", *db], "loadgen.worker", 1  # fmt: skip
    if kind == "ranks":
        return [D5, "bench", "comm", "--ranks", "2", "--min-bytes", "1024", "--max-bytes",
                "1024", "--samples", "10000000", *db], "d5core", 2  # fmt: skip
    if kind == "check":
        return [D5, "validate", "op", "--custom", str(source), "--backends", "numpy",
                "--attr", "fault=5", "--timeout", "600", *db], "d5core.validate", 1  # fmt: skip
    raise SystemExit(f"unknown kind {kind!r}; choose from {', '.join(KINDS)}")


def snapshot(store: str) -> dict[str, Any]:
    """Every run of ``store``: its status and, per measurement, the metric, labels and
    samples (read through the store, which marks the runs of ended processes
    ``incomplete`` first, as every reader does)."""
    from d5core.results import ResultsStore

    with ResultsStore.open(store) as opened:
        return {
            run.id: {
                "status": run.status,
                "measurements": [
                    [m.metric, m.labels, opened.samples(m.id)] for m in opened.measurements(run.id)
                ],
            }
            for run in opened.list_runs()
        }


def finish_one(store: str) -> str | None:
    """Run a short ``d5 bench op Gemm`` to its end on ``store``; its run id, or ``None``
    when it failed."""
    env = {**os.environ, "D5_LOAD_PLUGINS": "d5-plugin-numpy"}  # starts in half the time
    out = subprocess.run(
        [*FINISHED, "--db", store], capture_output=True, text=True, check=False, env=env
    )
    if out.returncode != 0:
        print(f"kill_trials: a finishing run failed: {out.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    found = re.findall(r'"run_id": "([0-9a-f]+)"', out.stdout)
    return found[0] if found else None


def check_store(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What the kill did to the store: the runs it left (each must read ``incomplete``)
    and the finished runs it lost (changed or gone)."""
    killed = [rid for rid in after if rid not in before]
    # every run already over: the finished ones and the earlier trials' killed ones
    over = [rid for rid, run in before.items() if run["status"] != "running"]
    lost = [rid for rid in over if after.get(rid) != before[rid]]
    return {
        "killed_runs": len(killed),
        "killed_incomplete": sum(after[rid]["status"] == "incomplete" for rid in killed),
        "killed_status": sorted({after[rid]["status"] for rid in killed}),
        "finished_runs": sum(before[rid]["status"] == "complete" for rid in over),
        "finished_lost": sum(before[rid]["status"] == "complete" for rid in lost),
        "earlier_killed_changed": sum(before[rid]["status"] != "complete" for rid in lost),
    }


def trial(kind: str, delay: float, source: Path, store: str | None = None) -> dict[str, Any]:
    """One trial: start d5, SIGKILL it once its workers run, watch them go; with a
    ``store`` shared by the trials, finish a run on it first and check it afterwards."""
    with tempfile.TemporaryDirectory(prefix="d5-kill-") as name:
        before: dict[str, Any] | None = None
        finishing_failed = False
        if store is not None:
            finishing_failed = finish_one(store) is None
            before = snapshot(store)
        cmd, marker, count = _command(kind, store or str(Path(name) / "r.sqlite"), source)
        parent = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)  # fmt: skip
        row: dict[str, Any] = {"kind": kind, "delay_s": round(delay, 2)}
        found: list[psutil.Process] = []
        try:
            me = psutil.Process(parent.pid)
            t0 = time.monotonic()
            while time.monotonic() - t0 < START_S and parent.poll() is None:
                with contextlib.suppress(psutil.Error):
                    below = [p for p in me.children(recursive=True) if _alive(p)]
                    if sum(marker in " ".join(p.cmdline()) for p in below) >= count:
                        found = below
                        break
                time.sleep(0.05)
            if not found:
                code = parent.poll()
                err = parent.stderr.read() if code is not None and parent.stderr else ""
                why = f"d5 ended with {code}: {err.strip()[-300:]}" if code is not None else ""
                row.update(error=f"no worker started; {why or 'gave up waiting'}", survivors=None)
                return row
            time.sleep(delay)
            parent.kill()
            t1 = time.monotonic()
            left = found
            while left and time.monotonic() - t1 < DEADLINE_S:
                time.sleep(0.05)
                left = [p for p in left if _alive(p)]
            row["workers"] = len(found)
            row["survivors"] = len(left)
            row["gone_after_s"] = None if left else round(time.monotonic() - t1, 2)
            row["left"] = [" ".join(p.cmdline())[:80] for p in left if _alive(p)]
        finally:
            for proc in found:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            if parent.poll() is None:
                parent.kill()
            parent.wait()
        if store is not None and before is not None:
            row.update(check_store(before, snapshot(store)), finishing_failed=finishing_failed)
        return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--db", metavar="PATH|URL", help="the store every trial writes to")
    where.add_argument("--backend", choices=("sqlite", "postgresql"),
                       help="a fresh store of this backend for the trials")  # fmt: skip
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up as on Ctrl-C
    rng = random.Random(args.seed)
    kinds = [k for k in args.kinds.split(",") if k]
    cache = Path(tempfile.mkdtemp(prefix="d5-kill-cache-"))
    os.environ.setdefault("D5_OP_CACHE", str(cache))
    os.environ.setdefault("D5_NOISE_FLOOR", "0.03")  # no calibration before the workers
    from d5core.testing.customop import crash_source

    source = crash_source(cache)
    rows = []
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, cache, ignore_errors=True)
        store = args.db
        if args.backend is not None:
            from _stores import add_store_arguments, store_targets

            given = argparse.ArgumentParser()
            add_store_arguments(given)
            targets = stack.enter_context(
                store_targets(given.parse_args(["--backends", args.backend]))
            )
            store = targets[args.backend]
        for kind in kinds:
            for _ in range(args.trials):
                rows.append(trial(kind, rng.uniform(0.0, 1.0), source, store))
                if not args.json:
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    table = []
    for kind in kinds:
        mine = [r for r in rows if r["kind"] == kind]
        ran = [r for r in mine if r.get("survivors") is not None]
        times = sorted(r["gone_after_s"] for r in ran if r.get("gone_after_s") is not None)
        table.append({
            "kind": kind, "trials": len(mine), "ran": len(ran),
            "trials with survivors after 5 s": sum(1 for r in ran if r["survivors"]),
            "survivors": sum(r["survivors"] for r in ran),
            "slowest exit (s)": times[-1] if times else None,
        })  # fmt: skip
        if store is not None:
            table[-1].update({
                "killed runs": sum(r.get("killed_runs", 0) for r in mine),
                "read incomplete": sum(r.get("killed_incomplete", 0) for r in mine),
                "finished runs lost": sum(r.get("finished_lost", 0) for r in mine),
                "earlier killed runs changed": sum(
                    r.get("earlier_killed_changed", 0) for r in mine
                ),
            })  # fmt: skip
    backend = None if store is None else ("sqlite" if "://" not in store else "postgresql")
    if args.json:
        print(json.dumps({"machine": machine(), "load": load(), "store": backend,
                          "table": table, "rows": rows}))  # fmt: skip
        return 0
    print(f"# {machine()}; {load()}" + ("" if backend is None else f"; store: {backend}"))
    print("| " + " | ".join(table[0]) + " |" if table else "| kind |")
    print("|" + "---|" * len(table[0] if table else [0]))
    for t in table:
        print("| " + " | ".join(str(v) for v in t.values()) + " |")
    if store is not None:
        finished = max((r.get("finished_runs", 0) for r in rows), default=0)
        print(f"finished runs in the store at the last kill: {finished}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
