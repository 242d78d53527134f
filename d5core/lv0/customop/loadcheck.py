"""Load a freshly built custom operator in a child process, before it is cached.

A library can build and still not load: it may link a symbol nothing defines, or a
static initializer may crash, abort or never return. Loading it first in a child
process, with a time limit and bound to die with d5, turns each of these into one line
saying why the framework was not built, and d5 itself never runs the library until it
has loaded once without harm.

The child reads, on its standard input, ``sys.path`` and then the glue, the artifact
and the operator's declaration (pickled), calls the glue's ``load`` and answers with one
JSON line on a private copy of its standard output.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["LOAD_SECONDS", "LoadFailed", "check_loads", "main"]

#: How long a child may take to load a build (importing a framework included).
LOAD_SECONDS = 300.0

_UNDEFINED = re.compile(r"undefined symbol: ?([^\s,;:'\"()]+)")


class LoadFailed(Exception):
    """A build that does not load; its text is the reason, in one line."""


def _demangled(symbol: str) -> str:
    """``symbol`` as C++ spells it, when ``c++filt`` is at hand."""
    tool = shutil.which("c++filt")
    if tool is None or not symbol.startswith("_Z"):
        return symbol
    try:
        done = subprocess.run([tool, symbol], capture_output=True, text=True, timeout=10,
                              check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return symbol
    shown = done.stdout.strip()
    return f"{shown} ({symbol})" if shown and shown != symbol else symbol


def _reason(error: str) -> str:
    found = _UNDEFINED.search(error)
    if found is not None:
        return (
            f"its library links the undefined symbol {_demangled(found.group(1))}; "
            f"define it in the source (a custom operator links nothing else)"
        )
    return f"loading its library failed: {error[:300]}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def check_loads(glue: Any, artifact: Path, spec: Any, *, seconds: float | None = None) -> None:
    """Load ``artifact`` with ``glue`` in a child process.

    :raises LoadFailed: with the reason in one line: an undefined symbol (demangled), the
        loader's error, the signal that killed the child, or the time limit.
    """
    from d5core.worker_protocol import die_with_parent

    limit = LOAD_SECONDS if seconds is None else seconds
    try:
        payload = pickle.dumps(list(sys.path)) + pickle.dumps((glue, Path(artifact), spec))
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise LoadFailed(
            f"its plugin's glue cannot be handed to a child process to load the library "
            f"({type(exc).__name__}); fix the plugin"
        ) from None
    command = [sys.executable, "-c", "from d5core.lv0.customop.loadcheck import main; main()"]
    try:
        done = subprocess.run(command, input=payload, capture_output=True, timeout=limit,
                              preexec_fn=die_with_parent(), check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise LoadFailed(
            f"loading its library did not finish within {limit:g} s (a static initializer "
            f"that never returns, or a machine far too busy?)"
        ) from None
    stderr = done.stderr.decode("utf-8", "replace")
    lines = done.stdout.decode("utf-8", "replace").splitlines()
    answer: dict[str, Any] = {}
    if lines:
        try:
            answer = json.loads(lines[-1])
        except ValueError:
            answer = {}
    if answer.get("ok") is True:
        return
    if "error" in answer:
        raise LoadFailed(_reason(str(answer["error"])))
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        said = _last_line(stderr)
        raise LoadFailed(
            f"loading its library crashed the process with {name}" + (f" ({said})" if said else "")
        )
    said = _last_line(stderr)
    raise LoadFailed(
        f"loading its library ended the process with status {done.returncode}"
        + (f" ({said})" if said else "")
    )


def main() -> None:
    """The child: load what the standard input names, answer in one JSON line."""
    from d5core.worker_protocol import emit, one_line, protocol_stream

    stream = protocol_stream()
    source = sys.stdin.buffer
    sys.path[:] = pickle.load(source)
    try:
        glue, artifact, spec = pickle.load(source)
        glue.load(artifact, spec)
    except BaseException as exc:
        said, seen = [one_line(exc)], {id(exc)}
        cause = exc.__cause__ or exc.__context__
        while cause is not None and id(cause) not in seen:  # a framework's wrapper hides why
            seen.add(id(cause))
            said.append(one_line(cause))
            cause = cause.__cause__ or cause.__context__
        emit(stream, {"ok": False, "error": " <- ".join(said)})
        return
    emit(stream, {"ok": True})
    sys.stderr.flush()
    os._exit(0)  # a framework's own teardown is not the build's business
