"""MPICommunicator under ``mpiexec -n 2`` and ``-n 4``: results against numpy, byte counts
against the documented convention, COMM_CALL events; plus a 1-rank run without mpiexec."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from d5_plugin_mpi import launch

from d5core.api import chunk_counts, collective_bytes

WORKER = Path(__file__).with_name("_comm_worker.py")
TIMEOUT_S = 60
#: The shape header every rank sends in a gather/allgather: 16 int64.
HEADER = 128
#: The collective convention of each mpi4py method (point to point: exact bytes).
CONVENTION = {
    "Allreduce": "allreduce", "Reduce": "reduce", "Bcast": "broadcast",
    "Gather": "gather", "Gatherv": "gather", "Allgather": "allgather",
    "Allgatherv": "allgather", "Reduce_scatter": "reduce_scatter",
    "Reduce_scatter_block": "reduce_scatter",
}  # fmt: skip


def run_ranks(n: int, tmp: Path) -> list[dict[str, Any]]:
    """Run the worker on ``n`` ranks (``n == 0``: plain python, no mpiexec)."""
    argv = [sys.executable, str(WORKER), str(tmp)]
    cmd = launch.build_command(n, argv) if n else argv
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    files = sorted(tmp.glob("rank*.json"))
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(len(files))]


@pytest.fixture(scope="module", params=[1, 2, 4], ids=lambda n: f"{n}ranks")
def ranks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    try:
        launch.mpiexec_path()
    except Exception as exc:
        pytest.skip(str(exc))
    n = request.param
    res = run_ranks(0 if n == 1 else n, tmp_path_factory.mktemp(f"n{n}"))
    assert len(res) == n and [d["rank"] for d in res] == list(range(n))
    assert all(d["size"] == n for d in res)
    return res


def test_collectives_match_numpy(ranks: list[dict[str, Any]]) -> None:
    n = len(ranks)
    xs = np.array([d["x"] for d in ranks])
    for d in ranks:
        np.testing.assert_allclose(d["allreduce"], xs.sum(0))
        np.testing.assert_allclose(d["allreduce_inplace"], xs.sum(0))
        np.testing.assert_array_equal(d["allreduce_max"], xs.max(0))
        f = np.arange(6, dtype=np.float32).reshape(2, 3) * sum(range(1, n + 1))
        np.testing.assert_array_equal(d["allreduce_inplace_f"], f)
        np.testing.assert_array_equal(d["broadcast"], xs[n - 1])
        if d["rank"] == n - 1:
            np.testing.assert_allclose(d["reduce"], xs.sum(0))
        else:
            assert d["reduce"] is None
        pieces = [[r] * (r + 1) for r in range(n)]
        assert d["gather"] == (pieces if d["rank"] == 0 else None)
        assert d["allgather"] == pieces
        np.testing.assert_array_equal(d["allgather_eq"], xs[:, :4])
        counts = chunk_counts(xs.shape[1], n)
        start = sum(counts[: d["rank"]])
        np.testing.assert_allclose(
            d["reduce_scatter"], xs.sum(0)[start : start + counts[d["rank"]]]
        )


def test_ring_exchange(ranks: list[dict[str, Any]]) -> None:
    n = len(ranks)
    for d in ranks:
        r = d["rank"]
        left, right = (r - 1) % n, (r + 1) % n
        assert d["ring"] == [left, right]
        assert d["exchange"] == {str(k): [k, 10 * k] for k in {left, right}}


def test_point_to_point(ranks: list[dict[str, Any]]) -> None:
    n = len(ranks)
    if n == 1:
        pytest.skip("needs two ranks")
    assert ranks[0]["senders"] == list(range(1, n))
    assert ranks[0]["recv_any"] == [[float(r)] * 3 for r in range(1, n)]
    assert ranks[0]["irecv"] == [4, 5]


def test_byte_counts_follow_convention(ranks: list[dict[str, Any]]) -> None:
    n = len(ranks)
    for d in ranks:
        r, c = d["rank"], d["counts"]
        b = 10 * 8
        for name in ("allreduce", "allreduce_max", "allreduce_inplace"):
            assert c[name] == list(collective_bytes("allreduce", b, n, r))
        assert c["allreduce_inplace_f"] == list(collective_bytes("allreduce", 24, n, r))
        assert c["reduce"] == list(collective_bytes("reduce", b, n, r, root=n - 1))
        assert c["broadcast"] == list(collective_bytes("broadcast", b, n, r, root=n - 1))
        assert c["reduce_scatter"] == list(collective_bytes("reduce_scatter", b, n, r))
        h = HEADER * (n - 1)
        assert c["allgather_eq"] == [h + (n - 1) * 32, h + (n - 1) * 32]
        others = sum(4 * (k + 1) for k in range(n) if k != r)
        assert c["allgather"] == [h + (n - 1) * 4 * (r + 1), h + others]
        if n == 1:
            assert c["gather"] == [0, 0]
        else:
            assert c["gather"] == ([0, h + others] if r == 0 else [HEADER + 4 * (r + 1), 0])
        peers = len({(r - 1) % n, (r + 1) % n} - {r})
        assert c["exchange"] == [16 * peers, 16 * peers]
        if n > 1:
            expect = [0, 12 * (n - 1) + 4] if r == 0 else [12 + (4 if r == 1 else 0), 0]
            assert c["p2p"] == expect
    # Conservation: what all ranks send is what all ranks receive.
    for name in ranks[0]["counts"]:
        assert sum(d["counts"][name][0] for d in ranks) == sum(
            d["counts"][name][1] for d in ranks
        ), name


def _sent_to_mpi(calls: list[list[Any]], n: int, rank: int) -> int:
    """What a rank handed MPI to send in ``calls``, by the byte-count convention."""
    sent = 0
    for method, nbytes, root in calls:
        if method in ("Send", "Isend"):
            sent += nbytes
        elif method in CONVENTION:
            sent += collective_bytes(CONVENTION[method], nbytes, n, rank, root)[0]
    return sent


def test_every_byte_handed_to_mpi_is_counted(ranks: list[dict[str, Any]]) -> None:
    """The counters miss nothing a call gives MPI, the gathers' shape headers included."""
    n = len(ranks)
    for d in ranks:
        assert set(d["mpi_calls"]) == set(d["counts"])
        for name, calls in d["mpi_calls"].items():
            assert d["counts"][name][0] == _sent_to_mpi(calls, n, d["rank"]), (name, calls)
        if n > 1:
            assert ["Allgather", HEADER, 0] in d["mpi_calls"]["allgather"]


