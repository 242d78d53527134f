"""The line protocol of d5's worker processes (the measuring worker of
:mod:`d5core.measure.invocations` and the LoadGen worker of :mod:`d5core.loadgen`):
JSON events, one per line, on a private copy of standard output, while whatever the
frameworks print goes to standard error.

It imports nothing but the standard library and d5core.errors: a worker imports it before
it sets its thread variables, so it must not load numpy or a framework.
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any

from d5core.errors import one_line

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
