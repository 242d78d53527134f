"""The worker process of :mod:`d5core.validate.isolated`
(``python -P -m d5core.validate._check_worker``).

It reads ``{"target": "module:function", "args": {...}, "path": [...]}`` (``path``: the
parent's ``sys.path``, put first) from standard input and
writes JSON lines on a private standard output: ``{"phase": NAME}`` as the check enters
each phase, then ``{"event": "result", "data": ...}`` or ``{"event": "error", "message":
"one line", "usage": bool}``, then ``{"event": "done"}``.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

from d5core.worker_protocol import emit, one_line, protocol_stream


def main() -> int:
    """Run the one check read from standard input; see the module docstring."""
    request = json.load(sys.stdin)
    added = [p for p in request.get("path", []) if p not in sys.path]
    sys.path[:0] = added  # the parent's import path, first, as the parent sees it
    out = protocol_stream()
    emit(out, {"event": "start", "pid": os.getpid()})

    def phase(name: str) -> None:
        emit(out, {"event": "phase", "phase": name})

    phase("load")
    try:
        from d5core.errors import UsageError

        module, _, function = str(request["target"]).partition(":")
        check = getattr(importlib.import_module(module), function)
        event = {"event": "result", "data": check(phase=phase, **request["args"])}
    except Exception as exc:
        usage = isinstance(exc, UsageError)  # bad input: its own words, exit 2
        message = " ".join(str(exc).split()) if usage else one_line(exc)
        event = {"event": "error", "message": message, "usage": usage}
    emit(out, event)
    emit(out, {"event": "done"})
    out.flush()
    sys.stderr.flush()
    os._exit(0)  # a framework's teardown has nothing left to report


if __name__ == "__main__":
    sys.exit(main())
