"""What ``--trace`` costs: each trace level beside the untraced command, side by side in
one run, in interleaved rounds of fresh processes.

Two commands, each run untraced and at every level of ``--levels`` (default ``step`` and
``framework``), each side a fresh ``d5`` process started as a user starts it:

- ``d5 run recipes/digits-mlp.toml --set executor=torch``: a traced training run traces
  the training itself, so its time to accuracy includes the tracing. Time to accuracy and
  the run's wall time come from its ``--json`` output;
- ``d5 bench net lenet5 --executors torch``: the timed workers never trace; the traced
  steps run after them, so a trace lengthens the command only. Its wall time is the whole
  process, measured here.

Every side runs once per round, in an order shuffled per round, so slow spells of the
machine hit all sides alike. A round starts once the 1-minute load average is under the
core count (waiting up to ``--max-wait`` seconds), and a round the load reached the core
count during is measured again, up to ``--retries`` times. For each traced side the
report gives the median over rounds, the ratio of its median to the untraced one's with
the lowest and highest per-round ratio (a round's sides shared the machine's state), and
whether ``step`` stays within :data:`STEP_TARGET` of the untraced training.

    .venv/bin/python benchmarks/trace_overhead.py [--rounds 7] [--levels step,framework]
        [--commands run,bench] [--bench-processes 5] [--max-wait 600] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _machine import load, machine
from _rounds import cores, load1, wait_for_quiet

from d5core.tracing import TRACE_LEVELS

__all__ = ["STEP_TARGET", "Side", "main", "measure", "run_side", "sides", "summarize"]

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes" / "digits-mlp.toml"
#: How much longer a ``--trace step`` training may take to reach its accuracy.
STEP_TARGET = 1.02


@dataclass(frozen=True)
class Side:
    """One command at one trace level (``None``: untraced), run as one fresh process."""

    command: str  # "run" or "bench"
    level: str | None
    argv: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.command} {self.level or 'untraced'}"


def sides(d5: Path, db: Path, levels: Sequence[str], bench_processes: int) -> list[Side]:
    """The untraced and traced sides of both commands."""
    run = (str(d5), "run", str(RECIPE), "--set", "executor=torch", "--db", str(db), "--json")
    bench = (str(d5), "bench", "net", "lenet5", "--executors", "torch", "--processes",
             str(bench_processes), "--db", str(db), "--json")  # fmt: skip
    out = []
    for command, argv in (("run", run), ("bench", bench)):
        for level in (None, *levels):
            traced = () if level is None else ("--trace", level)
            out.append(Side(command, level, (*argv, *traced)))
    return out


def run_side(side: Side) -> dict[str, float]:
    """Run ``side`` in a fresh process: its wall time (the process, measured here) and,
    for a training run, its time to accuracy and the wall time it reports."""
    started = time.perf_counter()
    done = subprocess.run(side.argv, capture_output=True, text=True, timeout=1800, cwd=ROOT,
                          env={**os.environ, "D5_NOISE_FLOOR": os.environ.get(
                              "D5_NOISE_FLOOR", "0.03")})  # fmt: skip
    process_s = time.perf_counter() - started
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"{side.label} failed ({' '.join(side.argv[1:])}): {tail}")
    data = json.loads(done.stdout)["data"]
    if side.command == "bench":
        return {"wall": process_s, "process": process_s}
    metrics = data["runs"][0]["metrics"]
    return {"tta": float(metrics["time_to_accuracy"]), "wall": float(metrics["wall_time"]),
            "process": process_s}  # fmt: skip


def measure(
    all_sides: Sequence[Side], rounds: int, retries: int, max_wait: float, rng: random.Random
) -> dict[str, Any]:
    """Every side once per round, shuffled; a round the load reached the core count during
    is measured again (up to ``retries`` times in all)."""
    kept: list[dict[str, dict[str, float]]] = []
    loads: list[float] = []
    repeated = 0
    waited = 0.0
    while len(kept) < rounds:
        waited += wait_for_quiet(cores(), max_wait)
        order = list(all_sides)
        rng.shuffle(order)
        highest = load1()
        one: dict[str, dict[str, float]] = {}
        for side in order:
            one[side.label] = run_side(side)
            highest = max(highest, load1())
        if highest >= cores() and repeated < retries:
            repeated += 1
            print(f"round {len(kept) + 1}: the load reached {highest:.2f} on {cores()} "
                  "cores; measuring it again", file=sys.stderr)  # fmt: skip
            continue
        kept.append(one)
        loads.append(highest)
        print(f"round {len(kept)}/{rounds} done (highest load {highest:.2f})", file=sys.stderr)
    return {"rounds": kept, "loads": loads, "repeated": repeated, "waited_s": waited}


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(
    all_sides: Sequence[Side], rounds: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One row per side: the median, lowest and highest of each figure over the rounds,
    and for a traced side its ratios to the untraced side of the same command."""
    rows = []
    for side in all_sides:
        runs = [r[side.label] for r in rounds]
        base = [r[f"{side.command} untraced"] for r in rounds]
        row: dict[str, Any] = {"command": side.command, "level": side.level or "untraced"}
        for figure in runs[0]:
            row[figure] = _spread([r[figure] for r in runs])
            if side.level is not None:
                per_round = [r[figure] / b[figure] for r, b in zip(runs, base, strict=True)]
                ratio = row[figure]["median"] / statistics.median(b[figure] for b in base)
                row[f"{figure}_ratio"] = {"ratio": ratio, "min": min(per_round),
                                          "max": max(per_round)}  # fmt: skip
        rows.append(row)
    return rows


