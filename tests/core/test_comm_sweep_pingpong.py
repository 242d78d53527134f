"""``d5 bench comm --collective pingpong`` on the rank side, without MPI: ranks are
threads of this process joined by queues. A sample is half of rank 0's round trip, the
bytes are each message's exactly as the communicator counts them, and the stored run
holds the fit."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from d5core.errors import CheckFailed, UsageError
from d5core.lv3 import comm_sweep
from d5core.lv3.comm_fit import load_fit
from d5core.lv3.comm_run import store_comm_run
from d5core.lv3.comm_sweep import (
    PINGPONG,
    SweepSettings,
    check_sweep,
    default_sizes,
    message_sizes,
    rank_sweep,
    sweep_rows,
)
from d5core.lv3.single_process import SingleProcessCommunicator
from d5core.results.store import ResultsStore


class Job:
    """What the threads of one job share: a mailbox per (source, dest), a barrier and a
    slot for broadcasts."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.barrier = threading.Barrier(size, timeout=30)
        self.boxes = {(s, d): queue.Queue() for s in range(size) for d in range(size)}
        self.slot: list[np.ndarray] = []
        self.pool: dict[int, np.ndarray] = {}


class ThreadRank(SingleProcessCommunicator):
    """One rank of a :class:`Job`; ``extra`` bytes are added to what it counts received
    (a communicator that counts wrong)."""

    name = "threads"

    def __init__(self, job: Job, rank: int, extra: int = 0) -> None:
        super().__init__()
        self.job, self._rank, self.extra = job, rank, extra

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self.job.size

    def barrier(self) -> None:
        self.job.barrier.wait()
        super().barrier()

    def broadcast(self, array: np.ndarray, root: int = 0) -> np.ndarray:
        if self.rank == root:
            self.job.slot[:] = [np.array(array, copy=True)]
        self.job.barrier.wait()
        out = np.array(self.job.slot[0], copy=True)
        self.job.barrier.wait()
        return out

    def allreduce(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        self.job.pool[self.rank] = np.array(array, copy=True)
        self.job.barrier.wait()
        stack = np.stack([self.job.pool[r] for r in range(self.size)])
        out = stack.max(axis=0) if op == "max" else stack.sum(axis=0)
        self.job.barrier.wait()
        return out

    def neighbor_exchange(
        self, array: np.ndarray, neighbors: Sequence[int]
    ) -> dict[int, np.ndarray]:
        t0 = time.perf_counter_ns()
        peers = sorted(set(neighbors))
        for k in peers:
            self.job.boxes[(self.rank, k)].put(np.array(array, copy=True))
        got = {k: self.job.boxes[(k, self.rank)].get(timeout=30) for k in peers}
        self._record("neighbor_exchange", array.nbytes * len(peers),
                     array.nbytes * len(peers), t0)  # fmt: skip
        return got

    def send(self, array: np.ndarray, dest: int, tag: int = 0) -> None:
        self.job.boxes[(self.rank, dest)].put(np.array(array, copy=True))
        self._record("send", array.nbytes, 0, time.perf_counter_ns())

    def recv_from(
        self, shape: Sequence[int] | int, dtype: Any, source: int = -1, tag: int = 0
    ) -> tuple[np.ndarray, int]:
        got = self.job.boxes[(source, self.rank)].get(timeout=30)
        self._record("recv", 0, got.nbytes + self.extra, time.perf_counter_ns())
        return got, source

    def raw_collective(self, name: str) -> Callable[[np.ndarray], Any] | None:
        if name != PINGPONG:
            return None
        boxes, rank = self.job.boxes, self.rank

        def round_trip(buf: np.ndarray) -> None:  # uncounted, as a library's own call
            if rank == 0:
                boxes[(0, 1)].put(buf.copy())
                buf[...] = boxes[(1, 0)].get(timeout=30)
            elif rank == 1:
                boxes[(1, 0)].put(boxes[(0, 1)].get(timeout=30))

        return round_trip


def _run_job(size: int, settings: SweepSettings, extra: dict[int, int] | None = None):
    """Every rank's ``rank_sweep`` result (or exception), by rank."""
    job = Job(size)
    ranks = [ThreadRank(job, r, (extra or {}).get(r, 0)) for r in range(size)]
    out: dict[int, Any] = {}

    def one(comm: ThreadRank) -> None:
        try:
            out[comm.rank] = (rank_sweep(comm, settings), comm.counters())
        except BaseException as exc:
            out[comm.rank] = exc
            job.barrier.abort()  # the others stop waiting for this rank

    threads = [threading.Thread(target=one, args=(c,)) for c in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


@pytest.fixture
def thread_clock(monkeypatch):
    """``comm_sweep``'s clock, per thread: rank 0's advances 1000 ns a reading, every
    other thread's 7000 ns, so that a sample shows whose clock it came from."""
    local = threading.local()

    def clock() -> int:
        step = 1000 if threading.current_thread().name == "rank-0" else 7000
        local.now = getattr(local, "now", 0) + step
        return local.now

    monkeypatch.setattr(comm_sweep, "_clock", clock)


def test_a_sample_is_half_of_rank_0s_round_trip(thread_clock):
    job = Job(2)
    ranks = [ThreadRank(job, r) for r in range(2)]
    out: dict[int, Any] = {}
    settings = SweepSettings(PINGPONG, (8, 64), samples=3)

    def one(comm: ThreadRank) -> None:
        out[comm.rank] = rank_sweep(comm, settings)

    threads = [threading.Thread(target=one, args=(c,), name=f"rank-{c.rank}") for c in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert out[0]["raw"] is True
    for mine, theirs in zip(out[0]["sizes"], out[1]["sizes"], strict=True):
        # rank 0's clock: 1000 ns a round trip, 500 ns one way (not rank 1's 3500)
        assert mine["samples"] == theirs["samples"] == {"d5": [500e-9] * 3,
                                                        "raw": [500e-9] * 3}  # fmt: skip
        # the exchange: the slower rank's time, rank 1's 7000 ns, on every rank
        assert mine["exchange"] == theirs["exchange"] == [7000e-9] * 3
        # the reduction: rank 0's own time; other ranks keep none
        assert (mine["reduce"], theirs["reduce"]) == ([1000e-9] * 3, [])


def test_each_message_moves_and_counts_its_bytes_and_idle_ranks_wait():
    sizes = (8, 4096, 1 << 16)
    settings = SweepSettings(PINGPONG, sizes, samples=4)
    out = _run_job(3, settings)
    results = {r: out[r][0] for r in range(3)}
    for r in range(3):
        for size in results[r]["sizes"]:
            assert bool(size.pop("reduce")) is (r == 0)  # rank 0's alone
    assert results[0] == results[1] == results[2]
    assert [s["bytes"] for s in results[0]["sizes"]] == list(sizes)
    rounds = comm_sweep._WARMUP + 4
    for rank in (0, 1):
        counters = out[rank][1]
        assert counters["calls"]["send"] == counters["calls"]["recv"] == rounds * len(sizes)
    for rank in (0, 1):  # each size's messages, there and back, then its exchanges
        counters = out[rank][1]
        assert counters["calls"]["neighbor_exchange"] == rounds * len(sizes)
        assert counters["bytes_sent"] == counters["bytes_received"] == 2 * rounds * sum(sizes)
    assert "send" not in out[2][1]["calls"]  # rank 2 only met the barriers
    assert "neighbor_exchange" not in out[2][1]["calls"]
    for size in results[0]["sizes"]:
        assert all(v > 0 for impl in ("d5", "raw") for v in size["samples"][impl])


def test_a_communicator_that_miscounts_point_to_point_bytes_fails_the_sweep():
    out = _run_job(2, SweepSettings(PINGPONG, (64,), samples=3), extra={1: 4})
    assert isinstance(out[1], CheckFailed)
    assert "rank 1: the communicator counted" in str(out[1])
    messages = comm_sweep._WARMUP + 3
    assert f"for {messages} messages of 64 bytes ({messages * 64} expected)" in str(out[1])


def test_rows_give_the_one_way_bandwidth_and_the_run_stores_the_fit(tmp_path):
    sizes = [8 << (2 * k) for k in range(8)]
    result = {
        "ranks": 2, "communicator": "threads", "raw": False,
        "sizes": [{"bytes": m, "samples": {"d5": [2e-6 + m / 4e9] * 3}} for m in sizes],
    }  # fmt: skip
    rows = sweep_rows(result, PINGPONG)
    assert rows[-1]["algbw"] == pytest.approx(sizes[-1] / (2e-6 + sizes[-1] / 4e9) / 1e9)
    assert rows[-1]["busbw"] == rows[-1]["algbw"]
    settings = SweepSettings(PINGPONG, tuple(sizes), 3)
    db = tmp_path / "r.sqlite"
    with ResultsStore.open(db) as store:
        run = store_comm_run(store, [result], settings, communicator="threads",
                             link_peak=None, tags=(), launcher="threads")  # fmt: skip
        config = store.get_run(run.run_id).config
    assert run.fit is not None and run.fit.run_id == run.run_id
    assert run.fit.latency_s == pytest.approx(2e-6) and run.fit.bandwidth_gbps == pytest.approx(4)
    assert config["fit"]["latency_s"] == run.fit.latency_s
    assert "half of rank 0's round trip" in config["synchronisation"]
    assert load_fit(run.run_id, db) == run.fit


def test_the_ping_pong_sweeps_8_bytes_to_64_mib_doubling():
    low, high, factor = default_sizes(PINGPONG)
    sizes = message_sizes(low, high, factor)
    assert (sizes[0], sizes[-1], len(sizes)) == (8, 64 << 20, 24)
    assert default_sizes("allreduce") == (1 << 10, 4 << 20, 4)
    assert check_sweep(PINGPONG) == PINGPONG
    with pytest.raises(UsageError, match="choose one of allreduce, broadcast, allgather, pingpong"):
        check_sweep("alltoall")


def test_the_reduction_is_timed_with_the_librarys_own_kernel_when_it_offers_one():
    """An allreduce adds with its library's kernel, not numpy's: the reduction series
    calls ``raw_collective("reduce_local")`` for every sample, warm-up included."""
    calls: list[int] = []

    class WithKernel(ThreadRank):
        def raw_collective(self, name: str) -> Callable[[np.ndarray], Any] | None:
            if name == "reduce_local":
                return lambda buf: calls.append(buf.nbytes)
            return super().raw_collective(name)

    job = Job(2)
    ranks = [WithKernel(job, r) for r in range(2)]
    out: dict[int, Any] = {}
    settings = SweepSettings(PINGPONG, (64, 4096), samples=3)

    def one(comm: ThreadRank) -> None:
        out[comm.rank] = rank_sweep(comm, settings)

    threads = [threading.Thread(target=one, args=(c,)) for c in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    rounds = comm_sweep._WARMUP + 3
    assert calls == [64] * rounds + [4096] * rounds  # rank 0's alone
    assert [len(s["reduce"]) for s in out[0]["sizes"]] == [3, 3]
