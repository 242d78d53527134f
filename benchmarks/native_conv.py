"""d5-kernels' Conv against torch's ``F.conv2d`` (oneDNN) on ResNet 3x3 convolutions.

Each row is one problem of a suite (default: ``resnet20-conv3x3`` and
``resnet50-conv3x3``, every distinct 3x3 layer at batch 1 and 32; any suite of
``d5 bench op --suite`` works), one dtype and one thread count. The native side is
the ``native`` backend's Conv operator as d5 times it: the callable of
``prepare_forward``, one call into the compiled module; the row names the algorithm
the operator chose (``details()["algorithm"]``). The torch side is ``F.conv2d`` under
``torch.no_grad`` on tensors made beforehand. Both use the same thread count
(``d5_kernels.set_num_threads``, ``torch.set_num_threads``), are first checked to agree,
and are timed in interleaved rounds (see ``_rounds.py``): the table shows each side's
median time and GFLOP/s with its share of the FMA peak (one core's, measured by
d5-kernels with the widest FMA the CPU runs, times the threads), and native's speed
over torch's as the ratio of the medians with the range of the per-round ratios. The
issue's target is native >= 0.9 of torch on every row. Each row waits for the load
average to fall under the core count and is measured again if it rose meanwhile.

    .venv/bin/python benchmarks/native_conv.py [--suite resnet20-conv3x3,resnet50-conv3x3]
        [--batch 1,32] [--dtype float32] [--threads 1,2] [--rounds 5] [--retries 2]
        [--max-wait 120] [--isa avx2] [--json]

A quick look: ``--suite resnet20-conv3x3 --batch 1 --threads 1 --rounds 3``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import d5_kernels
import numpy as np
import torch
import torch.nn.functional as F
from _machine import load, machine
from _rounds import (
    OTHERS_NOTE,
    LoadWatch,
    Waiting,
    add_common_arguments,
    cores,
    interleaved,
    isa_line,
    load_cells,
    load_footer,
    measure_peaks,
    measure_row,
    method_lines,
    parse_list,
    ratio_cell,
    ratio_summary,
    select_isa,
    side_cell,
    side_summary,
)
from d5_kernels.operators import NativeBackend

from d5core.errors import UsageError
from d5core.levels.operators import TensorDescriptor
from d5core.lv0.workloads.problems import Problem, suite

__all__ = ["main"]

DEFAULT_SUITES = "resnet20-conv3x3,resnet50-conv3x3"
#: Seconds each side computes per round (at least one call).
BATCH_SECONDS = 0.1
#: Largest difference from torch allowed, relative to the largest element of Y.
TOLERANCE = {"float32": 1e-4, "float64": 1e-11}
#: The issue's target: native at least this fraction of torch's speed.
TARGET = 0.9


def torch_version() -> str:
    """torch's version and the oneDNN (MKL-DNN) it was built with."""
    onednn = re.search(r"MKL-DNN (v\S+)", torch.__config__.show())
    return f"{torch.__version__} (oneDNN {onednn[1] if onednn else 'not found'})"


def torch_conv(problem: Problem, x: np.ndarray, w: np.ndarray) -> Callable[[], torch.Tensor]:
    """``F.conv2d`` on ``problem``'s attributes (symmetric pads only, as torch takes)."""
    pads = list(problem.attributes.get("pads", [0, 0, 0, 0]))
    strides = tuple(problem.attributes.get("strides", [1, 1]))
    dilations = tuple(problem.attributes.get("dilations", [1, 1]))
    group = int(problem.attributes.get("group", 1))
    if pads[0] != pads[2] or pads[1] != pads[3]:
        raise SystemExit(f"{problem.label}: F.conv2d takes symmetric pads only, got {pads}")
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)

    def run() -> torch.Tensor:
        with torch.no_grad():
            return F.conv2d(tx, tw, None, strides, (pads[0], pads[1]), dilations, group)

    return run


def sides_of(problem: Problem, dtype: str) -> tuple[dict[str, Callable[[], object]], str]:
    """The two sides' callables, after checking that they agree, and the algorithm the
    native operator chose."""
    inputs = problem.make_inputs(dtype, 0)
    descriptors = [TensorDescriptor.of(array) for array in inputs]
    op = NativeBackend().create("Conv", problem.attributes, descriptors)
    native = op.prepare_forward(inputs)
    algorithm = str(op.details().get("algorithm", "?"))
    torch_side = torch_conv(problem, inputs[0], inputs[1])
    got, want = native()[0], torch_side().numpy()
    scale = max(float(np.abs(want).max()), 1e-30)
    error = float(np.abs(got - want).max()) / scale
    if not error <= TOLERANCE[dtype]:
        raise SystemExit(
            f"native and torch disagree on {problem.label} {dtype} (relative error "
            f"{error:.1e}); check the build before timing it"
        )
    return {"native": native, "torch": torch_side}, algorithm


