"""C++ custom operators for plugins' tests: build one for some frameworks, validate it,
and reach into the build the way the build tests need (its cache key, d5's header).

A framework plugin that offers the ``d5_custom_op_glue`` hook tests it by building d5's
example operator for its framework and validating it against finite differences::

    from d5core.testing.customop import validate_custom

    outcome = validate_custom(EXAMPLE, ["torch"], cache=tmp_path)
    assert outcome.passed
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from d5core.errors import UsageError
from d5core.lv0.customop import builder as _builder
from d5core.lv0.customop import compiler as _compiler
from d5core.lv0.customop.builder import BuildResult, build, cache_key, header_path
from d5core.lv0.customop.compiler import ERROR_LINES
from d5core.lv0.customop.runner import validate_custom

__all__ = [
    "ERROR_LINES",
    "BuildResult",
    "build",
    "cache_key",
    "forbid_compiling",
    "header_path",
    "skip_syntax_check",
    "stop_before_compiling",
    "use_header",
    "validate_custom",
]


def use_header(monkeypatch: pytest.MonkeyPatch, header: Path) -> None:
    """Build against ``header`` instead of d5's ``d5_op.h`` for the rest of the test."""
    monkeypatch.setattr(_builder, "header_path", lambda: header)


def skip_syntax_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Leave out the quick check of the source against d5's header alone, so that an
    error reaches the framework's own compile (for the rest of the test)."""
    monkeypatch.setattr(_builder, "syntax_check", lambda source, include: None)


def stop_before_compiling(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make every framework's build stop, with ``UsageError("stop here")``, just before it
    compiles; the list returned collects the cache key each build would have used."""
    keys: list[str] = []

    def record(glue: Any, spec: Any, text: Any, key: str, final: Any) -> None:
        keys.append(key)
        raise UsageError("stop here")

    monkeypatch.setattr(_builder, "_build_one", record)
    return keys


def forbid_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any compile for the rest of the test (the syntax check, a framework's build,
    the shared-library compile) fail the test: for checking that a build comes from the
    cache. The compiler's identity (``--version``) is still read."""

    def no_compiler(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the compiler ran for a cached build")

    monkeypatch.setattr(_builder, "syntax_check", no_compiler)
    monkeypatch.setattr(_compiler, "compile_shared", no_compiler)
    monkeypatch.setattr(_builder, "_build_one", no_compiler)
