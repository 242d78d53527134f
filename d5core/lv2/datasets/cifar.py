"""Readers of the binary versions of CIFAR-10 and CIFAR-100."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from d5core.errors import UsageError
from d5core.lv2.datasets._common import check_split, data_root, verify_sha256
from d5core.lv2.datasets.arrays import ArrayDataset

__all__ = ["CIFAR10_FILES", "CIFAR100_FILES", "load_cifar10", "load_cifar100", "read_records"]

#: CIFAR-10's files per split (folder ``cifar-10-batches-bin`` of the binary version).
CIFAR10_FILES: dict[str, tuple[str, ...]] = {
    "train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)),
    "test": ("test_batch.bin",),
}
#: CIFAR-100's files per split (folder ``cifar-100-binary`` of the binary version).
CIFAR100_FILES: dict[str, tuple[str, ...]] = {"train": ("train.bin",), "test": ("test.bin",)}

_PIXELS = 3 * 32 * 32
_SOURCE = (
    "the CIFAR page of Alex Krizhevsky at the University of Toronto (the 'binary version' archive)"
)


def read_records(path: Path, label_bytes: int) -> np.ndarray:
    """The records of a CIFAR binary file: ``(n, label_bytes + 3072)`` uint8."""
    record = label_bytes + _PIXELS
    size = path.stat().st_size
    if size == 0 or size % record:
        raise UsageError(
            f"{path} has {size} bytes, not a multiple of the {record}-byte records of "
            f"this CIFAR binary version; is it the right dataset, and complete?"
        )
    return np.fromfile(path, dtype=np.uint8).reshape(-1, record)


def _load(
    dataset: str,
    files: tuple[str, ...],
    root: str | os.PathLike[str] | None,
    label_bytes: int,
    label_byte: int,
    num_classes: int,
    split: str,
    checksums: Mapping[str, str] | None,
) -> ArrayDataset:
    folder = data_root(dataset, root)
    parts = []
    paths = [folder / name for name in files]
    for name in files:
        path = folder / name
        if not path.is_file():
            raise UsageError(
                f"dataset {dataset!r}: {path} not found; download the binary version "
                f"from {_SOURCE}, unpack it and put its .bin files there, or pass root=FOLDER"
            )
        verify_sha256(path, checksums)
        parts.append(read_records(path, label_bytes))
    records = parts[0] if len(parts) == 1 else np.concatenate(parts)
    labels = records[:, label_byte]
    if len(labels) and int(labels.max()) >= num_classes:
        raise UsageError(
            f"dataset {dataset!r} in {folder}: label {int(labels.max())} is out of range "
            f"0..{num_classes - 1}; the files are of another dataset or corrupt"
        )
    return ArrayDataset(
        records[:, label_bytes:],
        labels,
        name=f"{dataset}/{split}",
        num_classes=num_classes,
        input_shape=(3, 32, 32),
        scale=1 / 255,
        files=paths,
    )


def load_cifar10(
    split: str,
    *,
    root: str | os.PathLike[str] | None = None,
    checksums: Mapping[str, str] | None = None,
) -> ArrayDataset:
    """The ``cifar10`` entry: 32x32 colour images ``(3, 32, 32)`` in [0, 1], 10 classes.

    :param root: the folder holding ``data_batch_1.bin`` … ``data_batch_5.bin`` and
        ``test_batch.bin``.
    :param checksums: file name to expected SHA-256 hex digest, checked when listed.
    """
    check_split("cifar10", split)
    return _load("cifar10", CIFAR10_FILES[split], root, 1, 0, 10, split, checksums)


def load_cifar100(
    split: str,
    *,
    root: str | os.PathLike[str] | None = None,
    label: str = "fine",
    checksums: Mapping[str, str] | None = None,
) -> ArrayDataset:
    """The ``cifar100`` entry: like ``cifar10`` with 100 fine or 20 coarse classes.

    :param root: the folder holding ``train.bin`` and ``test.bin``.
    :param label: ``"fine"`` (100 classes) or ``"coarse"`` (20 superclasses).
    """
    check_split("cifar100", split)
    if label not in ("fine", "coarse"):
        raise UsageError(f"dataset 'cifar100': label must be 'fine' or 'coarse', not {label!r}")
    fine = label == "fine"
    return _load(
        "cifar100",
        CIFAR100_FILES[split],
        root,
        2,
        1 if fine else 0,
        100 if fine else 20,
        split,
        checksums,
    )
