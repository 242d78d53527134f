"""The ``python_stdlib_text`` dataset: next-character prediction on Python's own sources.

Every machine that runs d5 has the text: the ``.py`` files of the running Python's
standard library (``sysconfig.get_path("stdlib")``). Nothing is downloaded.

What is read, and in which order, depends on the files alone:

- the ``.py`` files under the stdlib folder, less third-party packages
  (``site-packages``, ``dist-packages``), test suites (any ``test``/``tests`` folder,
  ``idlelib/idle_test``, ``lib2to3/tests``...), ``__pycache__``, and the files the
  build generates for one machine (``_sysconfigdata_*.py``, ``config-*/``);
- ordered by the SHA-256 of each file's path relative to the stdlib folder (POSIX
  form), so the order is the same on every machine and in every process;
- a file belongs to the validation split when the first 64 bits of that hash, as a
  fraction of 2**64, fall below ``validation_fraction``, else to the training split:
  adding or removing one file never moves another file between splits;
- each split's files are concatenated (bytes, each file followed by a newline), cut to
  ``max_bytes`` when given, and encoded with a fixed vocabulary
  (:data:`VOCABULARIES`) that never depends on the data;
- the token stream is cut into non-overlapping windows: example ``i`` is positions
  ``[i*L, i*L + L)`` as input and ``[i*L + 1, i*L + L + 1)`` as targets (``L`` =
  ``seq_len``), so targets are the next character at every position.

The dataset records its identity (:meth:`StdlibTextDataset.identity`: Python version,
file count, bytes, SHA-256 of the text used), which goes into the run's stored data
manifest and its hash. With ``reference_sha256`` (a digest measured on a reference
machine, which a recipe may fix) a different text is reported on stderr and in the
identity, so runs on another stdlib are never mistaken for comparable ones.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from d5core.errors import UsageError
from d5core.levels.training import Dataset
from d5core.lv2.datasets._common import check_split

__all__ = [
    "ASCII_UNKNOWN",
    "NAME",
    "VOCABULARIES",
    "StdlibText",
    "StdlibTextDataset",
    "decode",
    "encode",
    "load_python_stdlib_text",
    "stdlib_files",
    "vocabulary_size",
]

#: The dataset's entry-point name.
NAME = "python_stdlib_text"
#: ``bytes``: every byte is a token (256). ``ascii``: id 0 for any other byte, 1 for
#: newline, 2 for tab, 3 + (c - 32) for the printable characters 32..126 (98 in all).
VOCABULARIES: dict[str, int] = {"bytes": 256, "ascii": 98}
#: The id of bytes the ``ascii`` vocabulary has no token for.
ASCII_UNKNOWN = 0
#: Folder names whose contents are never read: third-party packages, test suites,
#: bytecode caches.
EXCLUDED_DIRS = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
)


def _ascii_table() -> np.ndarray:
    table = np.full(256, ASCII_UNKNOWN, dtype=np.int64)
    table[ord("\n")] = 1
    table[ord("\t")] = 2
    table[32:127] = np.arange(3, 98, dtype=np.int64)
    return table


_ASCII = _ascii_table()


def vocabulary_size(vocab: str) -> int:
    """The number of token ids of the vocabulary ``vocab``.

    :raises UsageError: for a name not in :data:`VOCABULARIES`.
    """
    if vocab not in VOCABULARIES:
        raise UsageError(
            f"dataset {NAME!r}: vocab {vocab!r} is unknown; choose one of {', '.join(VOCABULARIES)}"
        )
    return VOCABULARIES[vocab]


def encode(text: bytes, vocab: str = "ascii") -> np.ndarray:
    """The token ids (int64) of ``text`` under the fixed vocabulary ``vocab``."""
    vocabulary_size(vocab)
    raw = np.frombuffer(text, dtype=np.uint8)
    return raw.astype(np.int64) if vocab == "bytes" else _ASCII[raw]


def decode(ids: Sequence[int] | np.ndarray, vocab: str = "ascii") -> str:
    """Text from token ids; under ``ascii`` the unknown id shows as U+FFFD."""
    vocabulary_size(vocab)
    values = [int(i) for i in np.asarray(ids).reshape(-1)]
    if vocab == "bytes":
        return bytes(values).decode("utf-8", errors="replace")
    chars = {1: "\n", 2: "\t", **{3 + c - 32: chr(c) for c in range(32, 127)}}
    return "".join(chars.get(i, "\ufffd") for i in values)


def _path_hash(relative: str) -> str:
    return hashlib.sha256(relative.encode("utf-8")).hexdigest()


def _excluded(parts: tuple[str, ...]) -> bool:
    folders, name = parts[:-1], parts[-1]
    if any(p in EXCLUDED_DIRS or p.startswith("config-") for p in folders):
        return True
    return name.startswith("_sysconfigdata")


def stdlib_files(root: str | os.PathLike[str] | None = None) -> list[tuple[str, Path]]:
    """The files the dataset reads, as ``(relative POSIX path, path)``, in their fixed
    order (by SHA-256 of the relative path).

    :param root: the folder to read; the running Python's stdlib by default.
    """
    base = Path(root) if root is not None else Path(sysconfig.get_path("stdlib"))
    found: list[tuple[str, str, Path]] = []
    for folder, dirs, names in os.walk(base):
        # excluded folders are never entered (site-packages alone can hold 25,000 files)
        dirs[:] = [d for d in dirs if d not in EXCLUDED_DIRS and not d.startswith("config-")]
        here = Path(folder)
        prefix = here.relative_to(base).parts
        for name in names:
            parts = (*prefix, name)
            if not name.endswith(".py") or _excluded(parts) or not (here / name).is_file():
                continue
            relative = "/".join(parts)
            found.append((_path_hash(relative), relative, here / name))
    found.sort()
    return [(relative, path) for _, relative, path in found]


@dataclass(frozen=True)
class StdlibText:
    """One split's text before encoding, and where it came from."""

    text: bytes
    files: int
    files_in_split: int
    bytes_in_split: int


