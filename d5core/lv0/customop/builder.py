"""Build a C++ custom operator for every installed framework, cached.

Each framework's build lives in its own folder of the cache
(``<cache>/<framework>/<op>-<key>``), where the key hashes the source, d5's header, the
compiler (``g++ --version``), the framework's version and the plugin's glue code. A build
is made in a temporary folder beside it, loaded once in a child process (so a library
that links an undefined symbol, or whose static initializer crashes, is reported as not
built and never cached), and renamed into place only when all of that succeeded, so a
failed build leaves nothing behind; a cached build runs no compiler.

The cache is trusted only as ssh trusts a key file (see :mod:`.cache`): folders and
entries of another user, or writable by others, are refused; each entry records its
artifact's SHA-256, checked before the artifact is loaded; an entry of the user's own
that is corrupt is built again.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from d5core.errors import UsageError
from d5core.levels.operators import Operator
from d5core.lv0.customop.cache import (
    CACHE_ENV,
    MANIFEST,
    CacheRoot,
    CorruptEntry,
    check_folder,
    check_tree,
    discard,
    file_digest,
    read_entry,
    resolve_root,
    verify_artifact,
)
from d5core.lv0.customop.compiler import compiler_identity, syntax_check
from d5core.lv0.customop.glue import BuildRequest, CustomOpGlue, Kernels, available_glues
from d5core.lv0.customop.loadcheck import LoadFailed, check_loads
from d5core.lv0.customop.spec import OpSpec, parse_spec
from d5core.plugins import PluginManager

__all__ = [
    "CACHE_ENV",
    "MAX_SOURCE_BYTES",
    "BuildResult",
    "FrameworkBuild",
    "build",
    "cache_dir",
    "cache_key",
    "header_path",
    "include_dir",
    "read_source",
]

_MANIFEST = MANIFEST
#: The largest source ``d5 op build`` reads: a custom operator is one file of C++.
MAX_SOURCE_BYTES = 16 << 20
#: The frameworks d5's own plugins build custom operators for: asking for one whose
#: plugin is not installed is a note; any other unknown name is an error.
_D5_FRAMEWORKS = ("mxnet", "numpy", "tensorflow", "torch")

#: Loaded artifacts, by path: a framework loads a library once per process.
_LOADED: dict[Path, Kernels] = {}


def include_dir() -> Path:
    """The folder holding ``d5_op.h``, the header custom operators include."""
    return Path(__file__).resolve().parent / "include"


def header_path() -> Path:
    """``d5_op.h`` itself."""
    return include_dir() / "d5_op.h"


def cache_dir(explicit: Path | str | None = None) -> Path:
    """Where builds are cached: ``explicit``, else ``$D5_OP_CACHE``, else ``~/.cache/d5/ops``
    (absolute; nothing is checked or created)."""
    return resolve_root(explicit).path


def _glue_code(glue: CustomOpGlue) -> bytes:
    """The source of the module defining ``glue``'s class: its generated code changes
    with it, so it is part of the key."""
    try:
        found = inspect.getsourcefile(type(glue))
        return Path(found).read_bytes() if found else b""
    except (OSError, TypeError):
        return type(glue).__qualname__.encode()


def cache_key(
    source: bytes, header: bytes, compiler: str, framework: str, version: str, glue: bytes
) -> str:
    """The hash that names one framework's build of one source (hex SHA-256)."""
    digest = hashlib.sha256()
    for part in (source, header, compiler.encode(), framework.encode(), version.encode(), glue):
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


@dataclass
class FrameworkBuild:
    """One framework's build of the operator."""

    framework: str
    directory: Path
    artifact: Path
    key: str
    #: Whether it came from the cache (no compiler ran).
    cached: bool
    #: Seconds the build took (for a cached one: when it was built, as recorded).
    build_seconds: float
    spec: OpSpec
    glue: CustomOpGlue = field(repr=False)
    #: The artifact's SHA-256, recorded when it was built and checked before it is loaded.
    sha256: str = ""

    def kernels(self) -> Kernels:
        """Load the artifact (once per process) and return its kernels.

        :raises UsageError: when the artifact's owner, mode or hash changed since it was
            built; it is then not loaded.
        """
        found = _LOADED.get(self.artifact)
        if found is None:
            verify_artifact(self.artifact, self.sha256)
            found = self.glue.load(self.artifact, self.spec)
            _LOADED[self.artifact] = found
        return found

    def create(self, attributes: Mapping[str, Any] | None = None) -> Operator:
        """The level-0 operator with ``attributes`` (checked; the rest defaulted).

        :raises UsageError: for an undeclared attribute or a value of the wrong type.
        """
        from d5core.lv0.customop.operator import CustomOperator

        resolved = self.spec.resolve_attributes(attributes)
        return CustomOperator(self.spec, self.framework, self.kernels(), resolved)

    def to_json(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "artifact": str(self.artifact),
            "key": self.key,
            "sha256": self.sha256,
            "cached": self.cached,
            "build_seconds": self.build_seconds,
        }


