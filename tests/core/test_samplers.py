"""Samplers: coverage, determinism per (seed, epoch), partitions across ranks, weights."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.levels.training import Sampler
from d5core.lv2.samplers import (
    BucketSampler,
    ChoiceSampler,
    PartitionedSampler,
    SequentialSampler,
    ShuffleSampler,
    make_sampler,
)


def _epoch(sampler: Sampler, epoch: int = 0) -> list[np.ndarray]:
    sampler.set_epoch(epoch)
    return list(sampler)


def test_sequential_yields_every_index_once_in_order() -> None:
    batches = _epoch(SequentialSampler(10, 4))
    assert [len(b) for b in batches] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate(batches), np.arange(10))
    assert len(SequentialSampler(10, 4)) == 3


def test_drop_last_leaves_out_the_short_batch() -> None:
    sampler = SequentialSampler(10, 4, drop_last=True)
    assert [len(b) for b in _epoch(sampler)] == [4, 4] and len(sampler) == 2
    assert [len(b) for b in _epoch(ShuffleSampler(10, 4, drop_last=True))] == [4, 4]


def test_shuffle_covers_every_index_once_per_epoch() -> None:
    sampler = ShuffleSampler(101, 8, seed=5)
    for epoch in range(3):
        order = np.concatenate(_epoch(sampler, epoch))
        np.testing.assert_array_equal(np.sort(order), np.arange(101))
        assert not np.array_equal(order, np.arange(101))


def test_shuffle_order_depends_only_on_seed_and_epoch() -> None:
    a, b = ShuffleSampler(50, 7, seed=1), ShuffleSampler(50, 7, seed=1)
    _epoch(a, 4)  # history must not matter
    first = np.concatenate(_epoch(a, 2))
    np.testing.assert_array_equal(first, np.concatenate(_epoch(b, 2)))
    assert not np.array_equal(first, np.concatenate(_epoch(b, 3)))
    assert not np.array_equal(first, np.concatenate(_epoch(ShuffleSampler(50, 7, seed=2), 2)))


def test_bucket_batches_group_similar_lengths_and_cover_all() -> None:
    lengths = np.random.default_rng(0).integers(1, 100, size=64)
    sampler = BucketSampler(64, 8, lengths=lengths, seed=3)
    batches = _epoch(sampler)
    np.testing.assert_array_equal(np.sort(np.concatenate(batches)), np.arange(64))
    spread = max(int(np.ptp(lengths[b])) for b in batches)
    assert spread < 40  # random batches of 8 from 1..99 spread far more
    again = _epoch(BucketSampler(64, 8, lengths=lengths, seed=3))
    assert all(np.array_equal(x, y) for x, y in zip(batches, again, strict=True))
    other = _epoch(sampler, 1)
    assert not all(np.array_equal(x, y) for x, y in zip(batches, other, strict=True))


def test_bucket_rejects_lengths_of_wrong_size() -> None:
    with pytest.raises(UsageError, match="lengths"):
        BucketSampler(5, 2, lengths=[1, 2, 3])


def test_choice_without_replacement_draws_distinct_indices() -> None:
    order = np.concatenate(_epoch(ChoiceSampler(30, 4, replace=False, num_samples=20, seed=1)))
    assert len(order) == 20 and len(set(order.tolist())) == 20
    with pytest.raises(UsageError, match="replace"):
        ChoiceSampler(3, 2, replace=False, num_samples=4)


def test_choice_weights_set_the_frequencies() -> None:
    weights = np.array([1.0, 0.0, 3.0, 6.0])
    sampler = ChoiceSampler(4, 100, weights=weights, num_samples=20000, seed=0)
    counts = np.bincount(np.concatenate(_epoch(sampler)), minlength=4) / 20000
    np.testing.assert_allclose(counts, weights / weights.sum(), atol=0.02)
    assert counts[1] == 0


def test_choice_is_deterministic_per_seed_and_epoch() -> None:
    a = np.concatenate(_epoch(ChoiceSampler(100, 10, seed=9), 1))
    b = np.concatenate(_epoch(ChoiceSampler(100, 10, seed=9), 1))
    c = np.concatenate(_epoch(ChoiceSampler(100, 10, seed=9), 2))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_partitioned_ranks_are_disjoint_and_cover_the_dataset() -> None:
    shards = [PartitionedSampler(40, 3, rank=r, world_size=4, seed=2) for r in range(4)]
    for epoch in (0, 1):
        parts = [np.concatenate(_epoch(s, epoch)) for s in shards]
        union = np.concatenate(parts)
        assert len(union) == 40 and len(set(union.tolist())) == 40
        assert len({len(_epoch(s, epoch)) for s in shards}) == 1  # equal step counts


def test_partitioned_pad_repeats_and_drop_leaves_out_the_remainder() -> None:
    padded = [
        np.concatenate(_epoch(PartitionedSampler(10, 2, rank=r, world_size=4))) for r in range(4)
    ]
    assert {len(p) for p in padded} == {3}
    assert set(np.concatenate(padded).tolist()) == set(range(10))
    dropped = [
        np.concatenate(_epoch(PartitionedSampler(10, 2, rank=r, world_size=4, uneven="drop")))
        for r in range(4)
    ]
    union = np.concatenate(dropped)
    assert {len(p) for p in dropped} == {2} and len(set(union.tolist())) == 8


def test_partitioned_ranks_agree_on_the_permutation_without_communicating() -> None:
    a = _epoch(PartitionedSampler(30, 5, rank=1, world_size=3, seed=4), 3)
    b = _epoch(PartitionedSampler(30, 5, rank=1, world_size=3, seed=4), 3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_partitioned_rejects_bad_rank() -> None:
    with pytest.raises(UsageError, match="rank"):
        PartitionedSampler(10, 2, rank=2, world_size=2)


def test_make_sampler_builds_by_name_and_rejects_bad_input() -> None:
    sampler = make_sampler("partitioned", 12, 3, seed=1, rank=0, world_size=2)
    assert isinstance(sampler, PartitionedSampler) and sampler.seed == 1
    assert isinstance(make_sampler("shuffle", 5, 2, drop_last=True), ShuffleSampler)
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("random", {}, "sequential"),
        ("shuffle", {"weights": [1]}, "'weights'"),
        ("bucket", {}, "'lengths'"),
    ]
    for name, options, needle in cases:
        with pytest.raises(UsageError) as exc:
            make_sampler(name, 5, 2, **options)
        assert needle in str(exc.value) and "\n" not in str(exc.value)
