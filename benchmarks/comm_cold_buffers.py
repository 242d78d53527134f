"""How much slower MPICH moves a buffer that has left the cache: two ranks, warm against cold.

The cost models (``d5 model comm``) take ``L`` and ``G`` from a ping-pong that sends the
same buffer back and forth, so the buffer stays in the cache. A training step's
gradients do not: the backward pass, the optimizer and the other tensors ran in between.
For each size this script times, in one launch of two ranks and alternating per sample:

- **warm**: ``Sendrecv`` of the buffer with the other rank, and ``Allreduce`` in place,
  right after the same call on the same buffer;
- **cold**: the same calls after each rank has written a 64 MiB array (twice the L3
  cache of a Zen 4 CCD; ``--evict`` to change it), which pushes the buffer, the receive
  side and MPICH's shared-memory cells out of the caches.

The ranks meet at a barrier before each timed call; a sample is the slowest rank's time;
figures are medians of ``--samples`` samples. Run it a few times: on a shared virtual
machine one launch can be uniformly faster than the next (docs/comm-models.md).

    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/comm_cold_buffers.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

SIZES = (64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--evict", type=int, default=64, help="MiB written between cold samples")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    if comm.size != 2:
        raise SystemExit("run it on exactly 2 ranks: mpiexec -n 2 ...")
    peer = 1 - comm.rank
    junk = np.ones((args.evict << 20) // 4, dtype=np.float32)

    def timed(call: object) -> float:
        comm.Barrier()
        t0 = time.perf_counter()
        call()  # type: ignore[operator]
        mine = np.array(time.perf_counter() - t0)
        slowest = np.empty_like(mine)
        comm.Allreduce(mine, slowest, op=MPI.MAX)
        return float(slowest)

    if comm.rank == 0:
        print("| bytes | Sendrecv warm (ms) | Sendrecv cold (ms) | Allreduce warm (ms) "
              "| Allreduce cold (ms) |\n|---|---|---|---|---|")  # fmt: skip
    for nbytes in SIZES:
        buf = np.zeros(nbytes // 4, dtype=np.float32)
        into = np.empty_like(buf)

        def sendrecv(buf: np.ndarray = buf, into: np.ndarray = into) -> None:
            comm.Sendrecv(buf, peer, 0, into, peer, 0)

        def allreduce(buf: np.ndarray = buf) -> None:
            comm.Allreduce(MPI.IN_PLACE, buf)

        found: dict[tuple[str, bool], list[float]] = {}
        for i in range(args.samples + 5):
            for name, call in (("sendrecv", sendrecv), ("allreduce", allreduce)):
                call()  # warm: the same call on the same buffers just before
                warm = timed(call)
                junk += 1.0  # cold: 64 MiB written since
                cold = timed(call)
                if i >= 5:
                    found.setdefault((name, False), []).append(warm)
                    found.setdefault((name, True), []).append(cold)
        if comm.rank == 0:
            ms = {k: statistics.median(v) * 1e3 for k, v in found.items()}
            print(f"| {nbytes:,} | {ms['sendrecv', False]:.3f} | {ms['sendrecv', True]:.3f} | "
                  f"{ms['allreduce', False]:.3f} | {ms['allreduce', True]:.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
