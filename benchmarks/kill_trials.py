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

    .venv/bin/python benchmarks/kill_trials.py [--trials 20] [--kinds measure,loadgen,...]
        [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
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


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _command(kind: str, tmp: Path, source: Path) -> tuple[list[str], str, int]:
    """The command of ``kind``, the text its workers' command lines contain, and how many
    of them to wait for."""
    db = ["--db", str(tmp / "r.sqlite")]
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


def trial(kind: str, delay: float, source: Path) -> dict[str, Any]:
    """One trial: start d5, SIGKILL it once its workers run, watch them go."""
    with tempfile.TemporaryDirectory(prefix="d5-kill-") as name:
        cmd, marker, count = _command(kind, Path(name), source)
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
            return row
        finally:
            for proc in found:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            if parent.poll() is None:
                parent.kill()
            parent.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
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
    try:
        for kind in kinds:
            for _ in range(args.trials):
                rows.append(trial(kind, rng.uniform(0.0, 1.0), source))
                if not args.json:
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
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
    if args.json:
        print(json.dumps({"machine": machine(), "load": load(), "table": table, "rows": rows}))
        return 0
    print(f"# {machine()}; {load()}")
    print(
        "| kind | trials | ran | trials with survivors after 5 s | survivors | slowest exit (s) |"
    )
    print("|---|---|---|---|---|---|")
    for t in table:
        print("| " + " | ".join(str(v) for v in t.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