@dataclass
class BuildResult:
    """What :func:`build` made: the operator's declaration, a build per framework, and
    one note per framework that was skipped."""

    spec: OpSpec
    source: Path
    builds: dict[str, FrameworkBuild]
    notes: list[str]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.spec.name,
            "source": str(self.source),
            "spec": self.spec.to_json(),
            "builds": [b.to_json() for b in self.builds.values()],
            "skipped": list(self.notes),
            "seconds": self.seconds,
        }


def _select(
    glues: Mapping[str, CustomOpGlue], frameworks: Sequence[str] | None, notes: list[str]
) -> list[CustomOpGlue]:
    """The glues to build with, in the order asked; a note for each one skipped.

    :raises UsageError: for a name no installed plugin and no plugin of d5's builds for.
    """
    names = list(glues) if frameworks is None else list(dict.fromkeys(frameworks))
    known = sorted(set(glues) | set(_D5_FRAMEWORKS))
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UsageError(
            f"unknown framework {unknown[0]!r} for custom operators; the known ones: "
            f"{', '.join(known)}"
        )
    chosen = []
    for name in names:
        glue = glues.get(name)
        if glue is None:
            notes.append(f"{name}: skipped, no installed d5 plugin builds custom operators for it")
        elif not glue.available():
            notes.append(f"{name}: skipped, {name} is not installed")
        else:
            chosen.append(glue)
    return chosen


