"""Each scheme's communication cost model: its bytes are the bytes the scheme sends (as
``expected_bytes`` counts them), its formulas give hand-computed figures, and bad
options are one-line errors."""

from __future__ import annotations

import math
from typing import Any

import pytest
from d5_plugin_mpi import schemes
from d5_plugin_mpi.schemes._cost import HEADER_NBYTES, allgather_rounds, allreduce_rounds

from d5core.api import CommCost, UsageError, get_plugin_manager
from d5core.testing.training import SingleProcessCommunicator

L, G = 2e-6, 1e-9
COMPRESSIONS: list[Any] = [
    None,
    {"name": "topk", "ratio": 0.01},
    {"name": "topk", "ratio": 0.3},
    {"name": "qsgd", "bits": 4},
    {"name": "qsgd", "bits": 12},
    {"name": "sign"},
]
SPLITS: list[dict[str, int]] = [
    {"w": 1},
    {"w": 3, "b": 2},
    {"conv": 150, "fc": 4000, "b": 10, "bn": 7},
    {"big": 300_001},
]


class PlannedRank(SingleProcessCommunicator):
    """Rank ``rank`` of ``size``, for asking a scheme what it would send (sends nothing)."""

    shape_header_nbytes = HEADER_NBYTES

    def __init__(self, rank: int, size: int) -> None:
        super().__init__()
        self._rank, self._size = rank, size

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size


def sgd() -> Any:
    return get_plugin_manager().load("d5.optimizers", "sgd")(lr=0.1)


def cost(name: str, ranks: int, params: Any, itemsize: int = 4, **options: Any) -> CommCost:
    result = schemes.SCHEMES[name].communication_cost(
        ranks=ranks, params=params, itemsize=itemsize, latency_s=L, seconds_per_byte=G,
        options=options,
    )  # fmt: skip
    assert result is not None
    return result


def busiest_sent(name: str, ranks: int, sizes: dict[str, int], steps: int, **options: Any) -> int:
    """The most bytes any rank sends in ``steps`` steps, by ``expected_bytes``."""
    return max(
        schemes.make_distributed(name, sgd(), PlannedRank(r, ranks), **options).expected_bytes(
            sizes, steps, itemsize=4
        )[0]
        for r in range(ranks)
    )


def test_the_header_the_model_counts_is_the_communicators() -> None:
    from d5_plugin_mpi.comm import SHAPE_HEADER_NBYTES

    assert HEADER_NBYTES == SHAPE_HEADER_NBYTES


@pytest.mark.parametrize("ranks", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("sizes", SPLITS, ids=lambda s: f"{len(s)}x{sum(s.values())}")
@pytest.mark.parametrize("compression", COMPRESSIONS, ids=str)
def test_allreduce_model_sends_what_the_scheme_sends(ranks, sizes, compression) -> None:
    options = {} if compression is None else {"compression": compression}
    model = cost("allreduce", ranks, sizes, **options)
    assert model.bytes_sent == busiest_sent("allreduce", ranks, sizes, 1, **options)


@pytest.mark.parametrize("ranks", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("sizes", SPLITS, ids=lambda s: f"{len(s)}x{sum(s.values())}")
@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("parameter-server", {}),
        ("parameter-server", {"servers": 1}),
        ("parameter-server", {"servers": 2}),
        ("async-parameter-server", {}),
        ("model-averaging", {}),
        ("model-averaging", {"period": 4}),
        ("dpsgd", {}),
    ],
)
def test_every_scheme_model_sends_what_the_scheme_sends(name, options, ranks, sizes) -> None:
    period = int(options.get("period", 1))
    model = cost(name, ranks, sizes, **options)
    expected = busiest_sent(name, ranks, sizes, period, **options) / period
    assert model.bytes_sent == pytest.approx(expected, rel=0, abs=1e-9)


@pytest.mark.parametrize("ranks", [2, 4, 8, 16])
def test_rabenseifner_allreduce_is_the_issue_formula(ranks: int) -> None:
    m = 250_000  # float32: B = 1 MB
    b = 4 * m
    c = cost("allreduce", ranks, m)
    assert c.algorithm == "Rabenseifner"
    expected = 2 * L * math.log2(ranks) + 2 * b * G * (ranks - 1) / ranks
    assert c.seconds == pytest.approx(expected)
    assert c.messages == 2 * math.log2(ranks)
    assert c.bound == "bandwidth"


def test_allreduce_hand_computed_cases() -> None:
    # 3 ranks: one rank hands its 4000 bytes to a partner and gets them back; 2 ranks
    # then run Rabenseifner on 4000 bytes (one halving, one doubling)
    c = cost("allreduce", 3, 1000)
    assert (c.messages, c.critical_bytes) == (4, 2 * 2000 + 2 * 4000)
    assert c.seconds == pytest.approx(4 * L + 12000 * G)
    # fewer elements than ranks' power of two: recursive doubling, log2 P rounds of B
    tiny = cost("allreduce", 8, 3)
    assert tiny.algorithm == "recursive doubling"
    assert (tiny.messages, tiny.critical_bytes) == (3, 3 * 12)
    assert tiny.bound == "latency"
    assert cost("allreduce", 1, 1000).seconds == 0


