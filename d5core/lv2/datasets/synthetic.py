"""Synthetic datasets generated from a seed: any size, offline, learnable.

The distribution (class means, patterns, weights) comes from ``seed`` alone; the
examples of each split come from a seed derived from ``seed`` and the split, so the
train and test splits are independent draws from one distribution.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from d5core.errors import UsageError
from d5core.lv2.datasets._common import check_split, split_index
from d5core.lv2.datasets.arrays import ArrayDataset

__all__ = ["synthetic_classification", "synthetic_images", "synthetic_regression"]

_TAG = 0xD5


def _rngs(seed: int, split: str) -> tuple[np.random.Generator, np.random.Generator]:
    """The generator of the distribution's parameters and that of the split's examples."""
    return (
        np.random.default_rng([_TAG, seed, 0]),
        np.random.default_rng([_TAG, seed, 1 + split_index(split)]),
    )


def _positive(dataset: str, **values: float) -> None:
    for key, value in values.items():
        if value <= 0:
            raise UsageError(f"dataset {dataset!r}: {key} must be positive, not {value}")


def _labels(rng: np.random.Generator, samples: int, classes: int) -> np.ndarray:
    """Balanced labels in random order."""
    return rng.permutation(np.arange(samples, dtype=np.int64) % classes)


def synthetic_classification(
    split: str,
    *,
    samples: int = 1000,
    features: int = 20,
    classes: int = 4,
    separability: float = 3.0,
    noise: float = 1.0,
    seed: int = 0,
) -> ArrayDataset:
    """Gaussian blobs: class means along random unit directions times ``separability``,
    examples the mean plus Gaussian noise of standard deviation ``noise``.

    Inputs ``(features,)``; ``samples`` examples per split, balanced over ``classes``.
    """
    name = "synthetic_classification"
    check_split(name, split)
    _positive(name, samples=samples, features=features, noise=noise)
    if classes < 2:
        raise UsageError(f"dataset {name!r}: classes must be at least 2, not {classes}")
    params, draw = _rngs(seed, split)
    directions = params.standard_normal((classes, features))
    means = separability * directions / np.linalg.norm(directions, axis=1, keepdims=True)
    y = _labels(draw, samples, classes)
    x = means[y] + noise * draw.standard_normal((samples, features))
    return ArrayDataset(x.astype(np.float32), y, name=f"{name}/{split}", num_classes=classes)


def synthetic_images(
    split: str,
    *,
    samples: int = 1000,
    shape: Sequence[int] = (3, 32, 32),
    classes: int = 10,
    noise: float = 0.5,
    seed: int = 0,
) -> ArrayDataset:
    """Images ``shape`` (C, H, W): a smooth random pattern per class plus pixel noise.

    Each class's pattern is a 4x4 grid of Gaussian values per channel, enlarged to
    H x W; a convolutional or linear model learns it.
    """
    name = "synthetic_images"
    check_split(name, split)
    if len(shape) != 3 or min(shape) < 1:
        raise UsageError(f"dataset {name!r}: shape must be (C, H, W), not {tuple(shape)}")
    _positive(name, samples=samples, noise=noise)
    if classes < 2:
        raise UsageError(f"dataset {name!r}: classes must be at least 2, not {classes}")
    c, h, w = (int(d) for d in shape)
    params, draw = _rngs(seed, split)
    gh, gw = min(4, h), min(4, w)
    coarse = params.standard_normal((classes, c, gh, gw))
    big = coarse.repeat(-(-h // gh), axis=2).repeat(-(-w // gw), axis=3)
    patterns = big[:, :, :h, :w]
    y = _labels(draw, samples, classes)
    x = patterns[y] + noise * draw.standard_normal((samples, c, h, w))
    return ArrayDataset(x.astype(np.float32), y, name=f"{name}/{split}", num_classes=classes)


def synthetic_regression(
    split: str,
    *,
    samples: int = 1000,
    features: int = 10,
    noise: float = 0.1,
    nonlinear: bool = False,
    seed: int = 0,
) -> ArrayDataset:
    """Targets ``x @ w + b`` (plus ``0.5 sin(2 x @ v)`` when ``nonlinear``) plus noise.

    Inputs ``(features,)`` standard normal; targets float32 of shape ``(samples, 1)``;
    ``num_classes`` is ``None``.
    """
    name = "synthetic_regression"
    check_split(name, split)
    _positive(name, samples=samples, features=features)
    if noise < 0:
        raise UsageError(f"dataset {name!r}: noise must not be negative, not {noise}")
    params, draw = _rngs(seed, split)
    w = params.standard_normal(features) / np.sqrt(features)
    v = params.standard_normal(features) / np.sqrt(features)
    b = params.standard_normal()
    x = draw.standard_normal((samples, features))
    target = x @ w + b
    if nonlinear:
        target += 0.5 * np.sin(2.0 * (x @ v))
    target += noise * draw.standard_normal(samples)
    return ArrayDataset(
        x.astype(np.float32),
        target.astype(np.float32).reshape(-1, 1),
        name=f"{name}/{split}",
    )
