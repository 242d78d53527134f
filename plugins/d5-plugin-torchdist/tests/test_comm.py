"""GlooCommunicator on 1, 2 and 3 ranks (processes started with RANK, WORLD_SIZE and
MASTER_* set, as torchrun sets them): results against numpy, byte counts against the
convention d5-plugin-mpi counts by, COMM_CALL events, the raw baseline."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from d5core.api import chunk_counts, collective_bytes

WORKER = Path(__file__).with_name("_comm_worker.py")
TIMEOUT_S = 120
#: The shape header every rank sends in a gather/allgather: 16 int64.
HEADER = 128


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_environment(rank: int, size: int, port: int) -> dict[str, str]:
    """This environment without any launcher's variables, plus torch's for one rank."""
    drop = ("PMI_", "OMPI_", "SLURM_", "TORCHELASTIC_", "D5_TEST_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    if size > 1:
        env.update(RANK=str(rank), WORLD_SIZE=str(size), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))  # fmt: skip
    return env


def run_ranks(n: int, tmp: Path) -> list[dict[str, Any]]:
    port = free_port()
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), str(tmp)], env=rank_environment(r, n, port),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in range(n)
    ]  # fmt: skip
    errors = []
    for proc in procs:
        _, err = proc.communicate(timeout=TIMEOUT_S)
        if proc.returncode != 0:
            errors.append(err[-2000:])
    assert not errors, errors
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(n)]


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda n: f"{n}ranks")
def ranks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    n = request.param
    res = run_ranks(n, tmp_path_factory.mktemp(f"n{n}"))
    assert [d["rank"] for d in res] == list(range(n)) and all(d["size"] == n for d in res)
    return res


def test_collectives_match_numpy(ranks: list[dict[str, Any]]) -> None:
    n = len(ranks)
    xs = np.array([d["x"] for d in ranks])
    for d in ranks:
        np.testing.assert_allclose(d["allreduce"], xs.sum(0))
        np.testing.assert_allclose(d["allreduce_inplace"], xs.sum(0))
        np.testing.assert_array_equal(d["allreduce_max"], xs.max(0))
        assert d["allreduce_prod_i8"] == [int(np.prod(range(1, n + 1))), 2**n]
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
        assert d["allgather_2d"] == [[[r] * (r + 1)] * 2 for r in range(n)]
        np.testing.assert_array_equal(d["allgather_eq"], xs[:, :4])
        counts = chunk_counts(xs.shape[1], n)
        start = sum(counts[: d["rank"]])
        np.testing.assert_allclose(
            d["reduce_scatter"], xs.sum(0)[start : start + counts[d["rank"]]]
        )
        assert d["reduce_scatter_even"] == [float(n)] * 4
        assert d["input_unchanged"] is True


def test_ring_exchange(ranks: list[dict[str, Any]]) -> None:
    n = len(ranks)
    for d in ranks:
        r = d["rank"]
        left, right = (r - 1) % n, (r + 1) % n
        assert d["ring"] == [left, right]
        assert d["exchange"] == {str(k): [k, 10 * k] for k in {left, right}}


def test_point_to_point_with_any_source(ranks: list[dict[str, Any]]) -> None:
    n = len(ranks)
    if n == 1:  # alone, the rank sends and receives nothing
        assert "senders" not in ranks[0] and "p2p" not in ranks[0]["counts"]
        return
    assert ranks[0]["senders"] == list(range(1, n))
    assert ranks[0]["recv_any"] == [[float(r)] * 3 for r in range(1, n)]
    assert ranks[0]["irecv"] == [4, 5]


def test_byte_counts_are_those_of_the_mpi_convention(ranks: list[dict[str, Any]]) -> None:
    n = len(ranks)
    for d in ranks:
        r, c = d["rank"], d["counts"]
        b = 10 * 8
        for name in ("allreduce", "allreduce_max", "allreduce_inplace"):
            assert c[name] == list(collective_bytes("allreduce", b, n, r))
        assert c["allreduce_prod_i8"] == list(collective_bytes("allreduce", 2, n, r))
        assert c["allreduce_inplace_f"] == list(collective_bytes("allreduce", 24, n, r))
        assert c["reduce"] == list(collective_bytes("reduce", b, n, r, root=n - 1))
        assert c["broadcast"] == list(collective_bytes("broadcast", b, n, r, root=n - 1))
        assert c["reduce_scatter"] == list(collective_bytes("reduce_scatter", b, n, r))
        assert c["reduce_scatter_even"] == list(collective_bytes("reduce_scatter", 16 * n, n, r))
        h = HEADER * (n - 1)
        assert c["allgather_eq"] == [h + (n - 1) * 32, h + (n - 1) * 32]
        others = sum(4 * (k + 1) for k in range(n) if k != r)
        assert c["allgather"] == [h + (n - 1) * 4 * (r + 1), h + others]
        others_2d = sum(4 * (k + 1) for k in range(n) if k != r)  # 2 x (k+1) int16
        assert c["allgather_2d"] == [h + (n - 1) * 4 * (r + 1), h + others_2d]
        if n == 1:
            assert c["gather"] == [0, 0]
        else:
            assert c["gather"] == ([0, h + others] if r == 0 else [HEADER + 4 * (r + 1), 0])
        peers = len({(r - 1) % n, (r + 1) % n} - {r})
        assert c["exchange"] == [16 * peers, 16 * peers]
        if n > 1:
            expect = [0, 12 * (n - 1) + 4] if r == 0 else [12 + (4 if r == 1 else 0), 0]
            assert c["p2p"] == expect
    for name in ranks[0]["counts"]:  # what all ranks send is what all ranks receive
        assert sum(d["counts"][name][0] for d in ranks) == sum(
            d["counts"][name][1] for d in ranks
        ), name


def test_events_carry_the_counted_bytes(ranks: list[dict[str, Any]]) -> None:
    for d in ranks:
        ev = d["events"]
        assert all(e["level"] == 3 and e["rank"] == d["rank"] for e in ev)
        assert all(e["duration_ns"] >= 0 for e in ev)
        assert sum(e["bytes_sent"] for e in ev) == sum(v[0] for v in d["counts"].values())
        assert sum(e["bytes_received"] for e in ev) == sum(v[1] for v in d["counts"].values())
        assert ev[0]["op"] == "allreduce" and ev[-1]["op"] == "barrier"
        assert d["calls_after_barrier"] == {"barrier": 1}
        assert d["comm_seconds"] >= 0


def test_the_raw_baseline_is_torch_distributed_own_calls(ranks: list[dict[str, Any]]) -> None:
    n = len(ranks)
    for d in ranks:
        assert d["raw_allreduce"] == [float(n * (n + 1) // 2)] * 5
        assert d["raw_broadcast"] == [0.0] * 3
        assert d["raw_allgather"] == [[float(r)] * 2 for r in range(n)]
        assert d["raw_other"] is True


def test_receiving_any_tag_is_refused_in_one_line(ranks: list[dict[str, Any]]) -> None:
    for d in ranks:
        assert "ANY_TAG" in d["any_tag"] and "\n" not in d["any_tag"]
