"""Datasets: digits, arrays, npz (incl. memory-mapping), synthetic, load_dataset errors."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.levels.training import Dataset
from d5core.lv2.datasets import ArrayDataset, load_dataset


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# -- digits ----------------------------------------------------------------------------


def test_digits_has_fixed_stratified_split_of_1437_and_360() -> None:
    train, test = load_dataset("digits", "train"), load_dataset("digits", "test")
    assert (len(train), len(test)) == (1437, 360)
    assert train.input_shape == (64,) and train.num_classes == 10
    x, y = train.batch(np.arange(len(train)))
    assert x.shape == (1437, 64) and x.dtype == np.float32 and y.dtype == np.int64
    assert x.min() >= 0.0 and x.max() <= 1.0 and x.max() > 0.9
    counts = np.bincount(test.batch(np.arange(360))[1], minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # stratified: ~36 per class


def test_digits_split_is_deterministic_and_disjoint() -> None:
    a, b = load_dataset("digits"), load_dataset("digits")
    np.testing.assert_array_equal(a.batch(range(50))[0], b.batch(range(50))[0])
    train_x = load_dataset("digits").batch(np.arange(1437))[0]
    test_x = load_dataset("digits", "test").batch(np.arange(360))[0]
    train_rows = {row.tobytes() for row in train_x}
    overlap = sum(row.tobytes() in train_rows for row in test_x)
    assert overlap < 10  # only exact duplicate images in the source data may coincide


def test_digits_unflattened_gives_one_channel_8x8_images() -> None:
    ds = load_dataset("digits", flatten=False)
    assert ds.input_shape == (1, 8, 8)
    assert ds.batch([0, 5, 7])[0].shape == (3, 1, 8, 8)


def test_digits_without_scikit_learn_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from d5core.lv2.datasets import digits

    digits._digits_and_split.cache_clear()  # read once per process: forget an earlier read
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn now raises ImportError
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(UsageError) as exc:
        load_dataset("digits", "train")
    message = _one_line(exc)
    assert message.startswith("the digits dataset needs scikit-learn")
    assert "pip install 'd5core[digits]'" in message


# -- load_dataset errors ---------------------------------------------------------------


def test_unknown_dataset_names_the_installed_ones() -> None:
    with pytest.raises(UsageError) as exc:
        load_dataset("no_such_data")
    assert "digits" in _one_line(exc) and "no_such_data" in str(exc.value)


def test_unknown_split_and_option_are_one_line_errors() -> None:
    with pytest.raises(UsageError) as exc:
        load_dataset("digits", "validation")
    assert "validation" in _one_line(exc)
    with pytest.raises(UsageError) as exc:
        load_dataset("digits", colour=True)
    assert "'colour'" in _one_line(exc) and "flatten" in str(exc.value)
    with pytest.raises(UsageError) as exc:
        load_dataset("npz")
    assert "'path'" in _one_line(exc)


# -- arrays and npz --------------------------------------------------------------------


def test_array_dataset_converts_batches_and_infers_classes() -> None:
    x = np.arange(24, dtype=np.uint8).reshape(6, 4)
    ds = ArrayDataset(x, np.array([0, 2, 1, 0, 2, 1]), input_shape=(1, 2, 2), scale=0.5)
    assert isinstance(ds, Dataset) and ds.num_classes == 3 and len(ds) == 6
    bx, by = ds.batch([5, 0])
    assert bx.shape == (2, 1, 2, 2) and bx.dtype == np.float32 and by.dtype == np.int64
    np.testing.assert_array_equal(bx[0].ravel(), x[5] * 0.5)
    reg = ArrayDataset(np.zeros((3, 2)), np.array([0.5, 1.0, 2.0]))
    assert reg.num_classes is None and reg.batch([2])[1].dtype == np.float32


def test_array_dataset_rejects_mismatched_lengths() -> None:
    with pytest.raises(UsageError):
        ArrayDataset(np.zeros((3, 2)), np.zeros(4, dtype=np.int64))


def test_arrays_entry_wraps_given_arrays() -> None:
    ds = load_dataset("arrays", "test", x=np.ones((4, 3)), y=[0, 1, 1, 0], display_name="mine")
    assert ds.name == "mine/test" and ds.input_shape == (3,) and ds.num_classes == 2


@pytest.mark.parametrize("mmap", [False, True])
def test_npz_reads_split_files_with_custom_keys(tmp_path: Path, mmap: bool) -> None:
    x = np.random.default_rng(0).random((20, 3, 4)).astype(np.float32)
    y = np.arange(20) % 5
    np.savez(tmp_path / "data-test.npz", images=x, labels=y)
    ds = load_dataset(
        "npz",
        "test",
        path=str(tmp_path / "data-{split}.npz"),
        x_key="images",
        y_key="labels",
        mmap=mmap,
    )
    assert len(ds) == 20 and ds.input_shape == (3, 4) and ds.num_classes == 5
    bx, by = ds.batch([3, 17])
    np.testing.assert_array_equal(bx, x[[3, 17]])
    np.testing.assert_array_equal(by, y[[3, 17]])


def test_npz_mmap_maps_the_file_instead_of_reading_it(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", x=np.arange(12.0).reshape(6, 2), y=np.arange(6))
    ds = load_dataset("npz", path=tmp_path / "d.npz", mmap=True)
    assert isinstance(ds, ArrayDataset) and isinstance(ds.x, np.memmap)
    np.testing.assert_array_equal(ds.batch([4])[0], [[8.0, 9.0]])


def test_npz_mmap_of_compressed_file_says_how_to_fix(tmp_path: Path) -> None:
    np.savez_compressed(tmp_path / "c.npz", x=np.zeros((2, 2)), y=np.zeros(2, dtype=int))
    with pytest.raises(UsageError) as exc:
        load_dataset("npz", path=tmp_path / "c.npz", mmap=True)
    assert "np.savez" in _one_line(exc)


def test_npz_missing_file_or_key_is_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as exc:
        load_dataset("npz", path=tmp_path / "none.npz")
    assert str(tmp_path / "none.npz") in _one_line(exc)
    np.savez(tmp_path / "d.npz", x=np.zeros((2, 2)), y=np.zeros(2, dtype=int))
    with pytest.raises(UsageError) as exc:
        load_dataset("npz", path=tmp_path / "d.npz", y_key="labels")
    assert "'labels'" in _one_line(exc)


# -- synthetic -------------------------------------------------------------------------

SYNTHETIC = ["synthetic_classification", "synthetic_images", "synthetic_regression"]


@pytest.mark.parametrize("name", SYNTHETIC)
def test_synthetic_is_deterministic_per_seed_and_split(name: str) -> None:
    a = load_dataset(name, samples=64, seed=3).batch(np.arange(64))
    b = load_dataset(name, samples=64, seed=3).batch(np.arange(64))
    other_seed = load_dataset(name, samples=64, seed=4).batch(np.arange(64))
    test = load_dataset(name, "test", samples=64, seed=3).batch(np.arange(64))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.allclose(a[0], other_seed[0])
    assert not np.allclose(a[0], test[0])


def _linear_accuracy(name: str, **options: object) -> float:
    """Test accuracy of a least-squares linear classifier fit on the train split."""
    train = load_dataset(name, "train", **options)
    test = load_dataset(name, "test", **options)
    num_classes = train.num_classes
    assert num_classes is not None
    x, y = train.batch(np.arange(len(train)))
    tx, ty = test.batch(np.arange(len(test)))
    x, tx = x.reshape(len(x), -1), tx.reshape(len(tx), -1)
    ones = np.ones((len(x), 1), dtype=np.float32)
    w, *_ = np.linalg.lstsq(np.hstack([x, ones]), np.eye(num_classes)[y], rcond=None)
    pred = np.hstack([tx, np.ones((len(tx), 1), dtype=np.float32)]) @ w
    return float(np.mean(pred.argmax(axis=1) == ty))


def test_synthetic_classification_is_linearly_separable_from_train_to_test() -> None:
    acc = _linear_accuracy("synthetic_classification", samples=400, classes=4)
    assert acc > 0.8  # chance is 0.25
    hard = _linear_accuracy("synthetic_classification", samples=400, classes=4, separability=0.01)
    assert hard < 0.5  # separability controls difficulty


def test_synthetic_images_are_learnable_and_shaped() -> None:
    ds = load_dataset("synthetic_images", samples=10, shape=(1, 6, 5), classes=3)
    assert ds.input_shape == (1, 6, 5) and ds.batch([0, 1])[0].shape == (2, 1, 6, 5)
    acc = _linear_accuracy("synthetic_images", samples=300, shape=(3, 8, 8), classes=5)
    assert acc > 0.8  # chance is 0.2


def test_synthetic_regression_targets_follow_a_shared_linear_model() -> None:
    train = load_dataset("synthetic_regression", samples=300, features=5, noise=0.05)
    test = load_dataset("synthetic_regression", "test", samples=300, features=5, noise=0.05)
    assert train.num_classes is None
    x, y = train.batch(np.arange(300))
    assert y.shape == (300, 1) and y.dtype == np.float32
    ones = np.ones((300, 1), dtype=np.float32)
    w, *_ = np.linalg.lstsq(np.hstack([x, ones]), y, rcond=None)
    tx, ty = test.batch(np.arange(300))
    residual = np.hstack([tx, ones]) @ w - ty
    assert float(np.sqrt(np.mean(residual**2))) < 0.1
    assert float(np.std(ty)) > 0.5


def test_synthetic_rejects_bad_parameters() -> None:
    with pytest.raises(UsageError) as exc:
        load_dataset("synthetic_classification", classes=1)
    assert "classes" in _one_line(exc)
    with pytest.raises(UsageError):
        load_dataset("synthetic_images", shape=(8, 8))


def test_digits_is_read_once_for_both_splits_and_each_split_gets_its_own_arrays() -> None:
    from d5core.lv2.datasets import digits

    digits._digits_and_split.cache_clear()
    train, test = load_dataset("digits", "train"), load_dataset("digits", "test")
    assert digits._digits_and_split.cache_info().misses == 1
    x, _ = train.batch(np.arange(3))
    x[:] = -1.0  # a caller that writes into its batch changes neither the cache nor a reload
    again = load_dataset("digits", "train")
    assert np.all(again.batch(np.arange(3))[0] >= 0.0)
    assert len(train) + len(test) == 1797
