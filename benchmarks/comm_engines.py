"""The engines' bandwidth table: allreduce on 2 ranks over gloo and over MPI, each
through d5 and raw.

Runs ``d5 bench comm --collective allreduce --ranks 2`` twice, with ``--communicator
gloo`` (d5-plugin-torchdist, launched by torchrun) and ``--communicator mpi``
(d5-plugin-mpi, launched by mpiexec). Each run times d5's call beside the library's own
(``raw_collective``: ``torch.distributed.all_reduce`` and mpi4py's ``Allreduce``), so the
two runs give all four columns: d5-over-gloo, raw gloo, d5-over-MPI, raw MPI. Prints one
row per size with the median time of each (the slowest rank's time per sample, as
``d5 bench comm`` measures), the bus bandwidth of each and d5/raw per engine (raw
median over d5 median: d5's bandwidth as a share of the library's own). The runs are
stored in a temporary database unless ``--db`` names one.

    .venv/bin/python benchmarks/comm_engines.py [--max-bytes 16777216] [--samples N] [--db PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _machine import load, machine

ENGINES: tuple[str, ...] = ("gloo", "mpi")


def sweep(communicator: str, max_bytes: int, samples: int | None, db: Path) -> dict[str, Any]:
    """The ``--json`` document of one ``d5 bench comm`` run on 2 ranks."""
    d5 = str(Path(sys.executable).with_name("d5"))
    cmd = [d5, "bench", "comm", "--collective", "allreduce", "--ranks", "2",
           "--communicator", communicator, "--max-bytes", str(max_bytes),
           "--db", str(db), "--json"]  # fmt: skip
    if samples is not None:
        cmd += ["--samples", str(samples)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    if out.returncode != 0:
        sys.exit(f"{communicator}: d5 bench comm failed ({out.returncode}): {out.stderr.strip()}")
    return dict(json.loads(out.stdout)["data"])


def _size(nbytes: int) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def table(runs: dict[str, dict[str, Any]]) -> list[str]:
    """The markdown table of the runs: one row per size."""
    rows = {engine: {int(r["bytes"]): r for r in runs[engine]["rows"]} for engine in ENGINES}
    lines = [
        "| size | d5/gloo median (µs) | raw gloo median (µs) | d5/MPI median (µs) | "
        "raw MPI median (µs) | d5/gloo busbw (GB/s) | raw gloo busbw (GB/s) | "
        "d5/MPI busbw (GB/s) | raw MPI busbw (GB/s) | d5/raw gloo | d5/raw MPI |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size in sorted(set(rows["gloo"]) & set(rows["mpi"])):
        g, m = rows["gloo"][size], rows["mpi"][size]
        cells = [_size(size)]
        for row in (g, m):
            cells += [f"{row['d5']['median_s'] * 1e6:.1f}", f"{row['raw']['median_s'] * 1e6:.1f}"]
        for row in (g, m):
            cells += [f"{row['d5']['busbw_GBs']:.3f}", f"{row['raw']['busbw_GBs']:.3f}"]
        cells += [f"{g['ratio']:.3f}", f"{m['ratio']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-bytes", type=int, default=16 * 2**20, help="largest buffer")
    parser.add_argument("--samples", type=int, default=None, help="samples per size")
    parser.add_argument("--db", type=Path, default=None, help="store the runs here")
    args = parser.parse_args()
    print(f"machine: {machine()}; {load()} before")
    with tempfile.TemporaryDirectory(prefix="d5-engines-") as tmp:
        db = args.db or Path(tmp) / "engines.sqlite"
        runs = {e: sweep(e, args.max_bytes, args.samples, db) for e in ENGINES}
    for engine in ENGINES:
        if not runs[engine]["raw_baseline"]:
            sys.exit(f"{engine}: the communicator offers no raw baseline")
    print(f"runs: gloo {runs['gloo']['run_id']}, mpi {runs['mpi']['run_id']}; {load()} after")
    print("\n".join(table(runs)))


if __name__ == "__main__":
    main()
