"""Samplers: which examples form each minibatch of an epoch.

Every sampler that draws at random derives its generator from ``(seed, epoch)`` only,
so two instances (in two processes, on two ranks) with the same seed and epoch yield
the same batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from d5core.errors import UsageError
from d5core.levels.training import Sampler

__all__ = [
    "SAMPLERS",
    "BucketSampler",
    "ChoiceSampler",
    "PartitionedSampler",
    "SequentialSampler",
    "ShuffleSampler",
    "epoch_rng",
    "make_sampler",
]


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator of epoch ``epoch``: a function of ``(seed, epoch)`` alone."""
    return np.random.default_rng([seed, epoch])


def _check_sizes(size: int, batch_size: int) -> None:
    if size < 0:
        raise UsageError(f"sampler: dataset size must not be negative, not {size}")
    if batch_size < 1:
        raise UsageError(f"sampler: batch_size must be at least 1, not {batch_size}")


class SequentialSampler(Sampler):
    """Indices ``0 .. size-1`` in order, every epoch."""

    def __init__(
        self, size: int, batch_size: int, *, seed: int = 0, drop_last: bool = False
    ) -> None:
        _check_sizes(size, batch_size)
        super().__init__(size, batch_size, seed=seed, drop_last=drop_last)

    def __iter__(self) -> Iterator[np.ndarray]:
        return self._batches(np.arange(self.size, dtype=np.int64))


class ShuffleSampler(Sampler):
    """Every index once per epoch, in an order drawn from ``(seed, epoch)``."""

    def __init__(
        self, size: int, batch_size: int, *, seed: int = 0, drop_last: bool = False
    ) -> None:
        _check_sizes(size, batch_size)
        super().__init__(size, batch_size, seed=seed, drop_last=drop_last)

    def order(self) -> np.ndarray:
        """This epoch's permutation of the indices."""
        return epoch_rng(self.seed, self.epoch).permutation(self.size).astype(np.int64)

    def __iter__(self) -> Iterator[np.ndarray]:
        return self._batches(self.order())


