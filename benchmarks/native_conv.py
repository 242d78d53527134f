"""d5-kernels' Conv against torch's ``F.conv2d`` (oneDNN) on the cpu-small convolution
suite, float32, forward.

The native side is the ``native`` backend's operator as d5 times it: the callable of
``prepare_forward`` (one call into the compiled module: im2col + packed GEMM, see
kernels/README.md). The torch side is ``F.conv2d`` under ``torch.no_grad`` on tensors
made beforehand. Both use the same thread count (``d5_kernels.set_num_threads`` and
``torch.set_num_threads``); for each thread count and problem the two sides run in
alternation, a batch of calls each per round, and the table shows medians over rounds.
Both sides are first checked to agree. The target is native >= 50% of torch's speed.
Rows measured while other processes used the CPU are measured again, as in
``native_gemm.py``.

    .venv/bin/python benchmarks/native_conv.py [--threads 1,2] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from functools import partial
from typing import Any

import d5_kernels
import numpy as np
import torch
import torch.nn.functional as F
from _machine import load, machine
from d5_kernels.operators import NativeBackend
from native_gemm import BUSY_LIMIT, per_call, quietest

from d5core.levels.operators import TensorDescriptor
from d5core.lv0.workloads.problems import Problem, suite

#: Seconds each side gets per round.
BATCH_SECONDS = 0.1


def measure(problem: Problem, threads: int, rounds: int) -> dict[str, Any]:
    inputs = problem.make_inputs("float32", 0)
    x, w = inputs[0], inputs[1]
    attributes = problem.attributes
    pads, strides = attributes.get("pads", [0, 0, 0, 0]), attributes.get("strides", [1, 1])
    if pads[0] != pads[2] or pads[1] != pads[3]:
        raise SystemExit(f"{problem.label}: F.conv2d needs symmetric pads, got {pads}")
    op = NativeBackend().create("Conv", attributes, [TensorDescriptor.of(a) for a in inputs])
    native = op.prepare_forward(inputs)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)

    def torch_side() -> torch.Tensor:
        with torch.no_grad():
            return F.conv2d(tx, tw, stride=tuple(strides), padding=(pads[0], pads[1]))

    d5_kernels.set_num_threads(threads)
    torch.set_num_threads(threads)
    got, want = native()[0], torch_side().numpy()
    if not np.allclose(got, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max())):
        raise SystemExit(f"{problem.label}: native and torch disagree")
    sides: dict[str, list[float]] = {"native": [], "torch": []}
    for _ in range(rounds):
        sides["native"].append(per_call(native, BATCH_SECONDS))
        sides["torch"].append(per_call(torch_side, BATCH_SECONDS))
    native_s = statistics.median(sides["native"])
    torch_s = statistics.median(sides["torch"])
    return {
        "threads": threads,
        "problem": problem.label,
        "native_ms": native_s * 1e3,
        "torch_ms": torch_s * 1e3,
        "native_gflops": problem.flops / native_s / 1e9,
        "torch_gflops": problem.flops / torch_s / 1e9,
        "speed_vs_torch": torch_s / native_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--retries", type=int, default=2, help="re-measure busy rows")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    where = machine()
    rows = [
        quietest(partial(measure, problem, int(t), args.rounds), args.retries)
        for t in args.threads.split(",")
        for problem in suite("cpu-small-conv")
    ]
    if args.json:
        print(json.dumps({"machine": where, "isa": d5_kernels.isa(), "rows": rows}, indent=2))
        return 0
    print(f"machine: {where}; {load()}")
    print(
        f"native Conv: im2col + packed GEMM ({d5_kernels.isa()}); torch {torch.__version__} "
        f"F.conv2d; float32 forward; {args.rounds} interleaved rounds, medians\n"
    )
    print(
        "| threads | problem | native ms | torch ms | native GFLOP/s | torch GFLOP/s "
        "| native speed / torch | others' CPU |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['threads']} | {row['problem']} | {row['native_ms']:.3f} | "
            f"{row['torch_ms']:.3f} | {row['native_gflops']:.1f} | {row['torch_gflops']:.1f} | "
            f"{row['speed_vs_torch']:.2f} | {100 * row['others_cpu']:.0f}% |"
        )
    worst = min(row["speed_vs_torch"] for row in rows)
    print(f"\nworst native speed / torch: {worst:.2f} (target >= 0.50)")
    print(
        "others' CPU: the share of all cores other processes used while the row was "
        f"measured; a row above {BUSY_LIMIT:.0%} was measured up to {args.retries} more "
        "times and the quietest attempt kept"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
