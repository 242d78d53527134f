"""The custom operator build cache, guarded the way ssh guards its keys.

A cached build is a shared library d5 loads into its own process, so whoever can write
the cache can run code as the user. d5 therefore trusts a cache folder only when no one
else can change what it finds there:

- the folder, and every folder or file of an entry in it, belongs to the current user
  (or to root) and is writable by no group and no other user;
- every folder above it belongs to the current user or root and is writable by no one
  else, unless its sticky bit is set (``/tmp``): others may then add names to it, but not
  rename or remove the user's own;
- each build records the SHA-256 of its artifact in its manifest, and the artifact is
  hashed again before it is loaded.

A folder or entry that fails the first two rules is refused with one line, never
loaded and never removed (it may be another user's). An entry of the user's own that is
incomplete or garbled (a truncated library, an unreadable manifest, a hash that does
not match) is corrupt: it is removed and built again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from d5core.errors import UsageError

__all__ = [
    "CACHE_ENV",
    "MANIFEST",
    "CacheRoot",
    "CorruptEntry",
    "Entry",
    "check_folder",
    "check_owned",
    "check_path_text",
    "check_tree",
    "discard",
    "file_digest",
    "read_entry",
    "resolve_root",
    "verify_artifact",
]

#: The environment variable that moves the cache from ``~/.cache/d5/ops``.
CACHE_ENV = "D5_OP_CACHE"
#: The file of an entry that records what was built, and its artifact's hash.
MANIFEST = "manifest.json"
_DEFAULT = "~/.cache/d5/ops"
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
#: Characters a cache path cannot hold: generated C++ includes files by their path
#: (``#include "..."``, where no escape exists), so a quote, a backslash or a control
#: character could end the name and inject code.
_UNSAFE = {'"', "\\"} | {chr(c) for c in range(32)} | {chr(127)}


class CorruptEntry(Exception):
    """A cache entry of the user's own that is incomplete or garbled: built again."""


@dataclass(frozen=True)
class CacheRoot:
    """The cache folder and what chose it (for messages)."""

    path: Path
    #: ``--cache``, ``D5_OP_CACHE`` or ``the default cache``.
    origin: str

    def named(self) -> str:
        """How a message names it: ``D5_OP_CACHE=/x``, ``--cache /x`` or the path."""
        if self.origin == CACHE_ENV:
            return f"{CACHE_ENV}={self.path}"
        if self.origin == "--cache":
            return f"--cache {self.path}"
        return f"the custom operator cache {self.path}"

    def fix(self) -> str:
        """What to do about a folder that cannot be used."""
        if self.origin == "the default cache":
            return f"fix it, or set {CACHE_ENV} to a folder only you can write"
        return f"point {self.origin} at a folder only you can write (default ~/.cache/d5/ops)"


@dataclass(frozen=True)
class Entry:
    """A checked cache entry: its artifact, that artifact's hash and the manifest."""

    artifact: Path
    sha256: str
    manifest: dict[str, Any]


def check_path_text(path: Path, what: str) -> None:
    """Refuse a path whose text holds a control character (a newline), a quote or a
    backslash: generated C++ names it.

    :raises UsageError: naming the character and ``what`` the path is.
    """
    bad = next((c for c in str(path) if c in _UNSAFE), None)
    if bad is not None:
        raise UsageError(
            f"{what} {str(path)!a} holds the character {bad!r}, which d5 does not put "
            f"into generated C++; use a path without quotes, backslashes or control characters"
        )


def resolve_root(explicit: Path | str | None = None) -> CacheRoot:
    """The cache folder (``explicit``, else ``$D5_OP_CACHE``, else ``~/.cache/d5/ops``),
    absolute, with what chose it. Nothing is checked or created.

    :raises UsageError: for a ``~user`` that does not exist.
    """
    if explicit is not None and str(explicit).strip():
        chosen, origin = str(explicit), "--cache"
    elif os.environ.get(CACHE_ENV, "").strip():
        chosen, origin = os.environ[CACHE_ENV].strip(), CACHE_ENV
    else:
        chosen, origin = _DEFAULT, "the default cache"
    try:
        path = Path(chosen).expanduser().resolve()
    except RuntimeError:
        raise UsageError(
            f"{origin} {chosen!r} names a home folder that cannot be found, or a loop of "
            f"links; give a full path"
        ) from None
    except OSError as exc:
        raise UsageError(f"{origin} {chosen!r} cannot be resolved: {exc.strerror}") from None
    return CacheRoot(path, origin)


def _me() -> int:
    return os.geteuid()


def _owner_text(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _trusted_owner(info: os.stat_result) -> bool:
    return info.st_uid in (_me(), 0)


def _check_ancestors(root: CacheRoot) -> None:
    """Every existing folder above the cache (and the cache itself, when it exists but
    is no folder): a folder owned by the user or root, writable by others only when
    sticky."""
    parts = root.path.parts
    for depth in range(1, len(parts) + 1):
        here = Path(*parts[:depth])
        try:
            info = here.lstat()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise UsageError(f"{root.named()}: cannot look at {here}: {exc.strerror}; "
                             f"{root.fix()}") from None  # fmt: skip
        if stat.S_ISLNK(info.st_mode):
            try:
                info = here.stat()
            except OSError as exc:
                raise UsageError(
                    f"{root.named()}: {here} is a link that cannot be followed "
                    f"({exc.strerror}); {root.fix()}"
                ) from None
        if not stat.S_ISDIR(info.st_mode):
            kind = "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else (
                "a file" if stat.S_ISREG(info.st_mode) else "not a folder")  # fmt: skip
            if here == root.path:
                raise UsageError(f"{root.named()} is {kind}, not a folder; {root.fix()}")
            raise UsageError(f"{root.named()} lies under {here}, which is {kind}; {root.fix()}")
        if here == root.path:
            return
        if not _trusted_owner(info):
            raise UsageError(
                f"{root.named()} lies under {here}, owned by {_owner_text(info.st_uid)}, "
                f"who could replace the cache; {root.fix()}"
            )
        if info.st_mode & _OTHERS_WRITE and not info.st_mode & stat.S_ISVTX:
            raise UsageError(
                f"{root.named()} lies under {here}, which others can write "
                f"(mode {stat.S_IMODE(info.st_mode):o}, not sticky) and so replace the "
                f"cache; {root.fix()}"
            )