class BucketSampler(Sampler):
    """Batches of examples of similar length (e.g. sequences), to waste little padding.

    Indices are sorted by ``lengths`` (ties in random order), cut into batches, and the
    batches are yielded in an order drawn from ``(seed, epoch)``. With ``drop_last``
    the one short batch (of the longest examples) is left out.
    """

    def __init__(
        self,
        size: int,
        batch_size: int,
        *,
        lengths: Sequence[int] | np.ndarray,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        _check_sizes(size, batch_size)
        self.lengths = np.asarray(lengths)
        if self.lengths.shape != (size,):
            raise UsageError(
                f"bucket sampler: lengths has shape {self.lengths.shape}, expected ({size},)"
            )
        super().__init__(size, batch_size, seed=seed, drop_last=drop_last)

    def __iter__(self) -> Iterator[np.ndarray]:
        rng = epoch_rng(self.seed, self.epoch)
        order = np.lexsort((rng.random(self.size), self.lengths)).astype(np.int64)
        batches = list(self._batches(order))
        for i in rng.permutation(len(batches)):
            yield batches[i]


class ChoiceSampler(Sampler):
    """``num_samples`` indices per epoch drawn at random, optionally weighted.

    :param replace: draw with replacement (an index may repeat within an epoch).
    :param weights: relative probabilities of the indices (normalised here).
    :param num_samples: indices per epoch; ``size`` by default.
    """

    def __init__(
        self,
        size: int,
        batch_size: int,
        *,
        seed: int = 0,
        replace: bool = True,
        weights: Sequence[float] | np.ndarray | None = None,
        num_samples: int | None = None,
        drop_last: bool = False,
    ) -> None:
        _check_sizes(size, batch_size)
        super().__init__(size, batch_size, seed=seed, drop_last=drop_last)
        self.replace = replace
        self.num_samples = size if num_samples is None else num_samples
        self.p: np.ndarray | None = None
        if weights is not None:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != (size,) or np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
                raise UsageError(
                    f"choice sampler: weights must be {size} finite non-negative numbers "
                    f"with a positive sum"
                )
            self.p = w / w.sum()
        available = size if self.p is None else int(np.count_nonzero(self.p))
        if not replace and self.num_samples > available:
            raise UsageError(
                f"choice sampler: cannot draw {self.num_samples} of {available} "
                f"selectable examples without replacement; set replace=true"
            )

    def num_examples(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[np.ndarray]:
        rng = epoch_rng(self.seed, self.epoch)
        drawn = rng.choice(self.size, size=self.num_samples, replace=self.replace, p=self.p)
        return self._batches(np.asarray(drawn, dtype=np.int64))


class PartitionedSampler(Sampler):
    """This rank's share of a shuffled epoch, for data-parallel training (Level 3).

    Every rank draws the same permutation from ``(seed, epoch)`` and takes every
    ``world_size``-th index starting at ``rank``, so the shares are disjoint and
    together cover the dataset. ``batch_size`` is per rank. So that every rank runs the
    same number of steps, when ``size`` is not a multiple of ``world_size``:

    - ``uneven="pad"`` (default) repeats the first indices of the permutation to fill
      the last round: up to ``world_size - 1`` examples are seen twice per epoch;
    - ``uneven="drop"`` leaves out the last ``size % world_size`` indices of the
      permutation: shares stay disjoint, and those examples skip this epoch.

    :param shuffle: ``False`` partitions ``0 .. size-1`` in order.
    """

    def __init__(
        self,
        size: int,
        batch_size: int,
        *,
        rank: int,
        world_size: int,
        seed: int = 0,
        shuffle: bool = True,
        uneven: str = "pad",
        drop_last: bool = False,
    ) -> None:
        _check_sizes(size, batch_size)
        if world_size < 1 or not 0 <= rank < world_size:
            raise UsageError(
                f"partitioned sampler: need 0 <= rank < world_size, got rank={rank} "
                f"world_size={world_size}"
            )
        if uneven not in ("pad", "drop"):
            raise UsageError(f"partitioned sampler: uneven must be 'pad' or 'drop', not {uneven!r}")
        super().__init__(size, batch_size, seed=seed, drop_last=drop_last)
        self.rank, self.world_size, self.shuffle, self.uneven = rank, world_size, shuffle, uneven

    def num_examples(self) -> int:
        if self.uneven == "drop":
            return self.size // self.world_size
        return -(-self.size // self.world_size)

    def indices(self) -> np.ndarray:
        """This rank's indices for the current epoch, before batching."""
        if self.shuffle:
            order = epoch_rng(self.seed, self.epoch).permutation(self.size).astype(np.int64)
        else:
            order = np.arange(self.size, dtype=np.int64)
        total = self.num_examples() * self.world_size
        if total > self.size and self.size:
            order = np.resize(order, total)  # repeats from the start
        return order[:total][self.rank :: self.world_size]

    def __iter__(self) -> Iterator[np.ndarray]:
        return self._batches(self.indices())


#: The samplers :func:`make_sampler` knows, by name.
SAMPLERS: dict[str, type[Sampler]] = {
    "sequential": SequentialSampler,
    "shuffle": ShuffleSampler,
    "bucket": BucketSampler,
    "choice": ChoiceSampler,
    "partitioned": PartitionedSampler,
}


def make_sampler(
    name: str, size: int, batch_size: int, *, seed: int = 0, **options: Any
) -> Sampler:
    """The sampler ``name`` (a key of :data:`SAMPLERS`) over ``size`` examples.

    :raises UsageError: one line, for an unknown name or an unknown or missing option.
    """
    from d5core.lv2.datasets import check_options

    cls = SAMPLERS.get(name)
    if cls is None:
        raise UsageError(f"no sampler named {name!r}; choose one of {', '.join(SAMPLERS)}")
    check_options(f"sampler {name!r}", cls, {"seed": seed, **options}, skip=2)
    return cls(size, batch_size, seed=seed, **options)
