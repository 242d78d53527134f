"""What d5's MXNet operator backend adds to an operator's time, against the same MXNet
call written by hand.

For the cpu-small GEMM and convolution problems, two callables are timed side by side,
interleaved, in one process: the one ``prepare_forward`` of the ``mxnet`` backend
returns (what ``d5 bench op`` times), and the same work written by hand on arrays made
beforehand (``mx.nd.dot`` with its transpose flags; ``mx.nd.Convolution`` with the
problem's symmetric pads). MXNet's engine is asynchronous, so both sides are timed the
way d5's engine times an asynchronous operator: ``mx.nd.waitall()`` before the first
clock read and before the second. The hand call is first checked against the numpy
reference. Each round times a block of calls of each side (alternating which goes
first); the script repeats in ``--processes`` fresh processes and prints, per problem,
the median over all rounds of the per-round ratio d5 / hand (target <= 1.02), the range
of the per-process medians of that ratio, and the median time added per call.

    .venv-mxnet/bin/python benchmarks/mxnet_op_overhead.py [--processes 3] [--rounds 20]
        [--calls 50] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from d5core.lv0.runner import backend_by_name, build_operator
from d5core.lv0.workloads.problems import Problem, suite


def problems() -> list[Problem]:
    """The cpu-small GEMM problems and the cpu-small convolutions."""
    return suite("cpu-small-gemm") + suite("cpu-small-conv")


def hand_call(problem: Problem, inputs: list[np.ndarray]) -> Callable[[], Any]:
    """The MXNet call for ``problem``, its arrays made now."""
    from d5_plugin_mxnet._mx import mxnet

    mx = mxnet()
    attrs = problem.attributes
    if problem.op == "Gemm":
        a, b = (mx.nd.array(v, dtype="float32") for v in inputs[:2])
        ta, tb = bool(attrs.get("transA")), bool(attrs.get("transB"))
        return lambda: mx.nd.dot(a, b, transpose_a=ta, transpose_b=tb)
    x, w = (mx.nd.array(v, dtype="float32") for v in inputs[:2])
    pads, strides = list(attrs.get("pads", [0, 0, 0, 0])), tuple(attrs.get("strides", [1, 1]))
    options = {
        "kernel": tuple(inputs[1].shape[2:]),
        "stride": strides,
        "pad": (pads[0], pads[1]),
        "num_filter": inputs[1].shape[0],
        "no_bias": True,
    }
    return lambda: mx.nd.Convolution(x, w, **options)


def check_hand(problem: Problem, inputs: list[np.ndarray]) -> None:
    """Refuse a hand call that does not compute what the reference operator does."""
    reference = build_operator(backend_by_name("numpy"), problem, "float32", inputs)
    (expected,) = reference.forward(inputs)
    got = hand_call(problem, inputs)().asnumpy()
    scale = float(np.max(np.abs(expected)))
    if got.shape != expected.shape or not np.allclose(got, expected, rtol=0, atol=1e-4 * scale):
        raise SystemExit(f"{problem.label}: the hand-written call does not compute the reference")


def timed_block(fn: Callable[[], Any], wait: Callable[[], None], calls: int) -> float:
    """Median seconds per call, each call timed as d5 times an asynchronous operator."""
    times = []
    gc.disable()
    try:
        for _ in range(calls):
            wait()
            t0 = time.perf_counter_ns()
            fn()
            wait()
            times.append(time.perf_counter_ns() - t0)
    finally:
        gc.enable()
    return statistics.median(times) / 1e9


def one_process(rounds: int, calls: int) -> list[dict[str, Any]]:
    """Every problem, d5's callable against the hand call, interleaved."""
    from d5_plugin_mxnet._mx import mxnet

    wait = mxnet().nd.waitall
    rows = []
    for problem in problems():
        inputs = problem.make_inputs("float32", 0)
        if problem.op == "Conv" and len(inputs) > 2:
            inputs = inputs[:2]
        check_hand(problem, inputs)
        op = build_operator(backend_by_name("mxnet"), problem, "float32", inputs)
        sides = {"d5": op.prepare_forward(inputs), "hand": hand_call(problem, inputs)}
        for fn in sides.values():
            timed_block(fn, wait, 5)
        medians: dict[str, list[float]] = {"d5": [], "hand": []}
        for r in range(rounds):
            for who in ("d5", "hand") if r % 2 == 0 else ("hand", "d5"):
                medians[who].append(timed_block(sides[who], wait, calls))
        pairs = list(zip(medians["d5"], medians["hand"], strict=True))
        rows.append(
            {
                "problem": problem.label,
                "d5_s": statistics.median(medians["d5"]),
                "hand_s": statistics.median(medians["hand"]),
                # paired within a round: both sides ran back to back, on the same state
                "round_ratios": [d / h for d, h in pairs],
                "round_added_s": [d - h for d, h in pairs],
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(one_process(args.rounds, args.calls)))
        return 0
    command = [sys.executable, __file__, "--worker", "--rounds", str(args.rounds)]
    command += ["--calls", str(args.calls)]
    runs = []
    for _ in range(args.processes):
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    rows = []
    for i, first in enumerate(runs[0]):
        d5 = [run[i]["d5_s"] for run in runs]
        hand = [run[i]["hand_s"] for run in runs]
        # The median over every process's rounds of the paired per-round ratio, as
        # op_overhead.py reports it: a ratio of separately taken medians is at the mercy
        # of the two-thread GEMM's bimodal times, which the pairing cancels.
        ratios = [x for run in runs for x in run[i]["round_ratios"]]
        per_process = [statistics.median(run[i]["round_ratios"]) for run in runs]
        added = [x for run in runs for x in run[i]["round_added_s"]]
        rows.append(
            {
                "problem": first["problem"],
                "d5_median_s": statistics.median(d5),
                "hand_median_s": statistics.median(hand),
                "ratio": statistics.median(ratios),
                "ratio_range": [min(per_process), max(per_process)],
                "added_us": statistics.median(added) * 1e6,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from d5_plugin_mxnet._mx import mxnet

    print(
        f"mxnet {mxnet().__version__}, numpy {np.__version__}; {args.processes} processes, "
        f"{args.rounds} interleaved rounds of {args.calls} calls per side\n"
    )
    print(
        "| problem | d5 median (µs) | hand median (µs) | ratio (median of paired rounds) "
        "| range of process medians | added (µs) |"
    )
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['problem']} | {row['d5_median_s'] * 1e6:.1f} | "
            f"{row['hand_median_s'] * 1e6:.1f} | {row['ratio']:.3f} | "
            f"{row['ratio_range'][0]:.3f}–{row['ratio_range'][1]:.3f} | "
            f"{row['added_us']:+.2f} |"
        )
    ratios = [r["ratio"] for r in rows]
    print(f"\nratio (paired rounds): median {statistics.median(ratios):.3f}, max {max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
