"""Run by test_comm.py as one of N processes (RANK, WORLD_SIZE, MASTER_* set): exercises
GlooCommunicator, writes what it saw as JSON."""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
from d5_plugin_torchdist.comm import GlooCommunicator

from d5core.api import ANY_SOURCE, ANY_TAG, COMM_CALL, Event, MetricBus, use_bus


def main(out_dir: str) -> None:
    comm = GlooCommunicator()
    r, n = comm.rank, comm.size
    rng = np.random.default_rng(100 + r)
    x = rng.standard_normal(10).astype(np.float64)  # 10 not divisible by 4: uneven chunks
    x_before = x.copy()
    res: dict[str, Any] = {"rank": r, "size": n, "x": x.tolist()}
    counts: dict[str, Any] = {}

    def snap(name: str) -> None:
        c = comm.counters()
        counts[name] = [c["bytes_sent"], c["bytes_received"]]
        comm.reset_counters()

    events: list[Event] = []
    bus = MetricBus()
    bus.subscribe(COMM_CALL, events.append)
    with use_bus(bus):
        comm.reset_counters()
        res["allreduce"] = comm.allreduce(x).tolist()
        snap("allreduce")
        res["allreduce_max"] = comm.allreduce(x, op="max").tolist()
        snap("allreduce_max")
        small = np.array([r + 1, 2], dtype=np.int8)
        res["allreduce_prod_i8"] = comm.allreduce(small, "prod").tolist()
        snap("allreduce_prod_i8")
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
        res["allgather_2d"] = [a.tolist() for a in comm.allgather(np.full((2, r + 1), r, np.int16))]
        snap("allgather_2d")
        res["reduce_scatter"] = comm.reduce_scatter(x).tolist()
        snap("reduce_scatter")
        res["reduce_scatter_even"] = comm.reduce_scatter(np.ones(4 * n, np.float32)).tolist()
        snap("reduce_scatter_even")
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
                frozen = np.full(3, r, dtype=np.float32)
                frozen.flags.writeable = False  # a read-only array is sent as it is
                comm.send(frozen, 0, tag=7)
                if r == 1:
                    comm.isend(np.array([4, 5], dtype=np.int16), 0, tag=9).wait()
            snap("p2p")
        comm.barrier()
        res["calls_after_barrier"] = comm.counters()["calls"]
        res["comm_seconds"] = comm.comm_seconds
    res["input_unchanged"] = bool(np.array_equal(x, x_before))
    try:
        comm.recv(1, np.float32, 0, tag=ANY_TAG)
        res["any_tag"] = "accepted"
    except ValueError as exc:
        res["any_tag"] = str(exc)
    raw = comm.raw_collective("allreduce")
    buf = np.full(5, r + 1, dtype=np.float32)
    assert raw is not None
    raw(buf)
    res["raw_allreduce"] = buf.tolist()
    bcast = comm.raw_collective("broadcast")
    assert bcast is not None
    buf = np.full(3, r, dtype=np.float32)
    bcast(buf)
    res["raw_broadcast"] = buf.tolist()
    gather = comm.raw_collective("allgather")
    assert gather is not None
    res["raw_allgather"] = gather(np.full(2, r, dtype=np.float32)).tolist()
    res["raw_other"] = comm.raw_collective("gather") is None
    res["counts"] = counts
    res["events"] = [
        {k: e.payload[k] for k in ("op", "bytes_sent", "bytes_received", "duration_ns", "rank")}
        | {"level": e.level}
        for e in events
    ]
    with open(f"{out_dir}/rank{r}.json", "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main(sys.argv[1])
