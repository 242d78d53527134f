"""Set a suite's targets the AlgoPerf way and write them, with their provenance, into it.

For each workload of the suite and each of ``--repeats`` repeats, every baseline
algorithm of ``--algorithms`` is tuned with ``--trials`` points of its search space
(the draws of ``d5 bench algorithms``' external ruleset, seed ``--seed + repeat``), each
trial trained within the workload's budget (training seconds, evaluation excluded) with
no target to stop it early. A repeat's figure is the best validation figure of any of
its trials (highest accuracy, lowest perplexity or loss); the target is the median of
the repeats' figures, rounded towards the easier side (accuracy down to 0.001,
perplexity and loss up to three significant digits). AlgoPerf set its targets the same
way: the best of tuned baselines, the median over repeats
(mlcommons/algorithmic-efficiency, "Target setting"). Each trial is a ``d5 run`` in a
fresh process, stored in ``--db``.

    .venv/bin/python benchmarks/set_suite_targets.py suites/cpu.toml \\
        [--algorithms momentum,adam,adamw] [--trials 3] [--repeats 3] [--seed 0] \\
        [--workloads a,b] [--db PATH] [--dry-run]

Without ``--dry-run`` it rewrites the suite file: each workload's ``target`` and its
``[workload.provenance]`` (method, date, machine, d5 commit, algorithms, trials,
repeats, figures). The budgets are the suite's own, unchanged.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tomllib
from _machine import load, machine

from d5core.cli.output import read_json
from d5core.lv2.algorithms.campaign import CampaignSpec, parse_algorithms, plan, workload_recipe
from d5core.lv2.algorithms.suites import Suite, Workload, load_suite, toml_document

#: Targets no training reaches, so that a target-setting trial trains its whole budget
#: (an accuracy of 1.0 may be reached: then it is the best there is anyway).
UNREACHABLE = {"accuracy": 1.0, "perplexity": 1.000001, "loss": 1e-12}
#: The run's figure that says how good a trial got, and whether higher is better.
BEST_FIGURE = {
    "accuracy": ("best_test_accuracy", True),
    "perplexity": ("best_perplexity", False),
    "loss": ("best_test_loss", False),
}
#: Seconds a trial may run over its budget (start-up, data, evaluation) before it is killed.
ALLOWANCE_S = 120.0


def _rounded(kind: str, value: float) -> float:
    """The target from the median figure, rounded towards the easier side."""
    if kind == "accuracy":
        return math.floor(value * 1000) / 1000
    digits = 3 - math.floor(math.log10(abs(value))) - 1
    scale = 10.0**digits
    return math.ceil(value * scale) / scale


def _commit() -> str:
    """The d5 commit the figures came from (``+dirty`` with uncommitted changes)."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _trial(
    recipe: Path, algorithm: str, point: dict[str, Any], seed: int, db: Path, limit_s: float
) -> dict[str, Any]:
    """Train one trial in a fresh process; its ``d5 run --json`` run, or why it failed."""
    argv = [
        sys.executable,
        "-m",
        "d5core",
        "run",
        str(recipe),
        "--set",
        f"algorithm={algorithm}",
        "--set",
        "hyperparameters=" + json.dumps(point),
        "--seed",
        str(seed),
        "--json",
        "--db",
        str(db),
        "--tag",
        "set-suite-targets",
    ]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=limit_s, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"killed after {limit_s:.0f} s"}
    try:
        return dict(read_json(done.stdout, "run")["runs"][0])
    except (ValueError, KeyError, IndexError, TypeError):
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return {"error": lines[-1] if lines else f"exit code {done.returncode}"}