def read_source(path: Path | str) -> tuple[Path, str]:
    """The custom operator source ``path``, absolute, and its text.

    :raises UsageError: for a path that is missing, a folder, a device or pipe, or whose
        name holds a control character (a newline); for a file that is empty, binary, not
        UTF-8 or over :data:`MAX_SOURCE_BYTES`. One line each.
    """
    try:
        source = Path(path).expanduser().resolve()
    except (RuntimeError, OSError):
        raise UsageError(f"custom operator source {str(path)!a} cannot be resolved; "
                         f"give the path of its .cpp file") from None  # fmt: skip
    for shown in (str(path), str(source)):
        if any(ord(c) < 32 or ord(c) == 127 for c in shown):
            raise UsageError(
                f"the custom operator source's name {shown!a} holds a control "
                f"character (a newline?); rename the file"
            )
    try:
        info = source.stat()
    except FileNotFoundError:
        raise UsageError(f"custom operator source {source} does not exist") from None
    except OSError as exc:
        raise UsageError(f"cannot read custom operator source {source}: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise UsageError(f"custom operator source {source} is a folder; give its .cpp file")
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(
            f"custom operator source {source} is not a regular file (a device or a pipe); "
            f"give its .cpp file"
        )
    if info.st_size > MAX_SOURCE_BYTES:
        raise UsageError(
            f"custom operator source {source} is {info.st_size} bytes; a custom operator "
            f"is one C++ file of at most {MAX_SOURCE_BYTES >> 20} MiB"
        )
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read custom operator source {source}: {exc.strerror}") from None
    if not data.strip():
        raise UsageError(
            f"custom operator source {source} is empty; declare the operator as d5_op.h "
            f"shows (D5_OP_NAME, D5_OP_INPUTS, D5_OP_OUTPUTS, forward, backward)"
        )
    if b"\0" in data:
        raise UsageError(f"custom operator source {source} is a binary file, not C++ text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"custom operator source {source} is not UTF-8 text (byte "
            f"0x{data[exc.start]:02x} at offset {exc.start}); give a C++ source file"
        ) from None
    return source, text


def _c_string(text: str) -> str:
    """``text`` (a file name) as a C++ string literal: printable ASCII as itself, save
    the backslash, the quote and ``?`` (trigraphs), and every other byte in octal."""
    out = []
    for byte in os.fsencode(text):
        char = chr(byte)
        if char in '\\"?':
            out.append("\\" + char)
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _prepared_source(text: str, original: Path, workdir: Path) -> Path:
    """A copy of the user's source that the compiler reports as the original file."""
    copy = workdir / "op.cpp"
    copy.write_text(f"#line 1 {_c_string(str(original))}\n{text}", encoding="utf-8")
    return copy


def _unwritable(folder: Path, exc: OSError) -> UsageError:
    return UsageError(
        f"cannot write the custom operator cache {folder}: {exc.strerror}; point "
        f"{CACHE_ENV} (or --cache) at a folder you can write"
    )


def _private(workdir: Path) -> None:
    """Take write permission from group and others on everything built, whatever the
    umask: the cache refuses what others can write."""
    for folder, names, files in os.walk(workdir):
        for name in [*names, *files]:
            path = Path(folder, name)
            info = path.lstat()
            if not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o022:
                path.chmod(stat.S_IMODE(info.st_mode) & ~0o022)


def _build_one(
    glue: CustomOpGlue, spec: OpSpec, text: str, key: str, final: Path
) -> FrameworkBuild:
    """Build with ``glue`` in a temporary folder, load it once in a child process, and
    move it to ``final`` on success.

    :raises LoadFailed: when the library does not load; nothing is cached.
    """
    try:
        final.parent.mkdir(mode=0o700, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
    except OSError as exc:
        raise _unwritable(final.parent, exc) from None
    started = time.perf_counter()
    try:
        source = _prepared_source(text, spec.source, workdir)
        request = BuildRequest(spec, source, include_dir(), f"{spec.name}_{key[:12]}", glue.name)
        artifact = Path(glue.build(request, workdir))
        if not artifact.is_absolute():
            artifact = workdir / artifact
        if not artifact.is_file():
            raise UsageError(f"the {glue.name} glue built no {artifact.name}; fix its plugin")
        _private(workdir)
        check_loads(glue, artifact, spec)
        seconds = time.perf_counter() - started
        manifest = {"op": spec.name, "framework": glue.name, "version": glue.version(),
                    "artifact": artifact.relative_to(workdir).as_posix(), "key": key,
                    "sha256": file_digest(artifact),
                    "build_seconds": seconds, "spec": spec.to_json()}  # fmt: skip
        (workdir / _MANIFEST).write_text(json.dumps(manifest, indent=2))
        (workdir / _MANIFEST).chmod(0o600)
        try:
            os.rename(workdir, final)
        except OSError:  # another process finished the same build first: keep theirs
            shutil.rmtree(workdir, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        where = f" ({exc.filename})" if exc.filename else ""
        raise UsageError(
            f"building {spec.name} for {glue.name} in the custom operator cache "
            f"{final.parent} failed: {exc.strerror or exc}{where}; free space there, or point "
            f"{CACHE_ENV} (or --cache) at a folder you can write"
        ) from None
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    root = CacheRoot(final.parent.parent, "the default cache")
    try:
        entry = read_entry(final, root)
    except CorruptEntry as why:
        raise UsageError(f"the build just cached in {final} is corrupt ({why})") from None
    return _made(glue, spec, key, final, entry.manifest, entry.sha256, cached=False)


def _made(
    glue: CustomOpGlue,
    spec: OpSpec,
    key: str,
    directory: Path,
    manifest: Mapping[str, Any],
    sha256: str,
    *,
    cached: bool,
) -> FrameworkBuild:
    return FrameworkBuild(glue.name, directory, directory / manifest["artifact"], key, cached,
                          float(manifest["build_seconds"]), spec, glue, sha256)  # fmt: skip


def build(
    path: Path | str,
    frameworks: Sequence[str] | None = None,
    *,
    cache: Path | str | None = None,
    manager: PluginManager | None = None,
    on_note: Callable[[str], None] | None = None,
    on_built: Callable[[FrameworkBuild], None] | None = None,
) -> BuildResult:
    """Build the custom operator in ``path`` for each framework, or take it from the cache.

    :param frameworks: the frameworks to build for, by glue name; every installed one
        when ``None``. One that is not installed, that no installed plugin builds for, or
        whose library does not load (an undefined symbol, a crashing static initializer)
        is skipped with a note.
    :param cache: the cache folder; see :func:`cache_dir`.
    :param on_note: told each note as it is made (a framework skipped, a corrupt cache
        entry built again).
    :param on_built: told each framework's build as it is done.
    :raises UsageError: for a source that cannot be read or declares no operator, an
        unknown framework name, a cache folder or entry that cannot be used or trusted
        (another user's, or writable by others), or a compile error (the compiler's first
        error lines); nothing of a failed build is cached.
    """
    started = time.perf_counter()
    source, text = read_source(path)
    spec = parse_spec(text, source)
    notes: list[str] = []

    def note(line: str) -> None:
        notes.append(line)
        if on_note is not None:
            on_note(line)

    glues = available_glues(manager, on_note=note)
    skipped: list[str] = []
    chosen = _select(glues, frameworks, skipped)
    for line in skipped:
        note(line)
    root = resolve_root(cache)
    check_tree(root)
    header = header_path().read_bytes()
    identity = compiler_identity() if chosen else ""
    checked = False
    builds: dict[str, FrameworkBuild] = {}
    for glue in chosen:
        key = cache_key(text.encode(), header, identity, glue.name, glue.version(),
                        _glue_code(glue))  # fmt: skip
        final = root.path / glue.name / f"{spec.name}-{key[:16]}"
        done = None
        if check_folder(final.parent, root) and os.path.lexists(final):
            try:
                entry = read_entry(final, root)
                done = _made(glue, spec, key, final, entry.manifest, entry.sha256, cached=True)
            except CorruptEntry as why:
                if on_note is not None:
                    on_note(f"{glue.name}: the cached build {final.name} is corrupt ({why}); "
                            f"building it again")  # fmt: skip
                discard(final)
        if done is None:
            if not checked:  # the user's own errors first, without any framework's headers
                syntax_check(source, include_dir())
                checked = True
            try:
                done = _build_one(glue, spec, text, key, final)
            except LoadFailed as why:
                note(f"{glue.name}: not built, {why}")
                continue
        builds[glue.name] = done
        if on_built is not None:
            on_built(done)
    return BuildResult(spec, source, builds, notes, time.perf_counter() - started)
