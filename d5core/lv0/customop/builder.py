"""Build a C++ custom operator for every installed framework, cached.

Each framework's build lives in its own folder of the cache
(``<cache>/<framework>/<op>-<key>``), where the key hashes the source, d5's header, the
compiler (``g++ --version``), the framework's version and the plugin's glue code. A build
is made in a temporary folder beside it and renamed into place only when it succeeded,
so a failed build leaves nothing behind; a cached build runs no compiler.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from d5core.errors import UsageError
from d5core.levels.operators import Operator
from d5core.lv0.customop.compiler import compiler_identity, syntax_check
from d5core.lv0.customop.glue import BuildRequest, CustomOpGlue, Kernels, available_glues
from d5core.lv0.customop.spec import OpSpec, read_spec
from d5core.plugins import PluginManager

__all__ = [
    "CACHE_ENV",
    "BuildResult",
    "FrameworkBuild",
    "build",
    "cache_dir",
    "cache_key",
    "header_path",
    "include_dir",
]

#: The environment variable that moves the cache from ``~/.cache/d5/ops``.
CACHE_ENV = "D5_OP_CACHE"
_MANIFEST = "manifest.json"

#: Loaded artifacts, by path: a framework loads a library once per process.
_LOADED: dict[Path, Kernels] = {}


def include_dir() -> Path:
    """The folder holding ``d5_op.h``, the header custom operators include."""
    return Path(__file__).resolve().parent / "include"


def header_path() -> Path:
    """``d5_op.h`` itself."""
    return include_dir() / "d5_op.h"


def cache_dir(explicit: Path | str | None = None) -> Path:
    """Where builds are cached: ``explicit``, else ``$D5_OP_CACHE``, else ``~/.cache/d5/ops``."""
    chosen = explicit or os.environ.get(CACHE_ENV, "").strip() or "~/.cache/d5/ops"
    return Path(chosen).expanduser().resolve()


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

    def kernels(self) -> Kernels:
        """Load the artifact (once per process) and return its kernels."""
        found = _LOADED.get(self.artifact)
        if found is None:
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
    """The glues to build with, in the order asked; a note for each one skipped."""
    names = list(glues) if frameworks is None else list(frameworks)
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


def _prepared_source(text: str, original: Path, workdir: Path) -> Path:
    """A copy of the user's source that the compiler reports as the original file."""
    copy = workdir / "op.cpp"
    escaped = str(original).replace("\\", "\\\\").replace('"', '\\"')
    copy.write_text(f'#line 1 "{escaped}"\n{text}')
    return copy


def _build_one(
    glue: CustomOpGlue, spec: OpSpec, text: str, key: str, final: Path
) -> FrameworkBuild:
    """Build with ``glue`` in a temporary folder and move it to ``final`` on success."""
    final.parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
    started = time.perf_counter()
    try:
        source = _prepared_source(text, spec.source, workdir)
        request = BuildRequest(spec, source, include_dir(), f"{spec.name}_{key[:12]}", glue.name)
        artifact = Path(glue.build(request, workdir))
        if not artifact.is_absolute():
            artifact = workdir / artifact
        if not artifact.is_file():
            raise UsageError(f"the {glue.name} glue built no {artifact.name}; fix its plugin")
        seconds = time.perf_counter() - started
        manifest = {"op": spec.name, "framework": glue.name, "version": glue.version(),
                    "artifact": artifact.relative_to(workdir).as_posix(), "key": key,
                    "build_seconds": seconds, "spec": spec.to_json()}  # fmt: skip
        (workdir / _MANIFEST).write_text(json.dumps(manifest, indent=2))
        try:
            os.rename(workdir, final)
        except OSError:  # another process finished the same build first: keep theirs
            shutil.rmtree(workdir, ignore_errors=True)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return _from_cache(glue, spec, key, final, cached=False)


def _from_cache(
    glue: CustomOpGlue, spec: OpSpec, key: str, directory: Path, *, cached: bool
) -> FrameworkBuild:
    manifest = json.loads((directory / _MANIFEST).read_text())
    return FrameworkBuild(glue.name, directory, directory / manifest["artifact"], key, cached,
                          float(manifest["build_seconds"]), spec, glue)  # fmt: skip


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
        when ``None``. One that is not installed, or that no plugin builds for, is
        skipped with a note, never an error.
    :param cache: the cache folder; see :func:`cache_dir`.
    :param on_note: told each note as it is made (a framework skipped).
    :param on_built: told each framework's build as it is done.
    :raises UsageError: for a source that declares no operator, or a compile error (the
        compiler's first error lines); nothing of a failed build is cached.
    """
    started = time.perf_counter()
    source = Path(path).expanduser().resolve()
    spec = read_spec(source)
    text = source.read_text()
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
    root = cache_dir(cache)
    header = header_path().read_bytes()
    identity = compiler_identity()
    checked = False
    builds: dict[str, FrameworkBuild] = {}
    for glue in chosen:
        key = cache_key(text.encode(), header, identity, glue.name, glue.version(),
                        _glue_code(glue))  # fmt: skip
        final = root / glue.name / f"{spec.name}-{key[:16]}"
        if (final / _MANIFEST).is_file():
            done = _from_cache(glue, spec, key, final, cached=True)
        else:
            if not checked:  # the user's own errors first, without any framework's headers
                syntax_check(source, include_dir())
                checked = True
            done = _build_one(glue, spec, text, key, final)
        builds[glue.name] = done
        if on_built is not None:
            on_built(done)
    return BuildResult(spec, source, builds, notes, time.perf_counter() - started)
