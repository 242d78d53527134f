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
    "check_data_dir",
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


def check_data_dir() -> Path | None:
    """``$D5_DATA_DIR`` as a path, checked: a folder this process can list; ``None``
    when the variable is unset or empty.

    :raises UsageError: one line, when it names a file, a device, a missing folder or
        one that cannot be read (a run would otherwise ignore it, or record it as where
        its data came from).
    """
    value = os.environ.get(DATA_DIR_VAR, "")
    if not value:
        return None
    base = Path(value).expanduser()
    fix = f"point {DATA_DIR_VAR} at the folder that holds one sub-folder per dataset, or unset it"
    if not base.exists():
        raise UsageError(f"{DATA_DIR_VAR}={value!r}: no such folder; {fix}")
    if not base.is_dir():
        what = "a file" if base.is_file() else "not a folder (a device or another special file)"
        raise UsageError(f"{DATA_DIR_VAR}={value!r} is {what}; {fix}")
    try:
        with os.scandir(base):
            pass
    except OSError as exc:
        raise UsageError(
            f"{DATA_DIR_VAR}={value!r} cannot be read ({exc.strerror or exc}); {fix}"
        ) from None
    if not os.access(base, os.R_OK | os.X_OK):
        raise UsageError(f"{DATA_DIR_VAR}={value!r} cannot be read (permission denied); {fix}")
    return base


def data_root(dataset: str, root: str | os.PathLike[str] | None) -> Path:
    """The folder a file-based dataset is read from.

    ``root`` when given; else ``$D5_DATA_DIR/<dataset>`` (checked by
    :func:`check_data_dir`); else ``~/.cache/d5/datasets/<dataset>``.
    """
    if root is not None:
        return Path(root).expanduser()
    base = check_data_dir()
    if base is not None:
        return base / dataset
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
