"""The line protocol of d5's worker processes (the measuring worker of
:mod:`d5core.measure.invocations` and the LoadGen worker of :mod:`d5core.loadgen`):
JSON events, one per line, on a private copy of standard output, while whatever the
frameworks print goes to standard error.

It imports nothing but the standard library and d5core.errors: a worker imports it before
it sets its thread variables, so it must not load numpy or a framework.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import IO, Any

from d5core.errors import one_line

__all__ = ["die_with_parent", "emit", "one_line", "protocol_stream"]

_PR_SET_PDEATHSIG = 1


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


def _death_signal_setter() -> Callable[[int], Any] | None:
    """``prctl(PR_SET_PDEATHSIG, sig)`` resolved now (before any fork), or ``None`` where
    it does not exist (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda sig: prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen` that makes the child get ``sig``
    when this process ends, by SIGKILL included (Linux's ``PR_SET_PDEATHSIG``).

    ``None`` where the kernel cannot, or off the main thread: the death signal follows the
    thread that started the child, and only the main thread's end is the process's.
    """
    setter = _death_signal_setter()
    if setter is None or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()

    def setup() -> None:
        setter(sig)
        if os.getppid() != parent:  # the parent died before the death signal was set
            os._exit(1)

    return setup
