"""Readers of MNIST/Fashion-MNIST (IDX) and CIFAR-10/100 (binary), on files written here."""

from __future__ import annotations

import gzip
import hashlib
import struct
from pathlib import Path

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.lv2.datasets import load_dataset
from d5core.lv2.datasets.idx import read_idx


def _idx_bytes(array: np.ndarray) -> bytes:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write(path: Path, data: bytes, gz: bool) -> None:
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)


def _write_mnist(root: Path, n: int, gz: bool, split: str = "train") -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    prefix = "train" if split == "train" else "t10k"
    _write(root / f"{prefix}-images-idx3-ubyte", _idx_bytes(images), gz)
    _write(root / f"{prefix}-labels-idx1-ubyte", _idx_bytes(labels), gz)
    return images, labels


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_idx_reader_reads_images_and_labels(tmp_path: Path, gz: bool, name: str) -> None:
    images, labels = _write_mnist(tmp_path, 7, gz, split="test")
    ds = load_dataset(name, "test", root=tmp_path)
    assert len(ds) == 7 and ds.input_shape == (1, 28, 28) and ds.num_classes == 10
    x, y = ds.batch([6, 2])
    assert x.shape == (2, 1, 28, 28) and x.dtype == np.float32
    np.testing.assert_allclose(x[0, 0], images[6] / 255, rtol=1e-6)
    np.testing.assert_array_equal(y, labels[[6, 2]])


def test_idx_flatten_and_mmap(tmp_path: Path) -> None:
    images, _ = _write_mnist(tmp_path, 4, gz=False)
    ds = load_dataset("mnist", root=tmp_path, flatten=True, mmap=True)
    assert ds.input_shape == (784,)
    assert isinstance(read_idx(tmp_path / "train-images-idx3-ubyte", mmap=True), np.memmap)
    np.testing.assert_allclose(ds.batch([3])[0][0], images[3].ravel() / 255, rtol=1e-6)


def test_idx_bad_magic_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(b"\x12\x34\x56\x78" + bytes(100))
    with pytest.raises(UsageError) as exc:
        read_idx(path)
    assert "magic" in str(exc.value) and "\n" not in str(exc.value)


def test_idx_truncated_data_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "x"
    path.write_bytes(_idx_bytes(np.zeros((3, 4, 4)))[:-5])
    with pytest.raises(UsageError, match="truncated"):
        read_idx(path)


def test_idx_image_and_label_counts_must_agree(tmp_path: Path) -> None:
    _write_mnist(tmp_path, 5, gz=False)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(_idx_bytes(np.zeros(4)))
    with pytest.raises(UsageError, match="5 images but"):
        load_dataset("mnist", root=tmp_path)


def test_missing_mnist_file_names_exact_path_and_source(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as exc:
        load_dataset("mnist", "test", root=tmp_path)
    message = str(exc.value)
    assert str(tmp_path / "t10k-images-idx3-ubyte") in message and "\n" not in message
    assert "MNIST database" in message
    with pytest.raises(UsageError, match="fashion-mnist"):
        load_dataset("fashion_mnist", root=tmp_path)


def test_default_root_comes_from_d5_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("D5_DATA_DIR", str(tmp_path))
    with pytest.raises(UsageError) as exc:
        load_dataset("cifar10")
    assert str(tmp_path / "cifar10" / "data_batch_1.bin") in str(exc.value)


def test_checksums_option_rejects_a_changed_file(tmp_path: Path) -> None:
    _write_mnist(tmp_path, 3, gz=False)
    good = hashlib.sha256((tmp_path / "train-labels-idx1-ubyte").read_bytes()).hexdigest()
    load_dataset("mnist", root=tmp_path, checksums={"train-labels-idx1-ubyte": good})
    with pytest.raises(UsageError, match="SHA-256"):
        load_dataset("mnist", root=tmp_path, checksums={"train-labels-idx1-ubyte": "0" * 64})


def _cifar_records(n: int, label_values: list[np.ndarray], seed: int) -> tuple[bytes, np.ndarray]:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(n, 3072), dtype=np.uint8)
    labels = np.stack(label_values, axis=1).astype(np.uint8)
    return np.hstack([labels, pixels]).tobytes(), pixels


def test_cifar10_reads_five_train_batches_in_order(tmp_path: Path) -> None:
    all_pixels, all_labels = [], []
    for i in range(1, 6):
        labels = np.arange(3) + i
        data, pixels = _cifar_records(3, [labels], seed=i)
        (tmp_path / f"data_batch_{i}.bin").write_bytes(data)
        all_pixels.append(pixels)
        all_labels.append(labels)
    ds = load_dataset("cifar10", root=tmp_path)
    assert len(ds) == 15 and ds.input_shape == (3, 32, 32) and ds.num_classes == 10
    x, y = ds.batch([0, 14])
    np.testing.assert_array_equal(y, [1, 7])
    np.testing.assert_allclose(x[1], all_pixels[4][2].reshape(3, 32, 32) / 255, rtol=1e-6)


def test_cifar10_test_split_and_bad_sizes(tmp_path: Path) -> None:
    data, _ = _cifar_records(4, [np.array([0, 9, 3, 3])], seed=0)
    (tmp_path / "test_batch.bin").write_bytes(data)
    assert len(load_dataset("cifar10", "test", root=tmp_path)) == 4
    (tmp_path / "test_batch.bin").write_bytes(data[:-1])
    with pytest.raises(UsageError, match="3073-byte records"):
        load_dataset("cifar10", "test", root=tmp_path)
    data, _ = _cifar_records(1, [np.array([12])], seed=0)
    (tmp_path / "test_batch.bin").write_bytes(data)
    with pytest.raises(UsageError, match="out of range"):
        load_dataset("cifar10", "test", root=tmp_path)


def test_cifar10_missing_batch_names_exact_path(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as exc:
        load_dataset("cifar10", root=tmp_path)
    assert str(tmp_path / "data_batch_1.bin") in str(exc.value)
    assert "Krizhevsky" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("label", "classes", "expected"), [("fine", 100, [55, 99]), ("coarse", 20, [4, 19])]
)
def test_cifar100_fine_and_coarse_labels(
    tmp_path: Path, label: str, classes: int, expected: list[int]
) -> None:
    data, pixels = _cifar_records(2, [np.array([4, 19]), np.array([55, 99])], seed=2)
    (tmp_path / "test.bin").write_bytes(data)
    ds = load_dataset("cifar100", "test", root=tmp_path, label=label)
    assert ds.num_classes == classes
    x, y = ds.batch([0, 1])
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_allclose(x[0], pixels[0].reshape(3, 32, 32) / 255, rtol=1e-6)
    with pytest.raises(UsageError, match="3074-byte"):
        (tmp_path / "train.bin").write_bytes(data[:-3])
        load_dataset("cifar100", root=tmp_path)


def test_cifar100_rejects_unknown_label_kind(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="fine"):
        load_dataset("cifar100", root=tmp_path, label="medium")
