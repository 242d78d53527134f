"""Does d5's engine agree with timeit and torch.utils.benchmark? (target: within 2%)

The same callables are timed by three tools side by side, in rounds whose order rotates
so that a drift of the machine hits every tool alike:

- d5: ``measure(fn)`` with default options except the time budget; its median per call;
- timeit: ``Timer(fn).autorange()`` for the loop count, then ``repeat(5, number)``; the
  minimum and the median of the per-call times;
- torch: ``Timer("fn()", globals={"fn": fn}).blocked_autorange(min_run_time=0.5)``;
  its median per call.

Each tool's figure is the median over the rounds; the ratios compare d5 with the others.

    .venv/bin/python benchmarks/engine_vs_timeit.py [--rounds 5] [--budget 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import timeit
from collections.abc import Callable
from typing import Any

import numpy as np
from _machine import load, machine

from d5core.measure import MeasureOptions, measure


def callables() -> dict[str, Callable[[], object]]:
    """The callables compared; inputs are made here, outside any timed region."""
    rng = np.random.default_rng(0)
    a, b = rng.random((64, 64)), rng.random((64, 64))
    items = [3, 1, 2]
    big = rng.random(300_000)

    def python_loop() -> int:  # about 10 µs of interpreted work
        total = 0
        for i in range(600):
            total += i
        return total

    return {
        "`len(list)` (~30 ns)": lambda: len(items),
        "64×64 numpy matmul": lambda: a @ b,
        "Python loop (~10 µs)": python_loop,
        "numpy sort of 300k floats (~1 ms)": lambda: np.sort(big),
    }


def with_d5(fn: Callable[[], object], budget: float) -> float:
    m = measure(fn, MeasureOptions(time_budget_s=budget))
    return m.summary.median


def with_timeit(fn: Callable[[], object]) -> tuple[float, float]:
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    per_call = [t / number for t in timer.repeat(repeat=5, number=number)]
    return min(per_call), statistics.median(per_call)


def with_torch(fn: Callable[[], object]) -> float:
    from torch.utils import benchmark

    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn})
    return float(timer.blocked_autorange(min_run_time=0.5).median)


def compare_one(fn: Callable[[], object], rounds: int, budget: float) -> dict[str, Any]:
    tools: dict[str, list[float]] = {"d5": [], "timeit_min": [], "timeit_median": [], "torch": []}

    def run_d5() -> None:
        tools["d5"].append(with_d5(fn, budget))

    def run_timeit() -> None:
        low, mid = with_timeit(fn)
        tools["timeit_min"].append(low)
        tools["timeit_median"].append(mid)

    def run_torch() -> None:
        tools["torch"].append(with_torch(fn))

    order = [run_d5, run_timeit, run_torch]
    for r in range(rounds):
        for step in order[r % 3 :] + order[: r % 3]:
            step()
    out: dict[str, Any] = {k: statistics.median(v) for k, v in tools.items()}
    out["rounds"] = {k: v for k, v in tools.items()}
    for other in ("timeit_min", "timeit_median", "torch"):
        out[f"d5/{other}"] = out["d5"] / out[other]
    return out


def fmt(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3f} {unit}"
    return f"{seconds / 1e-9:.1f} ns"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=1.0, help="d5's time budget (s)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401  - fail early, and keep torch's import out of the rounds
    except ImportError:
        print("torch is not installed: run `make dev` first", file=sys.stderr)
        return 2

    results = {name: compare_one(fn, args.rounds, args.budget) for name, fn in callables().items()}
    if args.json:
        out = {"machine": machine(), "load": load(), "rounds": args.rounds, "results": results}
        print(json.dumps(out))
        return 0
    print(
        f"machine: {machine()}; {load()} at the end; {args.rounds} interleaved rounds; "
        f"median over rounds"
    )
    print()
    print(
        "| callable | d5 median | timeit min | timeit median | torch median | "
        "d5/timeit min | d5/timeit median | d5/torch |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {fmt(r['d5'])} | {fmt(r['timeit_min'])} | "
            f"{fmt(r['timeit_median'])} | {fmt(r['torch'])} | {r['d5/timeit_min']:.3f} | "
            f"{r['d5/timeit_median']:.3f} | {r['d5/torch']:.3f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