def test_formulas() -> None:
    assert collective_bytes("allreduce", 1000, 4, 0) == (1500, 1500)
    assert collective_bytes("reduce_scatter", 1000, 4, 2) == (750, 750)
    assert collective_bytes("allgather", 1000, 4, 1) == (3000, 3000)
    assert collective_bytes("broadcast", 1000, 4, 0) == (3000, 0)
    assert collective_bytes("broadcast", 1000, 4, 3) == (0, 1000)
    assert collective_bytes("reduce", 1000, 4, 0) == (0, 3000)
    assert collective_bytes("allreduce", 1000, 1, 0) == (0, 0)


def test_events_carry_bytes(ranks: list[dict[str, Any]]) -> None:
    for d in ranks:
        ev = d["events"]
        assert all(e["level"] == 3 and e["rank"] == d["rank"] for e in ev)
        assert all(e["duration_ns"] >= 0 for e in ev)
        total_sent = sum(e["bytes_sent"] for e in ev)
        assert total_sent == sum(v[0] for v in d["counts"].values())
        assert sum(e["bytes_received"] for e in ev) == sum(v[1] for v in d["counts"].values())
        assert ev[0]["op"] == "allreduce"
        assert ev[-1]["op"] == "barrier"
        assert d["calls_after_barrier"] == {"barrier": 1}
        assert d["comm_seconds"] >= 0