def test_compressed_allreduce_counts_two_allgathers_per_payload_array() -> None:
    # sign on 80 elements: payload of 10 bytes (packed bits) and 4 (the scale); each
    # array is a header allgather and a data allgather, one recursive-doubling round each
    c = cost("allreduce", 2, {"w": 80}, compression={"name": "sign"})
    assert (c.messages, c.critical_bytes) == (4, (HEADER_NBYTES + 10) + (HEADER_NBYTES + 4))
    assert c.seconds == pytest.approx(4 * L + 270 * G)
    assert c.algorithm == "sign allgather (recursive doubling)"


def test_allgather_takes_mpichs_algorithm_by_size() -> None:
    assert allgather_rounds(1000, 4) == (2, 3000, "recursive doubling", 0)
    assert allgather_rounds(200_000, 4) == (3, 600_000, "ring", 0)  # 800 kB gathered
    assert allgather_rounds(1000, 6) == (3, 5000, "Bruck", 0)
    assert allgather_rounds(20_000, 6) == (5, 100_000, "ring", 0)  # 120 kB gathered
    assert allreduce_rounds(8, 2, 4) == (2, 16, "recursive doubling", 16)  # 8 bytes
    # Rabenseifner on 4 ranks adds up 3/4 of the buffer; on 6, the 4 ranks of the
    # power of two do the same after a partner's fold has added all of it
    assert allreduce_rounds(4000, 1000, 4).reduced == 3000
    assert allreduce_rounds(4000, 1000, 6).reduced == 3000 + 4000


def test_collective_rounds_cost_gx_a_byte_and_reductions_r() -> None:
    gx, r = 3e-9, 5e-10

    def both(name: str, ranks: int, params: Any, **options: Any) -> CommCost:
        got = schemes.SCHEMES[name].communication_cost(
            ranks=ranks, params=params, itemsize=4, latency_s=L, seconds_per_byte=G,
            options=options, exchange_s_per_byte=gx, reduce_s_per_byte=r,
        )  # fmt: skip
        assert got is not None
        return got

    # 2 ranks, 1000 float32: Rabenseifner moves 4000 bytes at Gx and adds up 2000 at R
    c = both("allreduce", 2, 1000)
    assert c.seconds == pytest.approx(2 * L + 4000 * gx + 2000 * r)
    assert (c.reduced_bytes, c.reduce_seconds) == (2000, pytest.approx(2000 * r))
    assert both("model-averaging", 2, 1000, period=4).seconds == pytest.approx(c.seconds / 4)
    assert both("dpsgd", 2, 1000).seconds == pytest.approx(L + 4000 * gx)  # no reduction
    signed = both("allreduce", 2, {"w": 80}, compression={"name": "sign"})
    assert signed.seconds == pytest.approx(4 * L + 270 * gx)
    # a parameter server's messages go one way at a time: G, and its sum is numpy's
    ps = both("parameter-server", 2, 1000)
    assert ps.seconds == pytest.approx(cost("parameter-server", 2, 1000).seconds)
    assert ps.reduce_seconds == 0


def test_parameter_server_hand_computed_cases() -> None:
    # 4 ranks, 2 servers, 1000 float32 (shards of 2000 bytes): the push phases run one
    # after the other (2 x 3 receives), the pull overlaps (4 + 2 - 2 sends)
    c = cost("parameter-server", 4, 1000, servers=2)
    assert (c.messages, c.critical_bytes) == (6 + 4, 3 * 4000 + 4 * 2000)
    assert c.bytes_sent == 3 * 2000 + 2000  # a server: its shard to 3 ranks, the other once
    assert c.algorithm == "2 servers, point to point"
    a = cost("async-parameter-server", 4, 1000)
    assert (a.messages, a.critical_bytes, a.bytes_sent) == (6, 6 * 4000, 3 * 4000)
    assert a.seconds == pytest.approx(2 * 3 * (L + 4000 * G))


def test_model_averaging_and_dpsgd_hand_computed_cases() -> None:
    every4 = cost("model-averaging", 2, 1000, period=4)
    assert (every4.messages, every4.critical_bytes) == (0.5, 1000)
    assert every4.seconds == pytest.approx(cost("model-averaging", 2, 1000).seconds / 4)
    assert cost("dpsgd", 2, 1000).critical_bytes == 4000  # one neighbour
    ring = cost("dpsgd", 64, 1000)
    assert (ring.messages, ring.critical_bytes) == (2, 8000)  # two, whatever P
    assert ring.seconds == pytest.approx(2 * (L + 4000 * G))


@pytest.mark.parametrize(
    ("name", "options", "words"),
    [
        ("allreduce", {"period": 2}, "has no option 'period'"),
        ("dpsgd", {"compression": "sign"}, "does not support compression"),
        ("parameter-server", {"servers": 5}, "'servers' must be an integer in 1..4"),
        ("model-averaging", {"period": 0}, "'period' must be an integer"),
        ("allreduce", {"compression": {"name": "zip"}}, "unknown compression 'zip'"),
    ],
)
def test_bad_model_options_are_one_line_usage_errors(name, options, words) -> None:
    with pytest.raises(UsageError, match=words) as err:
        cost(name, 4, 1000, **options)
    assert "\n" not in str(err.value)


def test_zero_params_are_refused() -> None:
    with pytest.raises(UsageError, match="positive count"):
        cost("dpsgd", 4, 0)
