"""The line protocol of d5's worker processes (the measuring worker of
:mod:`d5core.measure.invocations` and the LoadGen worker of :mod:`d5core.inference`):
JSON events, one per line, on a private copy of standard output, while whatever the
frameworks print goes to standard error.

Standard library only: a worker imports this before it sets its thread variables, so it
must not load numpy or a framework.
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any

__all__ = ["emit", "one_line", "protocol_stream"]


def protocol_stream() -> IO[str]:
    """A private copy of standard output; fd 1 and ``sys.stdout`` then go to stderr."""
    sys.stdout.flush()
    stream = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stream


def emit(stream: IO[str], event: dict[str, Any]) -> None:
    """Write one event as a JSON line and flush it."""
    stream.write(json.dumps(event) + "\n")
    stream.flush()


def one_line(exc: BaseException) -> str:
    """``exc`` as one line: its type and its message with the white space folded."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
