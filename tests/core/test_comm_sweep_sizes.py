"""``d5 bench comm``'s plan, checked without ranks: sizes, rank counts, bandwidths, and the
rows and metrics stored from a rank-0 result."""

from __future__ import annotations

import statistics

import pytest

from d5core.errors import UsageError
from d5core.lv3 import comm_sweep
from d5core.lv3.comm_sweep import (
    bandwidths,
    message_sizes,
    parse_ranks,
    store_sweep,
    sweep_rows,
)
from d5core.results.store import ResultsStore


def test_sizes_grow_four_times_and_end_at_the_largest():
    assert message_sizes(1024, 65536) == [1024, 4096, 16384, 65536]
    assert message_sizes(1024, 10000) == [1024, 4096, 10000]
    assert message_sizes(64, 64) == [64]
    assert message_sizes(comm_sweep.DEFAULT_MIN_BYTES, comm_sweep.DEFAULT_MAX_BYTES)[-1] == 4 << 20


@pytest.mark.parametrize(
    ("low", "high", "words"),
    [
        (0, 1024, "--min-bytes 0"),
        (-4, 1024, "--min-bytes -4"),
        (6, 1024, "multiple of 4"),
        (1024, -8, "--max-bytes -8"),
        (4096, 1024, "larger than --max-bytes"),
    ],
)
def test_bad_sizes_are_one_line_usage_errors(low, high, words):
    with pytest.raises(UsageError, match=words) as err:
        message_sizes(low, high)
    assert "\n" not in str(err.value)


def test_rank_counts():
    assert parse_ranks("4,2,4") == [2, 4]
    for text, words in (("1", "at least 2"), ("2,x", "integers"), ("2.5", "integers")):
        with pytest.raises(UsageError, match=words):
            parse_ranks(text)


def test_bandwidths_follow_nccl_tests():
    assert bandwidths("allreduce", 10**9, 4, 2.0) == pytest.approx((0.5, 0.5 * 1.5))
    assert bandwidths("broadcast", 10**9, 4, 1.0) == pytest.approx((1.0, 1.0))
    # allgather: the gathered result (ranks x buffer) over the time, bus factor (n-1)/n
    assert bandwidths("allgather", 10**9, 4, 1.0) == pytest.approx((4.0, 3.0))


def test_rows_and_stored_metrics_come_from_the_samples(tmp_path):
    result = {
        "ranks": 2,
        "communicator": "mpi",
        "raw": False,
        "sizes": [{"bytes": 4096, "samples": {"d5": [3e-6, 1e-6, 2e-6, 5e-6]}}],
    }
    (row,) = sweep_rows(result, "allreduce")
    assert row["median"] == statistics.median([3e-6, 1e-6, 2e-6, 5e-6])
    assert row["algbw"] == pytest.approx(4096 / row["median"] / 1e9)
    with ResultsStore.open(tmp_path / "r.sqlite") as store:
        with store.run("comm", "comm allreduce", environment={}) as run_id:
            store_sweep(store, run_id, [row], "allreduce")
        (m,) = store.measurements(run_id)
        labels = {"collective": "allreduce", "bytes": 4096, "ranks": 2, "impl": "d5"}
        assert m.metric == "time" and dict(m.labels) == labels
        assert store.samples(m.id) == [3e-6, 1e-6, 2e-6, 5e-6]
        metrics = {k.name: k for k in store.metrics(run_id)}
        assert metrics["algbw"].value == pytest.approx(row["algbw"])
        assert metrics["busbw"].unit == "GB/s" and dict(metrics["busbw"].labels) == labels
