"""Batch transforms (data augmentation) for NCHW float arrays.

A transform is called as ``transform(x, rng)`` and returns a new array; all of its
randomness comes from ``rng``, so a generator seeded the same gives the same result.
The input is never modified.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from d5core.errors import UsageError

__all__ = [
    "TRANSFORMS",
    "Compose",
    "Cutout",
    "Normalize",
    "RandomCrop",
    "RandomFlip",
    "Transform",
    "make_transforms",
]


def _check_nchw(name: str, x: np.ndarray) -> None:
    if x.ndim != 4:
        raise UsageError(f"transform {name!r} needs NCHW batches, got shape {x.shape}")


def _pair(name: str, value: int | Sequence[int]) -> tuple[int, int]:
    pair = (int(value), int(value)) if isinstance(value, int) else tuple(int(v) for v in value)
    if len(pair) != 2 or min(pair) < 1:
        raise UsageError(f"transform {name!r}: size must be a positive int or (h, w)")
    return pair[0], pair[1]


class Transform(ABC):
    """Maps a batch to a batch, drawing any randomness from the generator given."""

    @abstractmethod
    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The transformed copy of ``x``."""


class Normalize(Transform):
    """``(x - mean) / std``, with scalars or one value per channel (axis 1)."""

    def __init__(self, mean: float | Sequence[float], std: float | Sequence[float]) -> None:
        self.mean = np.asarray(mean, dtype=np.float32)
        self.std = np.asarray(std, dtype=np.float32)
        if np.any(self.std == 0):
            raise UsageError("transform 'normalize': std must not be zero")

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        shape = (1, -1) + (1,) * (x.ndim - 2) if x.ndim >= 2 else (-1,)
        mean = self.mean.reshape(shape) if self.mean.ndim else self.mean
        std = self.std.reshape(shape) if self.std.ndim else self.std
        out: np.ndarray = ((x - mean) / std).astype(np.float32)
        return out


class RandomCrop(Transform):
    """A random ``size`` window per example, after zero ``padding`` on each side."""

    def __init__(self, size: int | Sequence[int], padding: int = 0) -> None:
        self.size, self.padding = _pair("random_crop", size), int(padding)
        if self.padding < 0:
            raise UsageError("transform 'random_crop': padding must not be negative")

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        _check_nchw("random_crop", x)
        p = self.padding
        padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p))) if p else x
        (h, w), (ph, pw) = self.size, padded.shape[2:]
        if h > ph or w > pw:
            raise UsageError(
                f"transform 'random_crop': size {self.size} exceeds the padded image {ph}x{pw}"
            )
        tops = rng.integers(0, ph - h + 1, size=len(x))
        lefts = rng.integers(0, pw - w + 1, size=len(x))
        out = np.empty((len(x), x.shape[1], h, w), dtype=x.dtype)
        for i, (t, left) in enumerate(zip(tops, lefts, strict=True)):
            out[i] = padded[i, :, t : t + h, left : left + w]
        return out


class RandomFlip(Transform):
    """Reverse each example along ``axis`` (-1: width, -2: height) with probability ``p``."""

    def __init__(self, axis: int = -1, p: float = 0.5) -> None:
        if axis not in (-1, -2, 2, 3):
            raise UsageError("transform 'random_flip': axis must be -1/3 (width) or -2/2 (height)")
        if not 0.0 <= p <= 1.0:
            raise UsageError(f"transform 'random_flip': p must be in [0, 1], not {p}")
        self.axis, self.p = axis, float(p)

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        _check_nchw("random_flip", x)
        flip = rng.random(len(x)) < self.p
        out = x.copy()
        out[flip] = np.flip(x[flip], axis=self.axis)
        return out


class Cutout(Transform):
    """Zero one ``size`` x ``size`` square per example, centred at a random pixel
    (clipped at the borders)."""

    def __init__(self, size: int) -> None:
        self.size = _pair("cutout", size)

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        _check_nchw("cutout", x)
        h, w = x.shape[2:]
        cy, cx = rng.integers(0, h, size=len(x)), rng.integers(0, w, size=len(x))
        out = x.copy()
        sh, sw = self.size
        for i, (y0, x0) in enumerate(zip(cy - sh // 2, cx - sw // 2, strict=True)):
            out[i, :, max(y0, 0) : max(y0 + sh, 0), max(x0, 0) : max(x0 + sw, 0)] = 0
        return out


class Compose(Transform):
    """Apply ``transforms`` in order, all drawing from the same generator."""

    def __init__(self, transforms: Sequence[Transform]) -> None:
        self.transforms = list(transforms)

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        for t in self.transforms:
            x = t(x, rng)
        return x


#: The transforms :func:`make_transforms` knows, by name.
TRANSFORMS: dict[str, type[Transform]] = {
    "normalize": Normalize,
    "random_crop": RandomCrop,
    "random_flip": RandomFlip,
    "cutout": Cutout,
}


def make_transforms(spec: Sequence[Mapping[str, Any]]) -> Compose:
    """Build transforms from a recipe spec, e.g. ``[{"name": "normalize", "mean": 0.5,
    "std": 0.25}, {"name": "random_flip"}]``.

    :raises UsageError: one line, for an entry without a known ``name`` or with an
        unknown or missing option.
    """
    from d5core.lv2.datasets import check_options

    built: list[Transform] = []
    for i, entry in enumerate(spec):
        if not isinstance(entry, Mapping) or "name" not in entry:
            raise UsageError(f"transform {i}: expected a mapping with a 'name', got {entry!r}")
        options = {k: v for k, v in entry.items() if k != "name"}
        cls = TRANSFORMS.get(str(entry["name"]))
        if cls is None:
            raise UsageError(
                f"transform {i}: no transform named {entry['name']!r}; "
                f"choose one of {', '.join(TRANSFORMS)}"
            )
        check_options(f"transform {entry['name']!r}", cls, options)
        built.append(cls(**options))
    return Compose(built)
