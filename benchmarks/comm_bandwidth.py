"""Allreduce bandwidth of d5's MPICommunicator against raw mpi4py.

For float32 buffers from 1 KB to 64 MB (powers of 4), on 2 and 4 ranks, times
``MPICommunicator.allreduce_inplace(buf)`` and ``MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE,
buf)``, interleaved sample by sample (alternating which goes first). Before each sample
the ranks meet at a barrier; a sample's time is the maximum over ranks (gathered to rank
0); the median over samples (``d5core.measure.stats.summarize``) is reported, with
algorithm bandwidth (size / time), bus bandwidth (x 2(n-1)/n, as nccl-tests) and the
ratio of d5's bandwidth to raw mpi4py's (target >= 0.97 from 16 MB).

Launches itself under ``mpiexec`` (once per rank count) unless already under a launcher:

    .venv/bin/python benchmarks/comm_bandwidth.py [--ranks 2,4] [--max-mb 64] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

import numpy as np
from _machine import load, machine
from d5_plugin_mpi.launch import build_command, under_launcher

from d5core.lv3.comm_sweep import bandwidths, samples_for


def worker(max_mb: int) -> list[dict[str, Any]]:
    from d5_plugin_mpi.comm import MPICommunicator
    from mpi4py import MPI

    from d5core.measure.stats import summarize

    world = MPI.COMM_WORLD
    comm = MPICommunicator(world)
    rank, n = world.Get_rank(), world.Get_size()
    clock = time.perf_counter_ns
    rows: list[dict[str, Any]] = []
    nbytes = 1024
    while nbytes <= max_mb << 20:
        buf = np.ones(nbytes // 4, dtype=np.float32)

        def d5(buf: np.ndarray = buf) -> None:
            comm.allreduce_inplace(buf)

        def raw(buf: np.ndarray = buf) -> None:
            world.Allreduce(MPI.IN_PLACE, buf)

        times: dict[str, list[float]] = {"d5": [], "raw": []}
        mine = np.empty(1, dtype=np.float64)
        allt = np.empty(n, dtype=np.float64)
        count = samples_for(nbytes)
        for i in range(count + 2):  # two warm-up rounds
            order = [("d5", d5), ("raw", raw)] if i % 2 == 0 else [("raw", raw), ("d5", d5)]
            for name, fn in order:
                buf.fill(1.0)
                world.Barrier()
                t0 = clock()
                fn()
                mine[0] = (clock() - t0) / 1e9
                world.Gather(mine, allt, root=0)
                if i >= 2 and rank == 0:
                    times[name].append(float(allt.max()))
        if rank == 0:
            d5_t = summarize(times["d5"]).median
            raw_t = summarize(times["raw"]).median
            d5_algbw, d5_busbw = bandwidths("allreduce", nbytes, n, d5_t)
            raw_algbw, raw_busbw = bandwidths("allreduce", nbytes, n, raw_t)
            rows.append(
                {
                    "ranks": n,
                    "bytes": nbytes,
                    "samples": count,
                    "d5_s": d5_t,
                    "raw_s": raw_t,
                    "d5_algbw_GBs": d5_algbw,
                    "raw_algbw_GBs": raw_algbw,
                    "d5_busbw_GBs": d5_busbw,
                    "raw_busbw_GBs": raw_busbw,
                    "ratio": raw_t / d5_t,
                }
            )
        nbytes *= 4
    return rows


def _size(nbytes: int) -> str:
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| ranks | size | d5 median (µs) | raw median (µs) | d5 algbw (GB/s) | "
        "d5 busbw (GB/s) | raw algbw (GB/s) | raw busbw (GB/s) | d5/raw bandwidth |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['ranks']} | {_size(r['bytes'])} | {r['d5_s'] * 1e6:.1f} | "
            f"{r['raw_s'] * 1e6:.1f} | {r['d5_algbw_GBs']:.3f} | {r['d5_busbw_GBs']:.3f} | "
            f"{r['raw_algbw_GBs']:.3f} | {r['raw_busbw_GBs']:.3f} | {r['ratio']:.3f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4", help="comma-separated rank counts")
    parser.add_argument("--max-mb", type=int, default=64, help="largest buffer in MB")
    parser.add_argument("--json", action="store_true", help="print JSON rows, not a table")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker or under_launcher():
        rows = worker(args.max_mb)
        if rows:
            print(json.dumps(rows))
        return 0
    all_rows: list[dict[str, Any]] = []
    for n in (int(s) for s in args.ranks.split(",")):
        argv = [sys.executable, __file__, "--worker", "--max-mb", str(args.max_mb)]
        out = subprocess.run(
            build_command(n, argv), capture_output=True, text=True, timeout=900, check=False
        )
        if out.returncode != 0:
            print(f"mpiexec -n {n} failed: {out.stderr.strip()[-500:]}", file=sys.stderr)
            return 1
        all_rows.extend(json.loads(out.stdout.strip().splitlines()[-1]))
    where = f"{machine()}, numpy {np.__version__}; {load()}"
    if args.json:
        print(json.dumps({"machine": where, "rows": all_rows}, indent=2))
        return 0
    print(f"machine: {where}")
    print(
        "float32 allreduce in place; barrier before each sample, sample = max over ranks, "
        "median over samples; d5 and raw interleaved\n"
    )
    print(table(all_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