def read_split(
    split: str,
    *,
    validation_fraction: float,
    max_bytes: int | None,
    root: str | os.PathLike[str] | None = None,
) -> StdlibText:
    """The concatenated text of ``split`` (``"train"`` or ``"test"``), cut to ``max_bytes``."""
    want_test = split == "test"
    chunks: list[bytes] = []
    used = total = count = 0
    for relative, path in stdlib_files(root):
        in_test = int(_path_hash(relative)[:16], 16) / 2.0**64 < validation_fraction
        if in_test != want_test:
            continue
        data = path.read_bytes() + b"\n"
        count += 1
        total += len(data)
        if max_bytes is None or used < max_bytes:
            take = data if max_bytes is None else data[: max_bytes - used]
            chunks.append(take)
            used += len(take)
    files_used = len(chunks)
    return StdlibText(b"".join(chunks), files_used, count, total)


class StdlibTextDataset(Dataset):
    """Windows of ``seq_len`` token ids and their next-token targets.

    ``batch(indices)`` gives ``x`` and ``y`` as int64 arrays of shape
    ``(len(indices), seq_len)``: the targets are the inputs shifted by one position.

    :param tokens: the encoded text (int64).
    :param seq_len: positions per example.
    :param vocab: the vocabulary's name (:data:`VOCABULARIES`).
    :param name: the dataset's name, with its split.
    :param identity: what the text is (see :meth:`identity`).
    """

    def __init__(
        self,
        tokens: np.ndarray,
        seq_len: int,
        *,
        vocab: str,
        name: str,
        identity: dict[str, Any],
    ) -> None:
        self.tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        self.seq_len = int(seq_len)
        self.vocab = vocab
        self.name = name
        self.input_shape = (self.seq_len,)
        self.num_classes = vocabulary_size(vocab)
        self._count = max(0, (len(self.tokens) - 1) // self.seq_len)
        self._identity = dict(identity, examples=self._count, seq_len=self.seq_len)
        # row i of x is tokens[i*L : i*L+L]; of y, one position later
        used = self._count * self.seq_len
        self._x = self.tokens[:used].reshape(self._count, self.seq_len)
        self._y = self.tokens[1 : used + 1].reshape(self._count, self.seq_len)

    def __len__(self) -> int:
        return self._count

    def batch(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx = np.asarray(indices, dtype=np.int64)
        return self._x[idx].copy(), self._y[idx].copy()

    def identity(self) -> dict[str, Any]:
        """What text this is: ``python`` (version), ``implementation``, ``stdlib``
        (folder), ``files`` (files read), ``files_in_split``, ``bytes`` (bytes read),
        ``bytes_in_split``, ``sha256`` (of the bytes read), ``vocab``, ``tokens``,
        ``examples``, ``seq_len``, and ``reference_sha256``/``matches_reference`` when a
        reference digest was given."""
        return dict(self._identity)

    def digest(self) -> str:
        """The SHA-256 of the text read (the data manifest's digest of this split)."""
        return str(self._identity["sha256"])

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}: {len(self)} x {self.input_shape}>"


def _check(split: str, seq_len: Any, max_bytes: Any, fraction: Any, vocab: Any) -> None:
    check_split(NAME, split)
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise UsageError(f"dataset {NAME!r}: seq_len must be a positive integer, got {seq_len!r}")
    if max_bytes is not None and (
        isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= seq_len
    ):
        raise UsageError(
            f"dataset {NAME!r}: max_bytes must be an integer above seq_len ({seq_len}), "
            f"got {max_bytes!r}; leave it out to read every file"
        )
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction < 1:
        raise UsageError(
            f"dataset {NAME!r}: validation_fraction must lie strictly between 0 and 1, "
            f"got {fraction!r}"
        )
    if not isinstance(vocab, str):
        raise UsageError(f"dataset {NAME!r}: vocab must be a name, got {vocab!r}")
    vocabulary_size(vocab)


def load_python_stdlib_text(
    split: str,
    *,
    seq_len: int = 128,
    max_bytes: int | None = None,
    validation_fraction: float = 0.1,
    vocab: str = "ascii",
    reference_sha256: str | None = None,
    root: str | None = None,
) -> StdlibTextDataset:
    """The ``python_stdlib_text`` entry: see the module docstring.

    :param split: ``"train"``, or ``"test"`` (the validation files).
    :param seq_len: positions per example (input and target windows).
    :param max_bytes: read at most this many bytes of the split's text (in file order);
        all of it by default (about 11 MB train, 1 MB validation on CPython 3.11).
    :param validation_fraction: the share of files (by path hash) in the validation split.
    :param vocab: ``"ascii"`` (98 ids) or ``"bytes"`` (256 ids).
    :param reference_sha256: the text's digest on a reference machine; a different text
        here is reported (stderr and ``identity()["matches_reference"]``), not refused.
    :param root: read this folder instead of the running Python's stdlib (tests).
    :raises UsageError: one line, for a bad option or a split with too little text.
    """
    _check(split, seq_len, max_bytes, validation_fraction, vocab)
    folder = Path(root) if root is not None else Path(sysconfig.get_path("stdlib"))
    if not folder.is_dir():
        raise UsageError(f"dataset {NAME!r}: the stdlib folder {folder} does not exist")
    text = read_split(
        split, validation_fraction=float(validation_fraction), max_bytes=max_bytes, root=folder
    )
    if len(text.text) <= seq_len:
        raise UsageError(
            f"dataset {NAME!r}: the {split} split has {len(text.text)} bytes in "
            f"{text.files} files under {folder}, too few for seq_len {seq_len}; "
            "lower seq_len or raise validation_fraction"
        )
    digest = hashlib.sha256(text.text).hexdigest()
    identity: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "stdlib": str(folder),
        "files": text.files,
        "files_in_split": text.files_in_split,
        "bytes": len(text.text),
        "bytes_in_split": text.bytes_in_split,
        "sha256": digest,
        "vocab": vocab,
        "tokens": len(text.text),
        "order": "sha256 of the relative path",
        "validation_fraction": float(validation_fraction),
    }
    if reference_sha256 is not None:
        matches = digest == str(reference_sha256).lower()
        identity["reference_sha256"] = str(reference_sha256).lower()
        identity["matches_reference"] = matches
        if not matches:
            print(
                f"d5: note: dataset {NAME}/{split}: this Python's stdlib text (Python "
                f"{identity['python']}, {text.files} files, {len(text.text)} bytes, sha256 "
                f"{digest[:12]}) differs from the recipe's reference "
                f"({identity['reference_sha256'][:12]}); results are not comparable with "
                "runs on the reference text",
                file=sys.stderr,
            )
    tokens = encode(text.text, vocab)
    return StdlibTextDataset(
        tokens, seq_len, vocab=vocab, name=f"{NAME}/{split}", identity=identity
    )
