"""Readers of the IDX format of MNIST and Fashion-MNIST (plain or gzipped files)."""

from __future__ import annotations

import gzip
import math
import os
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from d5core.errors import UsageError
from d5core.lv2.datasets._common import check_split, data_root, verify_sha256
from d5core.lv2.datasets.arrays import ArrayDataset

__all__ = ["IDX_FILES", "find_idx_file", "load_fashion_mnist", "load_mnist", "read_idx"]

#: The files of each split: (images, labels), as distributed.
IDX_FILES: dict[str, tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

#: Where users obtain each dataset's files.
SOURCES: dict[str, str] = {
    "mnist": "Yann LeCun's MNIST database page (or any mirror of its four idx files)",
    "fashion_mnist": "Zalando Research's fashion-mnist repository on GitHub "
    "(zalandoresearch/fashion-mnist, folder data/fashion)",
}

_DTYPES: dict[int, str] = {
    0x08: "u1",
    0x09: "i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}


def read_idx(path: Path, *, mmap: bool = False) -> np.ndarray:
    """Read an IDX file (``.gz`` decompressed in memory), checking magic and sizes.

    :param mmap: memory-map a plain (not gzipped) file instead of reading it.
    :raises UsageError: one short line for a file that is not IDX, truncated or corrupt
        (a damaged ``.gz`` included).
    """
    try:
        return _read_idx(path, mmap=mmap)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise UsageError(
            f"{path} is truncated or corrupt ({_one_line(exc)}); download it again"
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {_one_line(exc)}") from None


def _one_line(exc: BaseException, limit: int = 80) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shape_text(shape: tuple[int, ...]) -> str:
    """A shape in a few characters, however many dimensions a damaged header lists."""
    if len(shape) <= 4:
        return str(shape)
    return f"({shape[0]}, {shape[1]}, ... {len(shape)} dimensions)"


def _read_idx(path: Path, *, mmap: bool) -> np.ndarray:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        head = f.read(4)
        if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in _DTYPES:
            raise UsageError(
                f"{path} is not an IDX file (bad magic number {head.hex() or 'empty'}); "
                f"use the original files, decompressed or .gz"
            )
        dtype, ndim = np.dtype(_DTYPES[head[2]]), head[3]
        dims_raw = f.read(4 * ndim)
        if len(dims_raw) < 4 * ndim:
            raise UsageError(f"{path} is truncated: its header lists {ndim} dimensions")
        shape = tuple(int(d) for d in np.frombuffer(dims_raw, dtype=">u4"))
        offset = 4 + 4 * ndim
        expected = math.prod(shape) * dtype.itemsize
        if mmap and opener is open:
            size = path.stat().st_size - offset
            _check_size(path, shape, size, expected)
            return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)
        raw = f.read()
    _check_size(path, shape, len(raw), expected)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _count_text(n: int) -> str:
    """A byte count in at most a few characters (a damaged header can ask for 10^2000)."""
    if n < 10**15:
        return str(n)
    return f"about 2^{n.bit_length() - 1}"


def _check_size(path: Path, shape: tuple[int, ...], size: int, expected: int) -> None:
    if size != expected:
        raise UsageError(
            f"{path} is truncated or corrupt: its header {_shape_text(shape)} needs "
            f"{_count_text(expected)} data bytes, it holds {size}"
        )


def find_idx_file(root: Path, filename: str, dataset: str) -> Path:
    """``root/filename`` or ``root/filename.gz``; a one-line error when neither exists."""
    for candidate in (root / filename, root / f"{filename}.gz"):
        if candidate.is_file():
            return candidate
    raise UsageError(
        f"dataset {dataset!r}: {root / filename} (or {filename}.gz) not found; "
        f"download it from {SOURCES[dataset]} and put it there, or pass root=FOLDER"
    )


def _load(
    dataset: str,
    split: str,
    root: str | os.PathLike[str] | None,
    flatten: bool,
    mmap: bool,
    checksums: Mapping[str, str] | None,
) -> ArrayDataset:
    check_split(dataset, split)
    folder = data_root(dataset, root)
    image_name, label_name = IDX_FILES[split]
    image_path = find_idx_file(folder, image_name, dataset)
    label_path = find_idx_file(folder, label_name, dataset)
    for p in (image_path, label_path):
        verify_sha256(p, checksums)
    images, labels = read_idx(image_path, mmap=mmap), read_idx(label_path, mmap=mmap)
    if images.ndim != 3 or labels.ndim != 1:
        raise UsageError(
            f"{image_path} must hold 3-d images and {label_path} 1-d labels; "
            f"they hold shapes {images.shape} and {labels.shape}"
        )
    if len(images) != len(labels):
        raise UsageError(
            f"{image_path} holds {len(images)} images but {label_path} {len(labels)} labels"
        )
    h, w = images.shape[1:]
    return ArrayDataset(
        images,
        labels,
        name=f"{dataset}/{split}",
        num_classes=10,
        input_shape=(h * w,) if flatten else (1, h, w),
        scale=1 / 255,
        files=(image_path, label_path),
    )


def load_mnist(
    split: str,
    *,
    root: str | os.PathLike[str] | None = None,
    flatten: bool = False,
    mmap: bool = False,
    checksums: Mapping[str, str] | None = None,
) -> ArrayDataset:
    """The ``mnist`` entry: 28x28 digits, inputs ``(1, 28, 28)`` (``(784,)`` flattened).

    :param root: the folder of the four idx files (see :func:`data_root`).
    :param mmap: memory-map the (uncompressed) files instead of reading them.
    :param checksums: file name to expected SHA-256 hex digest, checked when listed.
    """
    return _load("mnist", split, root, flatten, mmap, checksums)


def load_fashion_mnist(
    split: str,
    *,
    root: str | os.PathLike[str] | None = None,
    flatten: bool = False,
    mmap: bool = False,
    checksums: Mapping[str, str] | None = None,
) -> ArrayDataset:
    """The ``fashion_mnist`` entry: the same format and options as ``mnist``."""
    return _load("fashion_mnist", split, root, flatten, mmap, checksums)
