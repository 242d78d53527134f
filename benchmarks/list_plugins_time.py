"""How long `d5 list-plugins` takes with the torch plugin installed (target: < 0.5 s).

Each sample is the wall time of one fresh `d5 list-plugins --json` process, measured
side by side with a bare Python start and with `import torch`, so the figure can be read
against what starting Python costs and what importing a framework would cost.

    .venv/bin/python benchmarks/list_plugins_time.py [--runs 30] [--json]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import subprocess
import sys
import time
from pathlib import Path

from _machine import machine

from d5core.measure.stats import summarize

BIN = Path(sys.executable).parent
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "d5 list-plugins --json": [str(BIN / "d5"), "list-plugins", "--json"],
    "python -c 'import torch'": [sys.executable, "-c", "import torch"],
}


def wall(cmd: list[str]) -> float:
    start = time.perf_counter_ns()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter_ns() - start) / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    try:
        torch_plugin = md.version("d5-plugin-torch")
    except md.PackageNotFoundError:
        print("d5-plugin-torch is not installed: run `make dev` first", file=sys.stderr)
        return 2
    for cmd in COMMANDS.values():  # warm the page cache; not counted
        wall(cmd)
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):  # interleaved, so drifts hit every command alike
        for name, cmd in COMMANDS.items():
            samples[name].append(wall(cmd))
    summaries = {name: summarize(s) for name, s in samples.items()}
    if args.json:
        out = {n: s.to_json() for n, s in summaries.items()}
        print(json.dumps({"machine": machine(), "torch_plugin": torch_plugin, "results": out}))
        return 0
    print(f"machine: {machine()}; d5-plugin-torch {torch_plugin} installed; {args.runs} runs each")
    print()
    print("| command | median (s) | 95% CI of median (s) | p95 (s) | n |")
    print("|---|---|---|---|---|")
    for name, s in summaries.items():
        print(
            f"| `{name}` | {s.median:.3f} | [{s.ci_low:.3f}, {s.ci_high:.3f}] | "
            f"{s.p95:.3f} | {s.n} |"
        )
    verdict = "meets" if summaries["d5 list-plugins --json"].ci_high < 0.5 else "MISSES"
    print(f"\n`d5 list-plugins` {verdict} the 0.5 s target (upper end of its CI).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