def measure(
    problem: Problem, dtype: str, threads: int, rounds: int, peak: float, watch: LoadWatch
) -> dict[str, Any]:
    """One row: both sides timed in interleaved rounds with ``threads`` threads."""
    d5_kernels.set_num_threads(threads)
    torch.set_num_threads(threads)
    sides, algorithm = sides_of(problem, dtype)
    times = interleaved(sides, rounds, BATCH_SECONDS, watch)
    roof = peak * threads
    return {
        "dtype": dtype,
        "threads": threads,
        "problem": problem.label,
        "algorithm": algorithm,
        "flops": problem.flops,
        "roof_gflops": roof,
        "native": side_summary(times["native"], problem.flops, roof),
        "torch": side_summary(times["torch"], problem.flops, roof),
        "native_vs_torch": ratio_summary(times["native"], times["torch"], problem.flops),
    }


def problems_of(args: argparse.Namespace) -> list[Problem]:
    """The Conv problems of ``--suite``, only those of ``--batch`` if given."""
    batches = {int(n) for n in parse_list(args.batch)}
    try:
        found = [
            problem
            for name in parse_list(args.suite)
            for problem in suite(name, "Conv")
            if not batches or problem.inputs[0].shape[0] in batches
        ]
    except UsageError as exc:
        raise SystemExit(str(exc)) from None
    if not found:
        raise SystemExit(f"no Conv problem of --suite {args.suite} has a batch in {args.batch}")
    return found


def header(report: dict[str, Any]) -> list[str]:
    return [
        f"machine: {report['machine']}; {report['load_at_start']}",
        f"{report['isa_line']}; torch {report['torch']} F.conv2d; forward; suites "
        f"{', '.join(report['suites'])}",
        *method_lines(report, "native / torch is native's speed over torch's"),
    ]


def table(report: dict[str, Any]) -> str:
    lines = header(report)
    lines.append(
        "| dtype | threads | problem | native algorithm | native ms | native GFLOP/s (% peak) "
        "| torch ms | torch GFLOP/s (% peak) | native / torch | load | under cores "
        "| others' CPU |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in report["rows"]:
        lines.append(
            f"| {row['dtype']} | {row['threads']} | {row['problem']} | {row['algorithm']} "
            f"| {row['native']['ms']:.3f} | {side_cell(row['native'])} "
            f"| {row['torch']['ms']:.3f} | {side_cell(row['torch'])} "
            f"| {ratio_cell(row['native_vs_torch'])} {load_cells(row)}"
        )
    rows = report["rows"]
    reached = sum(row["native_vs_torch"]["ratio"] >= TARGET for row in rows)
    worst = min(rows, key=lambda row: row["native_vs_torch"]["ratio"])
    lines += [
        "",
        f"native >= {TARGET} of torch on {reached} of {len(rows)} rows; worst "
        f"{worst['native_vs_torch']['ratio']:.2f} ({worst['dtype']}, {worst['threads']} "
        f"thread(s), {worst['problem']}).",
        "GFLOP/s count a direct convolution, 2*N*K*C*kh*kw*OH*OW, padded taps included; "
        "torch's oneDNN skips the multiplications by padded zeros, so its GFLOP/s (and "
        "share of the peak) can exceed what its FMAs did, even above 100%.",
        load_footer(report),
        OTHERS_NOTE,
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default=DEFAULT_SUITES, help="Conv suites, comma-separated")
    parser.add_argument("--batch", default="", help="only these batch sizes (default: all)")
    parser.add_argument("--dtype", default="float32", help="float32, float64 or both")
    add_common_arguments(parser, rounds=5)
    args = parser.parse_args()
    select_isa(args.isa)
    dtypes = parse_list(args.dtype)
    if not set(dtypes) <= set(TOLERANCE) or not dtypes:
        raise SystemExit(f"--dtype {args.dtype!r}: choose float32, float64 or both")
    problems = problems_of(args)
    # machine() applies d5's allocator policy, as d5 does before it measures.
    where, load_at_start = machine(), load()
    peaks = measure_peaks(dtypes)
    waiting = Waiting(args.max_wait, args.wait_budget)
    rows = [
        measure_row(
            partial(measure, problem, dtype, threads, args.rounds, peaks[dtype]),
            args.retries,
            waiting,
        )
        for dtype in dtypes
        for threads in (int(t) for t in parse_list(args.threads))
        for problem in problems
    ]
    report = {
        "machine": where,
        "cores": cores(),
        "load_at_start": load_at_start,
        "isa": d5_kernels.isa(),
        "isa_line": isa_line(),
        "peak_isa": d5_kernels.available_isas()[-1],
        "peak_gflops_per_core": peaks,
        "torch": torch_version(),
        "suites": parse_list(args.suite),
        "rounds": args.rounds,
        "retries": args.retries,
        "waiting": waiting.report(),
        "all_rows_under_cores": all(row["load_under_cores"] for row in rows),
        "rows": rows,
    }
    print(json.dumps(report, indent=2) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
