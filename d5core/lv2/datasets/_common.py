"""Helpers shared by the dataset readers: splits, data folders, checksums."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from d5core.errors import UsageError

__all__ = [
    "DATA_DIR_VAR",
    "SPLITS",
    "check_split",
    "data_root",
    "file_sha256",
    "split_index",
    "verify_sha256",
]

#: The variable naming the folder that holds one sub-folder per file-based dataset.
DATA_DIR_VAR = "D5_DATA_DIR"
#: The splits every built-in dataset offers.
SPLITS: tuple[str, ...] = ("train", "test")


def check_split(dataset: str, split: str) -> str:
    """Return ``split`` when ``dataset`` has it, else raise a one-line :class:`UsageError`."""
    if split not in SPLITS:
        raise UsageError(
            f"dataset {dataset!r} has no split {split!r}; choose one of {', '.join(SPLITS)}"
        )
    return split


def split_index(split: str) -> int:
    """A small integer per split, mixed into derived seeds."""
    return SPLITS.index(split)


def data_root(dataset: str, root: str | os.PathLike[str] | None) -> Path:
    """The folder a file-based dataset is read from.

    ``root`` when given; else ``$D5_DATA_DIR/<dataset>``; else
    ``~/.cache/d5/datasets/<dataset>``.
    """
    if root is not None:
        return Path(root).expanduser()
    base = os.environ.get(DATA_DIR_VAR)
    if base:
        return Path(base).expanduser() / dataset
    return Path.home() / ".cache" / "d5" / "datasets" / dataset


def verify_sha256(path: Path, checksums: Mapping[str, str] | None) -> None:
    """Check ``path`` against ``checksums[path.name]`` when such an entry exists."""
    if not checksums or path.name not in checksums:
        return
    digest = file_sha256(path)
    expected = checksums[path.name].lower()
    if digest != expected:
        raise UsageError(
            f"{path} has SHA-256 {digest}, expected {expected}; "
            f"the file is corrupt or not the official one: download it again"
        )


def file_sha256(path: Path) -> str:
    """The SHA-256 hex digest of the file at ``path``, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
