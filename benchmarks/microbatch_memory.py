"""Peak memory against time for a training step split into k microbatches (k = 1, 2, 4, 8).

Microbatching trades time for memory: activations are held for one microbatch at a time
while gradients are accumulated. Each k runs in a fresh process, so that memory freed by
one setting cannot hide the peak of the next; the peak is the process's high-water mark of
resident memory (VmHWM) during the steps, minus the resident memory just before the first
step (the framework, the model, the feeds).

    .venv/bin/python benchmarks/microbatch_memory.py [--model vgg] [--batch 128]
        [--executor torch] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from _machine import load, machine

KS = (1, 2, 4, 8)


def rss_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def one(model: str, batch: int, k: int, executor_name: str, budget: float) -> dict[str, float]:
    """Measure one k in this process; returns seconds per step and peak bytes."""
    from d5core.lv1.passes import microbatched_step
    from d5core.lv1.runner import executor_by_name, load_model, make_feeds, with_loss
    from d5core.measure.engine import MeasureOptions, measure

    network, loss = with_loss(load_model(model))
    feeds = make_feeds(network, batch, seed=0)
    executor = executor_by_name(executor_name, network)
    before = rss_bytes("VmRSS")
    m = measure(
        lambda: microbatched_step(executor, feeds, loss, k),
        MeasureOptions(warmup=1, min_samples=6, max_samples=50, time_budget_s=budget),
    )
    return {
        "k": k,
        "median_s": m.summary.median,
        "ci_low_s": m.summary.ci_low,
        "ci_high_s": m.summary.ci_high,
        "n": m.summary.n,
        "peak_bytes": rss_bytes("VmHWM") - before,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vgg")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--executor", default="torch")
    parser.add_argument("--time-budget", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        row = one(args.model, args.batch, args.one, args.executor, args.time_budget)
        print(json.dumps(row))
        return 0
    rows = []
    for k in KS:
        cmd = [sys.executable, __file__, "--one", str(k), "--model", args.model,
               "--batch", str(args.batch), "--executor", args.executor,
               "--time-budget", str(args.time_budget)]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    if args.json:
        print(json.dumps({"machine": machine(), "rows": rows}, indent=2))
        return 0
    print(f"machine: {machine()}; {load()}")
    print(f"model {args.model}, batch {args.batch}, executor {args.executor}\n")
    print(
        "| k | microbatch | step time, median [95% CI] (ms) | n | peak memory above start (MiB) |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['k']} | {args.batch // r['k']} | {r['median_s'] * 1e3:.1f} "
            f"[{r['ci_low_s'] * 1e3:.1f}, {r['ci_high_s'] * 1e3:.1f}] | {r['n']} | "
            f"{r['peak_bytes'] / 2**20:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
