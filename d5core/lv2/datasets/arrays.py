"""Datasets held in arrays: in memory, in ``.npz`` files, or memory-mapped from them."""

from __future__ import annotations

import os
import struct
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from d5core.errors import UsageError
from d5core.levels.training import Dataset
from d5core.lv2.datasets._common import check_split

__all__ = ["ArrayDataset", "load_arrays", "load_npz", "memmap_npz_member"]


class ArrayDataset(Dataset):
    """A dataset over two indexable arrays ``x`` and ``y`` with one row per example.

    Rows are converted to float32 only when a batch is taken, so ``x`` may be a
    ``uint8`` array or a ``np.memmap`` larger than memory.

    :param x: inputs, shape ``(n, ...)``.
    :param y: labels, shape ``(n,)`` (integers: classification) or targets (floats:
        regression).
    :param name: the dataset's name.
    :param num_classes: the number of classes; inferred from integer labels as
        ``max(y) + 1`` when not given, ``None`` for float labels.
    :param input_shape: the shape each example is reshaped to (same size as a row of
        ``x``); the row's own shape by default.
    :param scale: a factor applied to inputs (e.g. ``1/255`` for bytes).
    :param files: the files the arrays were read from, if any: their digest is the
        dataset's (see :func:`d5core.lv2.datasets.data_manifest`).
    """

    def __init__(
        self,
        x: np.ndarray,
        y: np.ndarray,
        *,
        name: str = "arrays",
        num_classes: int | None = None,
        input_shape: Sequence[int] | None = None,
        scale: float | None = None,
        files: Sequence[str | os.PathLike[str]] = (),
    ) -> None:
        if len(x) != len(y):
            raise UsageError(f"dataset {name!r}: x has {len(x)} rows but y has {len(y)}")
        self.x, self.y, self.name, self.scale = x, y, name, scale
        self.files: tuple[Path, ...] = tuple(Path(f) for f in files)
        row_shape = tuple(int(d) for d in x.shape[1:])
        self.input_shape = tuple(int(d) for d in input_shape) if input_shape else row_shape
        if int(np.prod(self.input_shape)) != int(np.prod(row_shape)):
            raise UsageError(
                f"dataset {name!r}: input_shape {self.input_shape} does not hold "
                f"rows of shape {row_shape}"
            )
        self._classification = np.issubdtype(y.dtype, np.integer)
        if num_classes is None and self._classification:
            num_classes = int(np.max(y)) + 1 if len(y) else 0
        self.num_classes = num_classes if self._classification else None

    def __len__(self) -> int:
        return len(self.x)

    def batch(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx = np.asarray(indices, dtype=np.int64)
        x = np.asarray(self.x[idx], dtype=np.float32).reshape(len(idx), *self.input_shape)
        if self.scale is not None:
            x *= np.float32(self.scale)
        y = np.asarray(self.y[idx], dtype=np.int64 if self._classification else np.float32)
        return x, y

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}: {len(self)} x {self.input_shape}>"


def load_arrays(
    split: str,
    *,
    x: Any,
    y: Any,
    display_name: str = "arrays",
    num_classes: int | None = None,
) -> ArrayDataset:
    """The ``arrays`` entry: wrap arrays the caller already holds (one split's worth)."""
    check_split("arrays", split)
    return ArrayDataset(
        np.asarray(x), np.asarray(y), name=f"{display_name}/{split}", num_classes=num_classes
    )


def memmap_npz_member(path: Path, key: str) -> np.ndarray:
    """Memory-map array ``key`` of an uncompressed ``.npz`` file (``np.savez``) read-only.

    ``np.load`` cannot memory-map members of an ``.npz``; they are plain ``.npy``
    files stored uncompressed in the zip, so their data can be mapped at its offset.
    """
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise UsageError(f"{path} is not a readable .npz file: {exc}") from None
    with archive as zf:
        try:
            info = zf.getinfo(f"{key}.npy")
        except KeyError:
            raise UsageError(f"{path} has no array {key!r}") from None
        if info.compress_type != zipfile.ZIP_STORED:
            raise UsageError(
                f"{path} is compressed and cannot be memory-mapped; "
                f"save it with np.savez (not savez_compressed) or load with mmap=False"
            )
    with path.open("rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
        if header[:4] != b"PK\x03\x04":
            raise UsageError(f"{path} is not a valid .npz file (bad zip header for {key!r})")
        name_len, extra_len = struct.unpack("<HH", header[26:30])
        f.seek(info.header_offset + 30 + name_len + extra_len)
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        offset = f.tell()
    if dtype.hasobject:
        raise UsageError(f"{path}: array {key!r} holds Python objects and cannot be mapped")
    return np.memmap(
        path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C"
    )


def load_npz(
    split: str,
    *,
    path: str | os.PathLike[str],
    x_key: str = "x",
    y_key: str = "y",
    mmap: bool = False,
    num_classes: int | None = None,
    display_name: str = "npz",
) -> ArrayDataset:
    """The ``npz`` entry: arrays ``x_key``/``y_key`` of an ``.npz`` file.

    ``path`` may contain ``{split}``, replaced by the split's name. With ``mmap=True``
    the arrays are memory-mapped (the file must come from ``np.savez``), so only the
    rows of each batch are read: data larger than memory works.
    """
    check_split("npz", split)
    file = Path(str(path).format(split=split)).expanduser()
    if not file.is_file():
        raise UsageError(f"dataset 'npz': file {file} not found; give an existing path")
    if not zipfile.is_zipfile(file):
        raise UsageError(
            f"{file} is not an .npz file (no zip archive: empty, truncated or another "
            f"format); write it with numpy.savez"
        )
    if mmap:
        x = memmap_npz_member(file, x_key)
        y = memmap_npz_member(file, y_key)
    else:
        try:
            with np.load(file, allow_pickle=False) as data:
                missing = [k for k in (x_key, y_key) if k not in data.files]
                if missing:
                    raise UsageError(
                        f"{file} has no array {missing[0]!r} (it has: {', '.join(data.files)})"
                    )
                x, y = data[x_key], data[y_key]
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise UsageError(f"{file} is not a readable .npz file: {exc}") from exc
    return ArrayDataset(
        x, y, name=f"{display_name}/{split}", num_classes=num_classes, files=(file,)
    )
