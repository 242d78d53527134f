"""Running a check of user or plugin code in a worker process with a time limit.

A check (``"module:function"``, called with JSON arguments and a ``phase`` callback, and
returning JSON) runs in ``python -P -m d5core.validate._check_worker``, which dies with
this process and reports on a private standard output, one JSON line each: the phase
it enters (``load``, ``forward``, ...), then the check's result or the exception it
raised. Whatever kills the worker (a segmentation fault, ``abort()``, an uncaught C++
throw, ``exit(0)`` from native code) or keeps it past ``timeout_s`` becomes a one-line
:attr:`IsolatedResult.failure` naming the signal and the last phase, never the end of
d5.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from d5core.errors import UsageError
from d5core.worker_protocol import die_with_parent

__all__ = ["DEFAULT_TIMEOUT_S", "IsolatedResult", "check_timeout", "run_isolated"]

#: The time limit of one check worker, in seconds, unless ``--timeout`` says otherwise.
DEFAULT_TIMEOUT_S = 300.0
_WORKER = "d5core.validate._check_worker"
#: What the C library, the C++ runtime or a framework prints as a process dies.
_FATAL = re.compile(r"Segmentation fault|terminate called|free\(\)|corruption|Fatal Python")


@dataclass(frozen=True)
class IsolatedResult:
    """What one check worker gave: the check's JSON result, or why there is none."""

    #: The check's return value; ``None`` when it raised or the worker ended without it.
    data: Any = None
    #: One line on why there is no result (empty when there is one).
    failure: str = ""
    #: The check raised :class:`~d5core.errors.UsageError` (bad input, not a failed check).
    usage: bool = False
    #: The last phase the worker reported.
    phase: str = ""


def check_timeout(value: float) -> float:
    """``value`` when it is a usable time limit in seconds.

    :raises UsageError: for zero, a negative, NaN or infinite value.
    """
    if not (value > 0 and value < float("inf")):
        raise UsageError(f"--timeout must be a positive number of seconds, not {value!r}")
    return float(value)


def _ending(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code} without reporting a result"


def run_isolated(target: str, args: Mapping[str, Any], *, timeout_s: float) -> IsolatedResult:
    """Run the check ``target`` on ``args`` in a fresh worker, killed after ``timeout_s``."""
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", _WORKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent(),
    )
    # the worker imports from where this process does (a plugin on a path added at run
    # time included), never from the working directory (-P)
    path = [p for p in sys.path if p and os.path.abspath(p) != os.getcwd()]
    request = json.dumps({"target": target, "args": dict(args), "path": path})
    try:
        stdout, stderr = proc.communicate(request, timeout=timeout_s)
        ending = _ending(proc.returncode) if proc.returncode else ""
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        ending = f"did not finish within its time limit of {timeout_s:g} s (--timeout)"
    phase, found = "starting", None
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("phase"):
            phase = str(event["phase"])
        elif isinstance(event, dict) and event.get("event") in ("result", "error"):
            found = event
    if found is not None and found["event"] == "result" and not ending:
        return IsolatedResult(data=found.get("data"), phase=phase)
    if found is not None and found["event"] == "error":
        return IsolatedResult(failure=str(found.get("message", "")), phase=phase,
                              usage=bool(found.get("usage")))  # fmt: skip
    timed_out = ending.startswith("did not finish")
    ending = ending or _ending(0)
    lines = [x for x in stderr.splitlines() if x.strip() and not x.startswith(" ")]
    fatal = [x for x in lines if _FATAL.search(x)]  # the first: a handler may say more
    said = f" ({' '.join(fatal[0].split())[:200]})" if fatal and not timed_out else ""
    return IsolatedResult(failure=f"the worker {ending} during {phase}{said}", phase=phase)
