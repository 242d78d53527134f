"""What `d5 bench op` adds to an operator's time, against a hand-written timing loop.

For every problem of the cpu-small GEMM and convolution suites, on the numpy and torch
backends, the same computation is timed two ways, side by side and interleaved:

- d5: ``bench_ops`` (backend lookup, operator wrapper, ``prepare_forward``'s callable,
  the measurement engine with its adaptive stopping);
- by hand: a ``perf_counter_ns`` loop around the framework's own call: ``torch.mm`` /
  ``F.conv2d`` under ``no_grad`` for torch; for numpy, the reference operator's own
  ``forward`` called directly (numpy has no convolution, and the reference GEMM computes
  ``alpha * (A @ B)``, whose extra pass over the output is arithmetic, not harness).

It prints the ratio of medians (target <= 1.02) and the time added per call (target
<= 5 µs).

    .venv/bin/python benchmarks/op_overhead.py [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from _machine import load, machine

from d5core.measure.engine import MeasureOptions
from d5core.runners.operators import backend_by_name, bench_ops, build_operator
from d5core.workloads.problems import Problem, suite


def hand_loop(fn: Callable[[], Any], samples: int, warmup: int = 3) -> float:
    """Median seconds per call of a plain loop, as someone would write it by hand."""
    for _ in range(warmup):
        fn()
    gc.disable()
    try:
        times = []
        for _ in range(samples):
            t0 = time.perf_counter_ns()
            fn()
            times.append(time.perf_counter_ns() - t0)
    finally:
        gc.enable()
    return statistics.median(times) / 1e9


def native_call(problem: Problem, backend: str, inputs: list[np.ndarray]) -> Callable[[], Any]:
    """The framework's own call for ``problem``, inputs converted beforehand."""
    attrs = problem.attributes
    if backend == "torch":
        tensors = [torch.from_numpy(a) for a in inputs]
        if problem.op == "Gemm":
            a, b = tensors
            a = a.t() if attrs.get("transA") else a
            b = b.t() if attrs.get("transB") else b

            def gemm() -> Any:
                with torch.no_grad():
                    return torch.mm(a, b)

            return gemm
        x, w = tensors
        pads, strides = attrs["pads"], attrs["strides"]

        def conv() -> Any:
            with torch.no_grad():
                return F.conv2d(x, w, stride=strides, padding=(pads[0], pads[1]))

        return conv
    op = build_operator(backend_by_name("numpy"), problem, "float32", inputs)
    return lambda: op.forward(inputs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--time-budget", type=float, default=2.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    options = MeasureOptions(time_budget_s=args.time_budget, max_samples=400, min_samples=30)
    problems = suite("cpu-small-gemm") + suite("cpu-small-conv")
    rows = []
    for problem in problems:
        inputs = problem.make_inputs("float32", 0)
        for backend in ("numpy", "torch"):
            d5_medians, hand_medians = [], []
            for r in range(args.rounds):
                order = ("d5", "hand") if r % 2 == 0 else ("hand", "d5")
                for who in order:
                    if who == "d5":
                        (timing,) = bench_ops([problem], [backend], options=options)
                        d5_medians.append(timing.measurement.summary.median)
                        n = timing.measurement.summary.n
                    else:
                        fn = native_call(problem, backend, inputs)
                        hand_medians.append(hand_loop(fn, samples=max(30, min(n, 400))))
            # Paired by round: each ratio compares two measurements taken back to back,
            # so drifts of the machine between rounds cancel.
            ratios = [d / h for d, h in zip(d5_medians, hand_medians, strict=True)]
            added = [d - h for d, h in zip(d5_medians, hand_medians, strict=True)]
            d5_t, hand_t = statistics.median(d5_medians), statistics.median(hand_medians)
            rows.append(
                {
                    "problem": problem.label,
                    "backend": backend,
                    "d5_median_s": d5_t,
                    "hand_median_s": hand_t,
                    "ratio": statistics.median(ratios),
                    "ratio_range": [min(ratios), max(ratios)],
                    "added_us": statistics.median(added) * 1e6,
                }
            )
            print(
                f"{backend:>5} {problem.label}: d5 {d5_t * 1e6:.1f} µs, hand {hand_t * 1e6:.1f} µs",
                file=sys.stderr,
            )
    where = f"{machine()}, torch {torch.__version__}, numpy {np.__version__}; {load()}"
    if args.json:
        print(json.dumps({"machine": where, "rows": rows}, indent=2))
        return 0
    print(f"machine: {where}; {args.rounds} interleaved rounds\n")
    print(
        "| backend | problem | d5 median (µs) | hand-loop median (µs) | "
        "ratio (median of rounds) | ratio range | added per call (µs) |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['backend']} | {row['problem']} | {row['d5_median_s'] * 1e6:.1f} | "
            f"{row['hand_median_s'] * 1e6:.1f} | {row['ratio']:.3f} | "
            f"{row['ratio_range'][0]:.3f}–{row['ratio_range'][1]:.3f} | {row['added_us']:+.2f} |"
        )
    ratios = [r["ratio"] for r in rows]
    small = [r["added_us"] for r in rows if r["hand_median_s"] < 2e-4]
    print(
        f"\nratio of medians: median {statistics.median(ratios):.3f}, max {max(ratios):.3f}; "
        f"added per call where a call takes under 200 µs: max {max(small):+.2f} µs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
