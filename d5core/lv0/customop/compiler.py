"""The C++ compiler as custom operator builds use it: who it is, and one compile.

A failed compile becomes a :class:`~d5core.errors.UsageError` whose message holds the
compiler's first error lines (``file:line:column: error: ...``); the full output is left
to the user's own rerun, since the first error is the one to fix.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from d5core.errors import UsageError

__all__ = [
    "ERROR_LINES",
    "compile_shared",
    "compiler",
    "compiler_identity",
    "first_errors",
    "syntax_check",
]

#: How many of the compiler's error lines a failed build shows.
ERROR_LINES = 4

_ERROR = re.compile(r"^(?P<where>[^\s:][^:]*:\d+(?::\d+)?): (?:fatal )?error: ")


def compiler() -> str:
    """The C++ compiler: ``$CXX``, else ``g++``.

    :raises UsageError: when it is not on the ``PATH``.
    """
    cxx = os.environ.get("CXX", "").strip() or "g++"
    if shutil.which(cxx) is None:
        raise UsageError(
            f"no C++ compiler {cxx!r} on the PATH; install g++ (or set CXX) to build "
            f"custom operators"
        )
    return cxx


@functools.lru_cache(maxsize=4)
def _identity(cxx: str) -> str:
    done = subprocess.run(
        [cxx, "--version"], capture_output=True, encoding="utf-8", errors="replace", check=False
    )
    return f"{cxx}\n{done.stdout.strip()}"


def compiler_identity() -> str:
    """The compiler's name and its ``--version`` output, part of every cache key."""
    return _identity(compiler())


def first_errors(output: str, limit: int = ERROR_LINES) -> list[str]:
    """The first ``limit`` error lines of a compiler's ``output`` (``file:line: error:``);
    its first lines when it printed no such line (a linker error, say)."""
    lines = [line.rstrip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if _ERROR.match(line)]
    return (errors or lines)[:limit]


def _run(command: Sequence[str], what: str) -> None:
    """Run the compiler; a failure is a :class:`UsageError` with its first error lines,
    or with why it printed none (killed by a signal, or not a compiler)."""
    try:
        done = subprocess.run(
            command, capture_output=True, encoding="utf-8", errors="replace", check=False
        )
    except OSError as exc:
        raise UsageError(f"cannot run the C++ compiler {command[0]!r}: {exc.strerror}") from None
    if done.returncode == 0:
        return
    lines = first_errors(done.stderr or done.stdout)
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        lines = [f"the compiler was killed by {name} (out of memory?)", *lines]
    elif not lines:
        lines = [
            f"{command[0]} exited with status {done.returncode} and printed nothing; "
            f"is $CXX a C++ compiler?"
        ]
    shown = "\n  ".join(lines)
    raise UsageError(f"compiling {what} failed:\n  {shown}")


def compile_shared(
    sources: Sequence[Path],
    output: Path,
    flags: Sequence[str],
    *,
    what: str,
) -> None:
    """Compile ``sources`` into the shared library ``output``.

    :param flags: include paths, definitions and link flags of the framework.
    :param what: what is built, for the message (``bias_gelu for torch``).
    :raises UsageError: when the compiler fails: its first error lines, under one line
        saying what failed.
    """
    command = [
        compiler(), "-std=c++17", "-O2", "-shared", "-fPIC",
        "-fdiagnostics-color=never", *map(str, sources), "-o", str(output), *flags,
    ]  # fmt: skip
    _run(command, what)


def syntax_check(source: Path, include_dir: Path) -> None:
    """Check ``source`` against d5's header alone: the quick way to show the user's own
    errors before any framework's headers are compiled.

    :raises UsageError: with the compiler's first error lines.
    """
    command = [compiler(), "-std=c++17", "-fsyntax-only", "-fdiagnostics-color=never",
               f"-I{include_dir}", str(source)]  # fmt: skip
    _run(command, str(source))
