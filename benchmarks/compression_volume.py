"""Communication volume of the compressed ``allreduce`` scheme against a plain allreduce.

For the models of two recipes (digits-mlp's MLP, synthetic-cnn's LeNet-5, float32), on 2
and 4 ranks, takes a few steps of the ``allreduce`` scheme with random gradients, plain
and with each compressor, and reports per step and rank:

- the bytes d5's communicator counted (``comm.counters()``),
- the bytes handed to MPI, noted independently by wrapping ``MPI.COMM_WORLD`` (every
  buffer given to mpi4py, by the same byte-count convention),
- the payload alone (``payload_nbytes``: what d5 counted before the 128-byte shape header
  of each allgather was taken in),
- the saving against the plain allreduce, true (counted) and payload-only.

Launches itself under ``mpiexec`` (once per rank count) unless already under a launcher:

    .venv/bin/python benchmarks/compression_volume.py [--ranks 2,4] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

import numpy as np
from _machine import load, machine
from d5_plugin_mpi.launch import build_command, under_launcher

from d5core.levels.distributed import collective_bytes

STEPS = 5
MODELS: dict[str, dict[str, Any]] = {
    "digits MLP": {"name": "mlp", "hidden": [64], "input_shape": (64,), "classes": 10},
    "LeNet-5": {"name": "lenet5", "input_shape": (1, 28, 28), "classes": 4},
}
COMPRESSIONS: dict[str, Any] = {
    "none": None,
    "topk 1%": {"name": "topk", "ratio": 0.01},
    "topk 10%": {"name": "topk", "ratio": 0.1},
    "qsgd 8 bits": {"name": "qsgd", "bits": 8},
    "sign": {"name": "sign"},
}
#: The collective convention of each mpi4py method that moves data.
CONVENTION = {
    "Allreduce": "allreduce", "Reduce": "reduce", "Bcast": "broadcast", "Gather": "gather",
    "Gatherv": "gather", "Allgather": "allgather", "Allgatherv": "allgather",
    "Reduce_scatter": "reduce_scatter", "Reduce_scatter_block": "reduce_scatter",
}  # fmt: skip


class SpyComm:
    """``MPI.COMM_WORLD`` adding up, by the convention, what every call gives MPI to send."""

    def __init__(self, inner: Any, in_place: Any) -> None:
        self.inner, self.in_place, self.sent = inner, in_place, 0
        self.rank, self.size = inner.Get_rank(), inner.Get_size()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in CONVENTION and name not in ("Send", "Isend"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            buf = args[1] if args[0] is self.in_place else args[0]
            nbytes = buf.nbytes if isinstance(buf, np.ndarray) else 0
            if name in CONVENTION:
                root = kwargs.get("root", 0)
                nbytes = collective_bytes(CONVENTION[name], nbytes, self.size, self.rank, root)[0]
            self.sent += nbytes
            return attr(*args, **kwargs)

        return call


def _payload_only(opt: Any, sizes: dict[str, int], item: int) -> int:
    """What one step sends by the payload alone (no shape headers), for this rank."""
    if opt.compression is None:
        return int(opt.expected_bytes(sizes, 1, itemsize=item)[0])
    comm = opt.comm
    return sum(
        collective_bytes("allgather", nbytes, comm.size, comm.rank)[0]
        for size in sizes.values()
        for nbytes in opt.compression.payload_nbytes(size, item)
    )


def worker() -> list[dict[str, Any]]:
    from d5_plugin_mpi.comm import MPICommunicator
    from d5_plugin_mpi.schemes import make_distributed
    from mpi4py import MPI

    from d5core.lv1.runner import load_model
    from d5core.plugins import get_plugin_manager

    spy = SpyComm(MPI.COMM_WORLD, MPI.IN_PLACE)
    comm = MPICommunicator(spy)  # type: ignore[arg-type]
    sgd = get_plugin_manager().load("d5.optimizers", "sgd")
    rows: list[dict[str, Any]] = []
    for model, spec in MODELS.items():
        options = {k: v for k, v in spec.items() if k != "name"}
        net = load_model(spec["name"], seed=0, **options)
        start = {k: np.asarray(v, dtype=np.float32) for k, v in net.parameters.items()}
        sizes = {k: int(v.size) for k, v in start.items()}
        for label, compression in COMPRESSIONS.items():
            opt = make_distributed("allreduce", sgd(lr=0.01), comm, compression=compression)
            params = {k: v.copy() for k, v in start.items()}
            comm.barrier()
            comm.reset_counters()
            spy.sent = 0
            for t in range(STEPS):
                rng = np.random.default_rng([comm.rank, t])
                opt.step(params, {k: rng.standard_normal(v.shape).astype(np.float32)
                                  for k, v in params.items()})  # fmt: skip
            counted = comm.counters()["bytes_sent"] / STEPS
            rows.append({
                "ranks": comm.size, "model": model, "parameters": sum(sizes.values()),
                "tensors": len(sizes), "compression": label, "counted_B": counted,
                "handed_to_mpi_B": spy.sent / STEPS,
                "expected_B": opt.expected_bytes(sizes, 1, itemsize=4)[0],
                "payload_only_B": _payload_only(opt, sizes, 4),
            })  # fmt: skip
    for row in rows:
        plain = next(r for r in rows if r["model"] == row["model"] and r["compression"] == "none")
        row["saving"] = plain["counted_B"] / row["counted_B"]
        row["payload_only_saving"] = plain["payload_only_B"] / row["payload_only_B"]
    return rows if comm.rank == 0 else []


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| ranks | model | compression | counted (B/step) | handed to MPI (B/step) | "
        "payload only (B/step) | counted / payload only | saving vs allreduce | "
        "payload-only saving |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['ranks']} | {r['model']} ({r['parameters']:,} in {r['tensors']} tensors) | "
            f"{r['compression']} | {r['counted_B']:,.0f} | {r['handed_to_mpi_B']:,.0f} | "
            f"{r['payload_only_B']:,} | {r['counted_B'] / r['payload_only_B']:.2f} | "
            f"{r['saving']:.1f}× | {r['payload_only_saving']:.1f}× |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4", help="comma-separated rank counts")
    parser.add_argument("--json", action="store_true", help="print JSON rows, not a table")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker or under_launcher():
        rows = worker()
        if rows:
            print(json.dumps(rows))
        return 0
    all_rows: list[dict[str, Any]] = []
    for n in (int(s) for s in args.ranks.split(",")):
        argv = [sys.executable, __file__, "--worker"]
        out = subprocess.run(
            build_command(n, argv), capture_output=True, text=True, timeout=600, check=False
        )
        if out.returncode != 0:
            print(f"mpiexec -n {n} failed: {out.stderr.strip()[-500:]}", file=sys.stderr)
            return 1
        all_rows.extend(json.loads(out.stdout.strip().splitlines()[-1]))
    bad = [r for r in all_rows if not r["counted_B"] == r["handed_to_mpi_B"] == r["expected_B"]]
    where = f"{machine()}; {load()}"
    if args.json:
        print(json.dumps({"machine": where, "rows": all_rows}, indent=2))
    else:
        print(f"machine: {where}")
        print(f"float32 gradients, allreduce scheme, {STEPS} steps; rank 0's bytes sent\n")
        print(table(all_rows))
    if bad:
        print(f"{len(bad)} rows where counted, handed to MPI and expected differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