def _figure(kind: str, run: dict[str, Any]) -> float | None:
    name, _ = BEST_FIGURE[kind]
    value = (run.get("metrics") or {}).get(name)
    if run.get("status") == "diverged" or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _set_workload(
    workload: Workload, args: argparse.Namespace, db: Path, folder: Path
) -> dict[str, Any]:
    """The target of one workload and its provenance."""
    kind = workload.target_kind
    _, higher = BEST_FIGURE[kind]
    blind = replace(workload, target_value=UNREACHABLE[kind])
    recipe = workload_recipe(blind, workload.budget_s, folder)
    suite = Suite(name="targets", path=folder, description="", workloads=(blind,))
    repeats: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        spec = CampaignSpec(
            suite,
            parse_algorithms(args.algorithms),
            "external",
            1,
            args.trials,
            seed=args.seed + repeat,
        )
        figures: list[dict[str, Any]] = []
        for planned in plan(spec):
            started = time.perf_counter()
            run = _trial(
                recipe,
                planned.algorithm,
                planned.hyperparameters,
                planned.seed,
                db,
                workload.budget_s * 3 + ALLOWANCE_S,
            )
            value = _figure(kind, run)
            figures.append(
                {
                    "algorithm": planned.algorithm,
                    "trial": planned.trial,
                    "seed": planned.seed,
                    "hyperparameters": planned.hyperparameters,
                    "figure": value,
                    "run": run.get("run_id"),
                    "error": run.get("error", ""),
                }
            )
            shown = "-" if value is None else f"{value:.4f}"
            print(
                f"{workload.name} repeat {repeat} {planned.algorithm} trial {planned.trial}: "
                f"best {kind} {shown} ({time.perf_counter() - started:.1f} s wall)"
                f"{' ' + run['error'] if 'error' in run else ''}",
                file=sys.stderr,
            )
        reached = [f for f in figures if f["figure"] is not None]
        best = (max if higher else min)(reached, key=lambda f: f["figure"]) if reached else None
        repeats.append(
            {
                "best": None if best is None else best["figure"],
                "algorithm": None if best is None else best["algorithm"],
                "run": None if best is None else best["run"],
            }
        )
    values = [r["best"] for r in repeats if r["best"] is not None]
    if not values:
        raise SystemExit(f"{workload.name}: no trial gave a {kind}; the target is left as it was")
    median = statistics.median(values)
    return {
        "target": {kind: _rounded(kind, median)},
        "provenance": {
            "method": (
                f"median over {args.repeats} repeats of the best {kind} of "
                f"{len(parse_algorithms(args.algorithms))} baselines, each tuned with "
                f"{args.trials} trials of its search space, trained for the budget "
                f"({workload.budget_s:g} s of training) with no target; rounded towards "
                "the easier side (benchmarks/set_suite_targets.py)"
            ),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "machine": f"{socket.gethostname()}: {machine()}; {load()}",
            "d5_commit": _commit(),
            "algorithms": [a.spec for a in parse_algorithms(args.algorithms)],
            "trials": args.trials,
            "repeats": args.repeats,
            "seed": args.seed,
            "median": median,
            "repeat_best": [r["best"] for r in repeats],
            "repeat_best_algorithm": [r["algorithm"] for r in repeats],
        },
    }


def _rewrite(path: Path, results: dict[str, dict[str, Any]]) -> None:
    """Write the new targets and provenance into the suite file, keeping its heading
    comment, its other keys and the workloads not set this time."""
    text = path.read_text(encoding="utf-8")
    heading = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        heading.append(line)
    data = tomllib.loads(text)
    for workload in data["workload"]:
        if workload["name"] in results:
            workload["target"] = results[workload["name"]]["target"]
            workload["provenance"] = results[workload["name"]]["provenance"]
    body = toml_document(data)
    path.write_text("\n".join(heading) + ("\n" if heading else "") + body, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", help="the suite's name or .toml file")
    parser.add_argument("--algorithms", default="momentum,adam,adamw")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workloads", default="", help="only these workloads (commas)")
    parser.add_argument("--db", type=Path, default=None, help="where the trials are stored")
    parser.add_argument("--dry-run", action="store_true", help="print, do not rewrite")
    args = parser.parse_args()
    if args.trials < 1 or args.repeats < 1:
        parser.error("--trials and --repeats must be at least 1")
    suite = load_suite(args.suite)
    chosen = [w for w in args.workloads.split(",") if w]
    workloads = [suite.workload(w) for w in chosen] if chosen else list(suite.workloads)
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="d5-targets-") as tmp:
        db = args.db or Path(tmp) / "targets.sqlite"
        for workload in workloads:
            results[workload.name] = _set_workload(workload, args, db, Path(tmp))
            print(
                f"{workload.name}: target {results[workload.name]['target']} (was "
                f"{workload.target})",
                file=sys.stderr,
            )
    print(json.dumps(results, indent=2))
    print(f"{time.perf_counter() - started:.0f} s in all", file=sys.stderr)
    if not args.dry_run:
        _rewrite(suite.path, results)
        print(f"wrote {suite.path}", file=sys.stderr)


if __name__ == "__main__":
    main()
