"""Communication cost models without any plugin: ``CommCost`` arithmetic, the default
``communication_cost`` (no model), and what ``d5 model comm`` makes of its arguments
(rank series, parameter counts, zoo models) and of a scheme's model."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from d5core.errors import EXIT_USAGE, UsageError
from d5core.levels.distributed import CommCost, DistributedOptimizer
from d5core.lv3.comm_fit import CommFit
from d5core.lv3.cost_table import cost_rows, draw_costs, parse_params, parse_rank_list

FIT = CommFit(communicator="mpi", latency_s=5e-6, seconds_per_byte=1e-10, ranks=2,
              sizes=(8, 1024), measured_s=(5e-6, 5.1e-6), residuals=(0.0, 0.0),
              run_id="fit1")  # fmt: skip


class RingModel(DistributedOptimizer):
    """A scheme with the ring allreduce's model: 2(P-1) (L + G B/P)."""

    name: ClassVar[str] = "ring-model"

    def scheme_step(self, params: Any, grads: Any, names: Any) -> None:
        raise NotImplementedError

    def expected_bytes(self, param_sizes: Any, steps: int, *, itemsize: int | None = None):
        raise NotImplementedError

    @classmethod
    def communication_cost(
        cls, *, ranks: int, params: int | Mapping[str, int], itemsize: int, latency_s: float,
        seconds_per_byte: float, options: Mapping[str, Any],
        exchange_s_per_byte: float | None = None, reduce_s_per_byte: float = 0.0,
    ) -> CommCost:  # fmt: skip
        total = params if isinstance(params, int) else sum(params.values())
        chunk = total * itemsize / ranks
        both_ways = seconds_per_byte if exchange_s_per_byte is None else exchange_s_per_byte
        return CommCost.of(
            messages=2 * (ranks - 1), critical_bytes=2 * (ranks - 1) * chunk,
            bytes_sent=2 * (ranks - 1) * chunk, latency_s=latency_s,
            seconds_per_byte=both_ways, algorithm="ring",
            formula="2(P-1)(L + Gx B/P) + (P-1) R B/P",
            reduced_bytes=(ranks - 1) * chunk, reduce_s_per_byte=reduce_s_per_byte,
        )  # fmt: skip


class NoModel(RingModel):
    name: ClassVar[str] = "no-model"
    communication_cost = DistributedOptimizer.communication_cost


def test_a_cost_is_its_latency_part_plus_its_bandwidth_part() -> None:
    c = CommCost.of(messages=4, critical_bytes=3e6, bytes_sent=1.5e6, latency_s=2e-6,
                    seconds_per_byte=1e-9, algorithm="ring", formula="f")  # fmt: skip
    assert c.latency_seconds == pytest.approx(8e-6)
    assert c.bandwidth_seconds == pytest.approx(3e-3)
    assert c.seconds == pytest.approx(3e-3 + 8e-6)
    assert c.bound == "bandwidth"
    small = CommCost.of(messages=4, critical_bytes=100, bytes_sent=100, latency_s=2e-6,
                        seconds_per_byte=1e-9, algorithm="ring", formula="f")  # fmt: skip
    assert small.bound == "latency"


def test_a_scheme_without_a_model_says_none() -> None:
    got = NoModel.communication_cost(ranks=4, params=10, itemsize=4, latency_s=1e-6,
                                     seconds_per_byte=1e-9, options={})  # fmt: skip
    assert got is None


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("4", [4]),
        ("8,2,4,2", [2, 4, 8]),
        ("2,4,...,4096", [2**k for k in range(1, 13)]),
        ("1,2,...,8", [1, 2, 4, 8]),
        ("3,9,...,100", [3, 9, 27, 81, 100]),
        ("2, 4, ..., 16", [2, 4, 8, 16]),
    ],
)
def test_rank_lists_and_series(text: str, counts: list[int]) -> None:
    assert parse_rank_list(text) == counts


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("0", "must be 1 or more, not 0"),
        ("2,-4", "must be 1 or more, not -4"),
        ("two", "'two' is not a whole number"),
        ("2,...,8", "FIRST,SECOND,...,LAST"),
        ("2,4,...", "FIRST,SECOND,...,LAST"),
        ("2,5,...,64", "whole factor of 2 or more"),
        ("4,4,...,64", "whole factor of 2 or more"),
        ("8,16,...,4", "at least 16"),
    ],
)
def test_bad_rank_lists_are_one_line_usage_errors(text: str, words: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_rank_list(text)
    assert words in str(err.value) and "\n" not in str(err.value)
    assert err.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize(
    ("text", "total"),
    [("4810", 4810), ("100M", 100_000_000), ("1.5e8", 150_000_000), ("2.5k", 2500),
     ("1G", 10**9)],
)  # fmt: skip
def test_parameter_counts(text: str, total: int) -> None:
    count = parse_params(text)
    assert (count.total, count.sizes, count.for_model()) == (total, None, total)


def test_a_zoo_model_counts_its_trainable_tensors() -> None:
    from d5core.lv1.zoo import build

    count = parse_params("lenet5")
    net = build("lenet5")
    assert count.sizes is not None and set(count.sizes) == set(net.trainable)
    assert count.total == sum(int(net.parameters[n].size) for n in net.trainable) == 61706
    assert count.for_model() == count.sizes


@pytest.mark.parametrize("text", ["0", "-3", "1.5", "0.0005k", "nosuchmodel"])
def test_bad_parameter_counts_are_one_line_usage_errors(text: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_params(text)
    assert "\n" not in str(err.value)


def test_rows_use_the_fits_latency_and_time_per_byte() -> None:
    rows = cost_rows(RingModel, [2, 4], parse_params("1M"), 4, FIT, {})
    assert [r.ranks for r in rows] == [2, 4]
    # 4 ranks: 6 messages of 1 MB each (4 MB / 4): 6 * 5 us + 6e6 * 0.1 ns
    assert rows[1].cost.seconds == pytest.approx(6 * 5e-6 + 6e6 * 1e-10)
    doc = rows[1].to_json()
    assert doc["ranks"] == 4 and doc["algorithm"] == "ring" and doc["bound"] == "bandwidth"
    assert doc["seconds"] == pytest.approx(doc["latency_seconds"] + doc["bandwidth_seconds"])
    assert doc["reduce_seconds"] == 0 and doc["reduced_bytes"] == 3e6


def test_rows_take_the_exchanges_time_per_byte_and_the_reduction_when_the_fit_has_them():
    measured = dataclasses.replace(FIT, exchange_s_per_byte=2e-10, reduce_s_per_byte=5e-11)
    rows = cost_rows(RingModel, [4], parse_params("1M"), 4, measured, {})
    # 6 messages of 1 MB at Gx, and 3 MB added up at R
    assert rows[0].cost.seconds == pytest.approx(6 * 5e-6 + 6e6 * 2e-10 + 3e6 * 5e-11)
    assert rows[0].cost.reduce_seconds == pytest.approx(3e6 * 5e-11)
    # a fit stored before Gx was measured: the rounds cost G
    assert FIT.exchange_or_p2p_s_per_byte == FIT.seconds_per_byte


def test_the_plot_is_a_png(tmp_path) -> None:
    rows = cost_rows(RingModel, parse_rank_list("2,4,...,64"), parse_params("10M"), 4, FIT, {})
    path = draw_costs(rows, "ring", tmp_path / "ring.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(UsageError, match="cannot write it"):
        draw_costs(rows, "ring", tmp_path / "no" / "such" / "dir.png")
