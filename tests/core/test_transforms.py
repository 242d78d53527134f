"""Batch transforms: shapes, determinism for a generator, and the recipe spec."""

from __future__ import annotations

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.lv2.transforms import (
    Compose,
    Cutout,
    Normalize,
    RandomCrop,
    RandomFlip,
    make_transforms,
)


def _batch() -> np.ndarray:
    return np.random.default_rng(0).random((16, 3, 8, 8)).astype(np.float32)


def _same_twice(transform: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    assert callable(transform)
    x = _batch()
    a = transform(x, np.random.default_rng(7))
    b = transform(x, np.random.default_rng(7))
    c = transform(x, np.random.default_rng(8))
    np.testing.assert_array_equal(x, _batch())  # input untouched
    return a, b, c


@pytest.mark.parametrize(
    "transform", [RandomCrop(8, padding=2), RandomFlip(), Cutout(3)], ids=["crop", "flip", "cutout"]
)
def test_random_transforms_are_deterministic_per_generator(transform: object) -> None:
    a, b, c = _same_twice(transform)
    assert a.shape == (16, 3, 8, 8) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_normalize_per_channel() -> None:
    x = _batch()
    out = Normalize([0.1, 0.2, 0.3], [2.0, 4.0, 5.0])(x, np.random.default_rng())
    np.testing.assert_allclose(out[:, 1], (x[:, 1] - 0.2) / 4.0, rtol=1e-6)
    np.testing.assert_allclose(Normalize(0.5, 0.25)(x, np.random.default_rng()), (x - 0.5) / 0.25)


def test_random_crop_to_smaller_size_takes_windows_of_the_padded_image() -> None:
    x = np.arange(2 * 1 * 4 * 4, dtype=np.float32).reshape(2, 1, 4, 4)
    out = RandomCrop(2)(x, np.random.default_rng(0))
    assert out.shape == (2, 1, 2, 2)
    for i in range(2):
        windows = [x[i, 0, t : t + 2, s : s + 2] for t in range(3) for s in range(3)]
        assert any(np.array_equal(out[i, 0], w) for w in windows)
    with pytest.raises(UsageError):
        RandomCrop(5)(x, np.random.default_rng(0))


def test_random_flip_with_p_one_mirrors_width() -> None:
    x = _batch()
    np.testing.assert_array_equal(RandomFlip(p=1.0)(x, np.random.default_rng()), x[..., ::-1])
    np.testing.assert_array_equal(RandomFlip(axis=-2, p=0.0)(x, np.random.default_rng()), x)


def test_cutout_zeroes_at_most_one_square_per_example() -> None:
    x = np.ones((20, 2, 8, 8), dtype=np.float32)
    out = Cutout(4)(x, np.random.default_rng(1))
    zeros = (out == 0).sum(axis=(1, 2, 3))
    assert np.all(zeros <= 2 * 16) and np.all(zeros >= 2 * 4) and zeros.max() == 32


def test_make_transforms_from_recipe_spec() -> None:
    pipeline = make_transforms(
        [
            {"name": "random_crop", "size": 8, "padding": 1},
            {"name": "random_flip", "p": 0.5},
            {"name": "cutout", "size": 2},
            {"name": "normalize", "mean": 0.5, "std": 0.25},
        ]
    )
    assert isinstance(pipeline, Compose) and len(pipeline.transforms) == 4
    a, b, _ = _same_twice(pipeline)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ([{"name": "blur"}], "'blur'"),
        ([{"name": "cutout"}], "'size'"),
        ([{"name": "normalize", "mean": 0, "std": 1, "eps": 1}], "'eps'"),
        (["cutout"], "'name'"),
    ],
)
def test_make_transforms_errors_are_one_line(spec: list[object], needle: str) -> None:
    with pytest.raises(UsageError) as exc:
        make_transforms(spec)  # type: ignore[arg-type]
    assert needle in str(exc.value) and "\n" not in str(exc.value)