def step_verdict(rows: Sequence[Mapping[str, Any]]) -> str:
    """Whether a ``--trace step`` training stays within :data:`STEP_TARGET` of the
    untraced one: by the ratio of the medians, and by every round."""
    found = [r for r in rows if r["command"] == "run" and r["level"] == "step"]
    if not found:
        return "step not measured (--levels)"
    cell = found[0]["tta_ratio"]
    by_median = "yes" if cell["ratio"] <= STEP_TARGET else "NO"
    every = "every round" if cell["max"] <= STEP_TARGET else "not every round"
    return (
        f"step within {100 * (STEP_TARGET - 1):.0f}% of untraced time to accuracy: {by_median} "
        f"(ratio of medians {cell['ratio']:.3f}; per round {cell['min']:.3f}-{cell['max']:.3f}, "
        f"{every})"
    )


def _cell(spread: Mapping[str, float] | None, digits: int = 3) -> str:
    if spread is None:
        return ""
    return f"{spread['median']:.{digits}f} [{spread['min']:.{digits}f}, {spread['max']:.{digits}f}]"


def _ratio(cell: Mapping[str, float] | None) -> str:
    if cell is None:
        return ""
    return f"{cell['ratio']:.3f} [{cell['min']:.3f}, {cell['max']:.3f}]"


def table(report: Mapping[str, Any]) -> list[str]:
    """The report as Markdown: the machine, the rounds and the load, the table, the
    verdict on ``step``."""
    under = all(v < report["cores"] for v in report["loads"])
    lines = [
        f"machine: {report['machine']}; {report['load_at_start']} at the start",
        f"{report['rounds']} round(s) kept, every side a fresh process per round, shuffled; "
        f"{report['repeated']} measured again because the load reached the core count; "
        "highest load per kept round: "
        + ", ".join(f"{v:.2f}" for v in report["loads"])
        + (
            " (all under the core count)"
            if under
            else " (NOT all under the core count: figures less trustworthy)"
        ),
        "seconds: median [lowest, highest] over rounds; ratio: traced over untraced, ratio of "
        "the medians [lowest, highest per-round ratio]; run wall: the run's own wall_time "
        "(--json); process: the whole d5 process, measured here",
        "",
        "| command | level | time to accuracy s | TTA ratio | wall s | wall ratio | process s "
        "| process ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        lines.append(
            f"| {row['command']} | {row['level']} | {_cell(row.get('tta'))} "
            f"| {_ratio(row.get('tta_ratio'))} | {_cell(row.get('wall'), 2)} "
            f"| {_ratio(row.get('wall_ratio'))} | {_cell(row.get('process'), 2)} "
            f"| {_ratio(row.get('process_ratio'))} |"
        )
    lines += ["", report["verdict"]]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--levels", default="step,framework",
                        help="levels to measure (default step,framework)")  # fmt: skip
    parser.add_argument("--bench-processes", type=int, default=5,
                        help="--processes of d5 bench net (default d5's 5)")  # fmt: skip
    parser.add_argument("--retries", type=int, default=3,
                        help="rounds measured again at most, when the load rose")  # fmt: skip
    parser.add_argument("--max-wait", type=float, default=600.0,
                        help="seconds to wait for a quiet machine before each round")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seeds the order of the sides")
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv",
                        help="the environment whose d5 runs (with torch)")  # fmt: skip
    parser.add_argument("--commands", default="run,bench",
                        help="which commands to time: run, bench or both (default)")  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    commands = {c.strip() for c in args.commands.split(",") if c.strip()}
    if not commands or commands - {"run", "bench"}:
        parser.error("--commands: give run, bench or run,bench")
    levels = [level.strip() for level in args.levels.split(",") if level.strip()]
    unknown = [level for level in levels if level not in TRACE_LEVELS]
    if unknown:
        parser.error(f"--levels: unknown {', '.join(unknown)}; use {', '.join(TRACE_LEVELS)}")
    if args.rounds < 1 or args.bench_processes < 1:
        parser.error("--rounds and --bench-processes must be at least 1")
    if args.retries < 0 or args.max_wait < 0:
        parser.error("--retries and --max-wait must not be negative")
    d5 = args.venv.absolute() / "bin" / "d5"
    if not d5.exists():
        parser.error(f"{d5} does not exist (make dev)")
    started_load = load()
    with tempfile.TemporaryDirectory(prefix="d5-trace-overhead-") as tmp:
        all_sides = [
            side for side in sides(d5, Path(tmp) / "results.sqlite", levels, args.bench_processes)
            if side.command in commands
        ]  # fmt: skip
        measured = measure(all_sides, args.rounds, args.retries, args.max_wait,
                           random.Random(args.seed))  # fmt: skip
    rows = summarize(all_sides, measured["rounds"])
    report = {
        "machine": machine(),
        "cores": cores(),
        "load_at_start": started_load,
        "rounds": len(measured["rounds"]),
        "repeated": measured["repeated"],
        "waited_s": measured["waited_s"],
        "loads": measured["loads"],
        "rows": rows,
        "verdict": step_verdict(rows),
        "raw": measured["rounds"],
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(table(report)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
