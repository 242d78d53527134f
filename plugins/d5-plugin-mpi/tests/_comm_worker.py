"""Run by test_comm.py under ``mpiexec -n N``: exercises MPICommunicator, writes JSON."""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
from d5_plugin_mpi.comm import MPICommunicator
from mpi4py import MPI

from d5core.api import ANY_SOURCE, COMM_CALL, Event, MetricBus, use_bus

#: The mpi4py methods that move data; what the spy notes for each call.
SPIED = (
    "Allreduce", "Reduce", "Bcast", "Gather", "Gatherv", "Allgather", "Allgatherv",
    "Reduce_scatter", "Reduce_scatter_block", "Send", "Isend", "Recv", "Irecv", "Barrier",
)  # fmt: skip


class SpyComm:
    """``MPI.COMM_WORLD`` that notes ``[method, bytes of the send buffer, root]`` for every
    call that moves data, so that the test can check the counts against what MPI was given."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[list[Any]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in SPIED:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            buf = args[0] if args else kwargs.get("sendbuf", kwargs.get("buf"))
            if buf is MPI.IN_PLACE:
                buf = args[1]
            nbytes = buf.nbytes if isinstance(buf, np.ndarray) else 0
            self.calls.append([name, nbytes, kwargs.get("root", 0)])
            return attr(*args, **kwargs)

        return call


def main(out_dir: str) -> None:
    spy = SpyComm(MPI.COMM_WORLD)
    comm = MPICommunicator(spy)  # type: ignore[arg-type]
    r, n = comm.rank, comm.size
    rng = np.random.default_rng(100 + r)
    x = rng.standard_normal(10).astype(np.float64)  # 10 not divisible by 4: uneven chunks
    res: dict[str, Any] = {"rank": r, "size": n, "x": x.tolist()}
    counts: dict[str, Any] = {}
    mpi_calls: dict[str, Any] = {}

    def snap(name: str) -> None:
        c = comm.counters()
        counts[name] = [c["bytes_sent"], c["bytes_received"]]
        comm.reset_counters()
        mpi_calls[name] = spy.calls
        spy.calls = []

    events: list[Event] = []
    bus = MetricBus()
    bus.subscribe(COMM_CALL, events.append)
    with use_bus(bus):
        comm.reset_counters()
        spy.calls = []
        res["allreduce"] = comm.allreduce(x).tolist()
        snap("allreduce")
        res["allreduce_max"] = comm.allreduce(x, op="max").tolist()
        snap("allreduce_max")
        y = x.copy()
        comm.allreduce_inplace(y)
        res["allreduce_inplace"] = y.tolist()
        snap("allreduce_inplace")
        z = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3) * (r + 1))
        comm.allreduce_inplace(z)
        res["allreduce_inplace_f"] = z.tolist()
        snap("allreduce_inplace_f")
        red = comm.reduce(x, root=n - 1)
        res["reduce"] = None if red is None else red.tolist()
        snap("reduce")
        res["broadcast"] = comm.broadcast(x, root=n - 1).tolist()
        snap("broadcast")
        piece = np.full(r + 1, r, dtype=np.int32)  # different sizes per rank
        g = comm.gather(piece, root=0)
        res["gather"] = None if g is None else [a.tolist() for a in g]
        snap("gather")
        res["allgather"] = [a.tolist() for a in comm.allgather(piece)]
        snap("allgather")
        res["allgather_eq"] = [a.tolist() for a in comm.allgather(x[:4])]
        snap("allgather_eq")
        res["reduce_scatter"] = comm.reduce_scatter(x).tolist()
        snap("reduce_scatter")
        ring = comm.ring_neighbors()
        res["ring"] = ring
        ex = comm.neighbor_exchange(np.array([r, r * 10], dtype=np.int64), ring)
        res["exchange"] = {str(k): v.tolist() for k, v in ex.items()}
        snap("exchange")
        if n > 1:
            if r == 0:
                got = []
                for _ in range(n - 1):
                    arr, sender = comm.recv_from(3, np.float32, ANY_SOURCE, tag=7)
                    got.append((sender, arr.tolist()))
                got.sort()
                res["senders"] = [sender for sender, _ in got]
                res["recv_any"] = [v for _, v in got]
                req = comm.irecv((2,), np.int16, source=1, tag=9)
                res["irecv"] = req.wait().tolist()
            else:
                comm.send(np.full(3, r, dtype=np.float32), 0, tag=7)
                if r == 1:
                    comm.isend(np.array([4, 5], dtype=np.int16), 0, tag=9).wait()
            snap("p2p")
        comm.barrier()
        res["calls_after_barrier"] = comm.counters()["calls"]
        res["comm_seconds"] = comm.comm_seconds
    res["counts"] = counts
    res["mpi_calls"] = mpi_calls
    res["events"] = [
        {k: e.payload[k] for k in ("op", "bytes_sent", "bytes_received", "duration_ns", "rank")}
        | {"level": e.level}
        for e in events
    ]
    with open(f"{out_dir}/rank{r}.json", "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main(sys.argv[1])
