"""What accuracy while timed costs: an operator's median with and without its outputs
sampled in the timed loop, side by side in one process.

For each backend and problem, the callable ``d5 bench op`` times (``build_job`` of the
``op`` kind, as a worker builds it) is measured by the engine in alternating rounds:
once as ``d5 bench`` did before issue 28 (no outputs kept) and once keeping the return
value of three randomly chosen samples (:class:`d5core.measure.audit.OutputSample`), as
every ``d5 bench`` now does. The table gives the median of the round medians of each,
their ratio (target: within the noise, about 1.00) and the time the check takes after
timing (outside the measurement: the untimed forward and the comparison).

    .venv/bin/python benchmarks/timed_accuracy_overhead.py [--rounds 10] [--backends numpy,torch]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _machine import load, machine

from d5core.lv0.jobs import problem_to_json
from d5core.lv0.runner import problem_for
from d5core.lv0.workloads.problems import parse_shapes
from d5core.measure.audit import DEFAULT_SAMPLED, OutputSample
from d5core.measure.engine import MeasureOptions, measure
from d5core.measure.invocations import build_job, job_target

PROBLEMS = [("Relu", "64x64"), ("Gemm", "256x256,256x256"), ("Conv", "1x16x32x32,16x16x3x3")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--backends", default="numpy,torch")
    args = parser.parse_args()
    options = MeasureOptions(warmup=3, min_samples=20, max_samples=200, time_budget_s=0.2)
    target = job_target("op")
    print(machine())
    print(f"{load()} before; {args.rounds} rounds, alternating, each the engine's own stop")
    header = f"{'backend':8} {'problem':32} {'without':>10} {'with':>10} {'ratio':>6} {'check':>9}"
    print(header)
    for backend in args.backends.split(","):
        for op, shapes in PROBLEMS:
            problem = problem_for(op, shapes=parse_shapes(shapes))
            spec = {"problem": problem_to_json(problem), "backend": backend,
                    "dtype": "float32", "direction": "forward", "seed": 0}  # fmt: skip
            job = build_job(target, spec)
            plain: list[float] = []
            kept: list[float] = []
            checks: list[float] = []
            for r in range(args.rounds):
                for keeping in (r % 2 == 0, r % 2 == 1):
                    keep = OutputSample.choose(DEFAULT_SAMPLED, options.min_samples)
                    m = measure(job.fn, options, keep=keep if keeping else None)
                    (kept if keeping else plain).append(m.summary.median)
                    if keeping and job.check is not None:
                        t0 = time.perf_counter()
                        outcome = job.check(keep)
                        checks.append(time.perf_counter() - t0)
                        assert outcome["status"] == "pass", outcome["detail"]
            a, b = statistics.median(plain), statistics.median(kept)
            print(f"{backend:8} {problem.label:32} {a * 1e6:8.2f}µs {b * 1e6:8.2f}µs "
                  f"{b / a:6.3f} {statistics.median(checks) * 1e3:7.2f}ms")  # fmt: skip
    print(f"{load()} after")


if __name__ == "__main__":
    main()
