"""Does ``d5 results compare`` cry wolf? False alarms on identical runs, detection of a
real 10% slowdown (issue 12, item 2).

Every run is a real ``d5 bench op`` (fresh worker processes, ``--processes`` of them),
and every verdict a real ``d5 results compare --json``, in one results database that
holds this machine's calibration (``d5 calibrate`` first, unless ``--no-calibrate``).

- ``sleepy``: the test backend of ``tests/fixtures/sleepy`` (installed into a temporary
  directory with pip), whose Relu busy-waits 2 ms per call. Each round runs a baseline A,
  then, in a random order, B (identical) and C (``D5_SLEEPY_FACTOR=1.1``: the same
  backend 10% slower). (A, B) is an identical pair, (A, C) a slowdown pair. The backend
  keeps its name in C, so its measurements carry A's labels and pair up as two versions
  of one backend's code would.
- ``gemm``: ``Gemm --backends numpy --shape 256x256,256x256`` (one BLAS thread), as
  identical pairs only (there is no slower numpy to compare with).

A false alarm is a verdict other than "same" on an identical pair; a detection is
"worse" on a slowdown pair. Targets: at most 5% false alarms, at least 90% detected.
The script also shows how the rates move with the noise floor, recomputing the verdicts
of the same stored samples with :func:`d5core.measure.nested.compare_nested`.

    .venv/bin/python benchmarks/compare_noise.py [--pairs 20] [--workloads sleepy,gemm]
        [--processes 5] [--db PATH] [--no-calibrate] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _machine import load, machine

from d5core.cli.output import read_json
from d5core.measure.nested import compare_nested
from d5core.results import ResultsStore

ROOT = Path(__file__).resolve().parent.parent
SLEEPY = ROOT / "tests" / "fixtures" / "sleepy" / "d5-plugin-sleepy"
D5 = [str(Path(sys.executable).with_name("d5"))]
SLOWDOWN = 1.1
WHAT_IF_FLOORS = (0.0, 0.01, 0.02, 0.05)
WORKLOADS: dict[str, list[str]] = {
    "sleepy": ["Relu", "--backends", "sleepy", "--shape", "64x64"],
    "gemm": ["Gemm", "--backends", "numpy", "--shape", "256x256,256x256"],
}


def _d5(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run([*D5, *args], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        sys.exit(f"d5 {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def _bench(workload: str, env: dict[str, str], processes: int, factor: float = 1.0) -> str:
    """One ``d5 bench op`` run; its run id."""
    args = ["bench", "op", *WORKLOADS[workload], "--processes", str(processes), "--json"]
    out = _d5(args, {**env, "D5_SLEEPY_FACTOR": str(factor)})
    return str(read_json(out, "bench op")[0]["run_id"])


def _compare(a: str, b: str, env: dict[str, str]) -> dict[str, Any]:
    doc = read_json(_d5(["results", "compare", a, b, "--json"], env), "results compare")
    (row,) = [r for r in doc["comparisons"] if r["metric"] == "time"]
    return {
        "baseline": a,
        "candidate": b,
        "ratio": row["ratio"],
        "p": row["p_value"],
        "processes": [row["n_baseline"], row["n_candidate"]],
        "method": row["method"],
        "verdict": row["verdict"],
        "floor": doc["noise_floor"]["value"],
        "floor_source": doc["noise_floor"]["source"],
    }


def _time_processes(store: ResultsStore, run_id: str) -> list[list[float]]:
    (m,) = [m for m in store.measurements(run_id) if m.metric == "time"]
    return [v for v in store.samples_by_process(m.id).values()]


def _what_if(db: Path, pairs: list[dict[str, Any]], floor: float) -> float:
    """The share of ``pairs`` that are not "same" at noise floor ``floor``."""
    called = 0
    with ResultsStore.open(db, create=False) as store:
        for p in pairs:
            b = _time_processes(store, p["baseline"])
            c = _time_processes(store, p["candidate"])
            called += compare_nested(b, c, min_effect=floor).verdict != "same"
    return called / len(pairs) if pairs else float("nan")


def _rate(pairs: list[dict[str, Any]], hit: str) -> float:
    if not pairs:
        return float("nan")
    if hit == "alarm":
        return sum(p["verdict"] != "same" for p in pairs) / len(pairs)
    return sum(p["verdict"] == "worse" for p in pairs) / len(pairs)


def _run(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    rng = random.Random(args.seed)
    identical: dict[str, list[dict[str, Any]]] = {w: [] for w in args.workloads}
    slowdown: list[dict[str, Any]] = []
    for i in range(args.pairs):
        for workload in args.workloads:
            a = _bench(workload, env, args.processes)
            if workload != "sleepy":
                identical[workload].append(_compare(a, _bench(workload, env, args.processes), env))
                continue
            runs: dict[str, str] = {}
            for name in rng.sample(["same", "slow"], 2):
                factor = SLOWDOWN if name == "slow" else 1.0
                runs[name] = _bench(workload, env, args.processes, factor)
            identical[workload].append(_compare(a, runs["same"], env))
            slowdown.append(_compare(a, runs["slow"], env))
        if not args.json:
            done = ", ".join(
                f"{w} identical: {identical[w][-1]['verdict']} ({identical[w][-1]['ratio']:.3f})"
                for w in args.workloads
            )
            slow = f"; slowdown: {slowdown[-1]['verdict']} ({slowdown[-1]['ratio']:.3f})"
            print(f"pair {i + 1:2d}: {done}{slow if slowdown else ''}", flush=True)
    return {"identical": identical, "slowdown": slowdown}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--workloads", default="sleepy,gemm")
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--db", type=Path, default=None, help="default: a new temporary database")
    ap.add_argument("--no-calibrate", action="store_true", help="use the stored calibration")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.workloads = [w for w in args.workloads.split(",") if w]
    unknown = sorted(set(args.workloads) - set(WORKLOADS))
    if unknown or args.pairs < 1:
        ap.error(f"unknown workloads {unknown} (known: {sorted(WORKLOADS)}) or --pairs < 1")
    tmp = Path(tempfile.mkdtemp(prefix="d5-compare-noise-"))
    db = args.db or tmp / "results.sqlite"
    site = tmp / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(site),
            str(SLEEPY),
        ],
        check=True,
    )
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        **os.environ,
        "PYTHONPATH": path,
        "D5_DB": str(db),
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    env.pop("D5_NOISE_FLOOR", None)
    start_load, started = load(), time.perf_counter()
    if not args.no_calibrate:
        _d5(["calibrate"], env)
    found = _run(args, env)
    floors = {p["floor"] for ps in found["identical"].values() for p in ps}
    report = {
        "machine": machine(),
        "load": f"{start_load} at the start, {load()} at the end",
        "processes": args.processes,
        "pairs": args.pairs,
        "elapsed_s": time.perf_counter() - started,
        "noise_floor": sorted(floors),
        "false_alarm_rate": {w: _rate(ps, "alarm") for w, ps in found["identical"].items()},
        "detection_rate": _rate(found["slowdown"], "worse"),
        "what_if": {
            f"{floor:.0%}": {
                **{
                    f"false_alarms_{w}": _what_if(db, ps, floor)
                    for w, ps in found["identical"].items()
                },
                "detected": _what_if(db, found["slowdown"], floor),
            }
            for floor in WHAT_IF_FLOORS
        },
        **found,
    }
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(
        f"\n{report['machine']}; {report['load']}; {args.processes} processes per run; "
        f"{report['elapsed_s']:.0f} s"
    )
    print(f"noise floor used by compare: {', '.join(f'{f:.1%}' for f in sorted(floors))}")
    for w, rate in report["false_alarm_rate"].items():
        print(f"false alarms, {w} identical pairs: {rate:.0%} of {args.pairs} (target <= 5%)")
    if found["slowdown"]:
        print(
            f"detected, sleepy 10% slowdown: {report['detection_rate']:.0%} of "
            f"{args.pairs} (target >= 90%)"
        )
    print("the same samples judged at other noise floors (false alarms / detected):")
    for floor, rates in report["what_if"].items():
        print(f"  floor {floor:>3}: " + ", ".join(f"{k} {v:.0%}" for k, v in rates.items()))


if __name__ == "__main__":
    main()
