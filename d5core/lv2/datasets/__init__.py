"""Datasets by name: the ``d5.datasets`` entry points and the built-in readers.

Each entry of the ``d5.datasets`` group is a factory ``(split, **options) -> Dataset``;
:func:`load_dataset` finds it by name and checks the split and options first.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from d5core.levels.training import check_options, load_dataset
from d5core.lv2.datasets._common import DATA_DIR_VAR, file_sha256
from d5core.lv2.datasets.arrays import ArrayDataset

__all__ = ["ArrayDataset", "check_options", "data_manifest", "load_dataset"]


def _array_digest(*arrays: np.ndarray) -> str:
    """SHA-256 over each array's dtype, shape and bytes (C order)."""
    digest = hashlib.sha256()
    for a in arrays:
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8).data)
    return digest.hexdigest()


def _file_entries(files: tuple[Any, ...]) -> list[dict[str, Any]]:
    return [
        {
            "path": str(Path(f).absolute()),
            "bytes": Path(f).stat().st_size,
            "sha256": file_sha256(Path(f)),
        }
        for f in files
    ]


def _combined(entries: list[dict[str, Any]]) -> str:
    """One digest of several files: of their names and digests, in order."""
    text = "".join(f"{Path(e['path']).name}:{e['sha256']};" for e in entries)
    return hashlib.sha256(text.encode()).hexdigest()


def data_manifest(dataset: Any) -> dict[str, Any]:
    """What a run read from ``dataset``: a content digest, and where it came from.

    A dataset read from files (``dataset.files``) is digested file by file, so that
    ``sha256sum`` gives the same figures; one held in arrays (``x`` and ``y``: digits,
    synthetic sets) by its arrays; another one by its own ``digest()`` when it has one.
    Keys: ``name``, ``sha256`` (``None`` when the dataset offers no way to digest it,
    with ``note`` saying so), ``files`` (``path``, ``bytes``, ``sha256`` each) and
    ``data_dir`` (``$D5_DATA_DIR``, or ``None``); plus ``identity``, what a dataset's
    own ``identity()`` says it is (the stdlib text: Python version, file count, bytes).
    """
    out: dict[str, Any] = {
        "name": str(getattr(dataset, "name", type(dataset).__name__)),
        "sha256": None,
        "files": [],
        "data_dir": os.environ.get(DATA_DIR_VAR) or None,
    }
    files = tuple(getattr(dataset, "files", ()) or ())
    x, y = getattr(dataset, "x", None), getattr(dataset, "y", None)
    own = getattr(dataset, "digest", None)
    if files:
        out["files"] = _file_entries(files)
        out["sha256"] = _combined(out["files"])
    elif isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
        out["sha256"] = _array_digest(x, y)
    elif callable(own):
        out["sha256"] = str(own())
    else:
        out["note"] = f"{type(dataset).__name__} offers no content digest"
    identity = getattr(dataset, "identity", None)
    if callable(identity):
        out["identity"] = dict(identity())
    return out
