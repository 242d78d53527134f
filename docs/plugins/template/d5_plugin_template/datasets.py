"""A dataset, registered as ``template_circle`` in ``d5.datasets``.

The entry point names a factory called as ``factory(split, **options)``: recipes and
``--set`` pass the options by name, so every option needs a default and a type d5 can
parse from text (int, float, str, bool).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from d5core.api import Dataset, UsageError

__all__ = ["CircleDataset", "circle"]

#: Each split is its own draw from the same distribution.
SPLITS = {"train": 0, "test": 1}


class CircleDataset(Dataset):
    """Points of the square ``[-1, 1]^2``, labelled 1 inside the circle of radius
    ``sqrt(2/pi)`` (half the square's area) and 0 outside."""

    input_shape = (2,)
    num_classes = 2

    def __init__(self, x: np.ndarray, y: np.ndarray, name: str) -> None:
        self.x, self.y, self.name = x, y, name

    def __len__(self) -> int:
        return len(self.y)

    def batch(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        index = np.asarray(indices, dtype=np.int64)
        return self.x[index], self.y[index]


def circle(split: str, *, samples: int = 256, seed: int = 0) -> CircleDataset:
    """``samples`` points of split ``split`` (train or test), drawn from ``seed``.

    :raises UsageError: one line, for an unknown split or fewer than one sample.
    """
    if split not in SPLITS:
        raise UsageError(f"dataset 'template_circle' has no split {split!r}; use train or test")
    if samples < 1:
        raise UsageError(f"dataset 'template_circle': samples must be at least 1, not {samples}")
    rng = np.random.default_rng([seed, SPLITS[split]])
    x = rng.uniform(-1.0, 1.0, size=(samples, 2)).astype(np.float32)
    y = ((x**2).sum(axis=1) < 2 / np.pi).astype(np.int64)
    return CircleDataset(x, y, f"template_circle/{split}")