def check_owned(path: Path, info: os.stat_result, root: CacheRoot) -> None:
    """Refuse ``path`` (of the cache) when another user owns it or others can write it.

    :raises UsageError: as ssh refuses a key file, in one line.
    """
    if not _trusted_owner(info):
        raise UsageError(
            f"{root.named()}: refusing {path}: it is owned by {_owner_text(info.st_uid)}, "
            f"not by you ({_owner_text(_me())}), so it could hold another user's code; "
            + (root.fix() if path == root.path else f"remove it, or {root.fix()}")
        )
    if info.st_mode & _OTHERS_WRITE:
        raise UsageError(
            f"{root.named()}: refusing {path}: others can write it (mode "
            f"{stat.S_IMODE(info.st_mode):o}), so it could hold another user's code; "
            + (root.fix() if path == root.path else "remove it, or chmod go-w it if it is yours")
        )


def check_tree(root: CacheRoot, *, create: bool = True) -> None:
    """Check the cache folder and every folder above it; create it (mode 700) when it is
    missing and ``create`` is true.

    :raises UsageError: for a folder that cannot be used or trusted, in one line.
    """
    default = root.origin == "the default cache"
    check_path_text(root.path, "the custom operator cache" if default else root.origin)
    _check_ancestors(root)
    try:
        info = root.path.lstat()
    except FileNotFoundError:
        if not create:
            return
        try:
            root.path.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            pass
        except OSError as exc:
            raise UsageError(
                f"cannot create {root.named()}: {exc.strerror}; {root.fix()}"
            ) from None
        _check_ancestors(root)
        info = root.path.lstat()
    check_owned(root.path, info, root)


def check_folder(path: Path, root: CacheRoot) -> bool:
    """Whether the cache folder ``path`` (a framework's) exists; refused when it cannot
    be trusted."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise UsageError(f"{root.named()}: cannot look at {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{root.named()}: {path} is not a folder; remove it")
    check_owned(path, info, root)
    return True


def file_digest(path: Path) -> str:
    """The hex SHA-256 of the file ``path``."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_entry(directory: Path, root: CacheRoot) -> Entry:
    """The checked entry in ``directory``.

    :raises UsageError: when any of its files or folders is another user's or writable
        by others (never loaded, never removed).
    :raises CorruptEntry: when it is the user's own but incomplete or garbled.
    """
    top = directory.lstat()
    if not stat.S_ISDIR(top.st_mode):
        check_owned(directory, top, root)
        raise CorruptEntry(f"{directory} is not a folder")
    check_owned(directory, top, root)
    odd: str | None = None
    for folder, names, files in os.walk(directory):
        for name in names + files:
            path = Path(folder, name)
            info = path.lstat()
            check_owned(path, info, root)
            if stat.S_ISLNK(info.st_mode):
                odd = odd or f"{path} is a link"
            elif not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
                odd = odd or f"{path} is not a file"
    if odd is not None:
        raise CorruptEntry(odd)
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        relative = PurePosixPath(manifest["artifact"])
        recorded = manifest["sha256"]
        float(manifest["build_seconds"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CorruptEntry(f"its manifest cannot be read ({type(exc).__name__})") from None
    if not isinstance(recorded, str) or relative.is_absolute() or ".." in relative.parts:
        raise CorruptEntry("its manifest is garbled")
    artifact = directory / relative
    if not artifact.is_file():
        raise CorruptEntry(f"its artifact {relative} is missing")
    if file_digest(artifact) != recorded:
        raise CorruptEntry(f"its artifact {relative} does not match the hash recorded")
    return Entry(artifact, recorded, manifest)


def verify_artifact(artifact: Path, sha256: str) -> None:
    """Just before loading: ``artifact`` is still a regular file of the user's own, not
    writable by others, with the hash recorded when it was built.

    :raises UsageError: when it changed; it is not loaded.
    """
    try:
        info = artifact.lstat()
        same = stat.S_ISREG(info.st_mode) and file_digest(artifact) == sha256
    except OSError:
        info, same = None, False
    trusted = info is not None and _trusted_owner(info) and not info.st_mode & _OTHERS_WRITE
    if not (same and trusted):
        raise UsageError(
            f"the cached build {artifact} changed after d5 checked it (owner, mode or "
            f"SHA-256); it was not loaded: run d5 op build again"
        )


def discard(directory: Path) -> None:
    """Remove a corrupt entry of the user's own: renamed aside first, so a concurrent
    build never sees it half removed."""
    try:
        aside = Path(tempfile.mkdtemp(prefix=".corrupt-", dir=directory.parent))
        os.rename(directory, aside / "entry")
    except OSError:
        aside = None
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    elif directory.is_dir() and not directory.is_symlink():
        shutil.rmtree(directory, ignore_errors=True)
    else:
        directory.unlink(missing_ok=True)
