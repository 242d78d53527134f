"""MXNet's profiler as a framework profiler of traced runs (``--trace framework``).

:class:`MXNetTraceProfiler` runs MXNet's own profiler on its symbolic and imperative
operators (and, at level ``full``, its memory counters) from ``start`` to ``stop``,
reads the Chrome trace events it writes and gives them back on the trace's time base:

- an operator's begin and end events (``"B"``/``"E"`` on its engine thread) become one
  complete event named as MXNet names it: the operator (``FullyConnected``), an engine
  operation (``WaitForVar``, ``DeleteVariable``) or, for a bulk of operators MXNet runs
  as one engine operation (a cached graph's forward pass), their names joined with
  commas, listed in ``args.operators``;
- the copies MXNet writes of the same operators as asynchronous events of its
  ``operator`` domain are left out; memory counters (``"C"``) and markers (``"i"``)
  are kept;
- the thread of an event is named by its device and the order threads were first seen
  (``mxnet cpu/0 thread 1``): MXNet identifies them by hashes only;
- times: MXNet stamps events in wall-clock microseconds (the system clock since the
  epoch). The first event's time is converted to the trace's time base
  (:func:`d5core.api.wall_ns_to_trace_us`) and every other is placed from it by its
  exact difference.

MXNet writes its events to a file on ``dump``; each session gets its own temporary
file, removed at ``stop``. The events are dumped without finishing the profiler's
output (a finished dump leaves MXNet 1.9.1 unable to take a new configuration), so
each dump after the process's first is a fragment of a JSON array, which
:func:`events_from_dump` reads as such.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from d5_plugin_mxnet import _mx
from d5core.api import wall_ns_to_trace_us

__all__ = ["EXECUTORS", "MXNetTraceProfiler", "events_from_dump"]

#: The executor and operator backend of this plugin (its entry points), which the
#: profiler answers for.
EXECUTORS = frozenset({"mxnet"})

#: The head and tail MXNet writes around its events (the head only on a process's
#: first dump, the tail only on a finished one).
_HEAD = re.compile(r'^\s*\{\s*"traceEvents"\s*:\s*\[')
_TAIL = re.compile(r'\]\s*,\s*"displayTimeUnit"\s*:\s*"[^"]*"\s*\}\s*$')

#: Device names by MXNet's device number (its ``pid``), as the process's first dump
#: names them; thread names by ``(pid, tid)``, kept for the whole process.
_devices: dict[Any, str] = {}
_threads: dict[tuple[Any, Any], str] = {}


class MXNetTraceProfiler:
    """MXNet's profiler from :meth:`start` to :meth:`stop` (see the module).

    :param level: the trace level; ``full`` adds MXNet's memory counters.
    """

    name = "mxnet.profiler"

    def __init__(self, level: str = "framework") -> None:
        self.level = level
        self._dir: str | None = None

    def start(self) -> None:
        """Configure MXNet's profiler to write to a new temporary file and run it."""
        mx = _mx.mxnet()
        folder = tempfile.mkdtemp(prefix="d5-mx-trace-")
        try:
            mx.profiler.set_config(
                profile_symbolic=True,
                profile_imperative=True,
                profile_memory=self.level == "full",
                profile_api=False,
                aggregate_stats=False,
                continuous_dump=False,
                filename=str(Path(folder) / "profile.json"),
            )
            mx.profiler.set_state("run")
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        self._dir = folder

    def stop(self) -> list[dict[str, Any]]:
        """Wait for MXNet's queued work, stop the profiler and return its events (the
        temporary file is removed)."""
        if self._dir is None:
            raise RuntimeError("the MXNet trace profiler was not started")
        folder, self._dir = self._dir, None
        mx = _mx.mxnet()
        try:
            mx.nd.waitall()  # operators still queued end inside the session
            mx.profiler.set_state("stop")
            mx.profiler.dump(finished=False)
            path = Path(folder) / "profile.json"
            text = path.read_text() if path.exists() else ""
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return events_from_dump(text)


def events_from_dump(text: str) -> list[dict[str, Any]]:
    """The events of what one MXNet ``dump`` wrote (a whole document or a fragment of
    its event array) as Chrome trace events on the trace's time base."""
    raw = _parse(text)
    for event in raw:
        if event.get("ph") == "M" and event.get("name") == "process_name":
            _devices.setdefault(event.get("pid"), str(event.get("args", {}).get("name")))
    timed = [e for e in raw if isinstance(e.get("ts"), int | float)]
    if not timed:
        return []
    origin = min(e["ts"] for e in timed)
    origin_us = wall_ns_to_trace_us(origin * 1000)

    def on_trace(ts: float) -> float:
        return float(origin_us + (ts - origin))

    events: list[dict[str, Any]] = []
    open_spans: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for event in timed:
        phase = event.get("ph")
        key = (event.get("pid"), event.get("tid"))
        if phase == "B":
            open_spans.setdefault(key, []).append(event)
        elif phase == "E":
            begun = _take_open(open_spans.get(key, []), event.get("name"))
            if begun is not None:
                events.append(_complete(begun, event["ts"] - begun["ts"], on_trace))
        elif phase == "X":
            events.append(_complete(event, event.get("dur", 0), on_trace))
        elif phase == "C":
            events.append(
                {"name": event["name"], "ph": "C", "ts": on_trace(event["ts"]),
                 "args": dict(event.get("args") or {})}
            )  # fmt: skip
        elif phase == "i":
            events.append(
                {"name": event["name"], "ph": "i", "ts": on_trace(event["ts"]),
                 "tid": _thread(key), "s": event.get("s", "t")}
            )  # fmt: skip
    events.sort(key=lambda e: e["ts"])
    return events


def _parse(text: str) -> list[dict[str, Any]]:
    """The event objects of a dump: its head and tail, when there, and the commas
    between fragments taken off."""
    body = _TAIL.sub("", _HEAD.sub("", text.strip(), count=1), count=1).strip().lstrip(",")
    if not body.strip():
        return []
    found = json.loads("[" + body + "]")
    return [e for e in found if isinstance(e, dict)]


def _take_open(stack: list[dict[str, Any]], name: Any) -> dict[str, Any] | None:
    """The innermost begin event named ``name`` still open on a thread (removed)."""
    for at in range(len(stack) - 1, -1, -1):
        if stack[at].get("name") == name:
            return stack.pop(at)
    return None


def _complete(
    begun: dict[str, Any], duration: float, on_trace: Callable[[float], float]
) -> dict[str, Any]:
    name = str(begun["name"])
    out: dict[str, Any] = {
        "name": name,
        "ph": "X",
        "ts": on_trace(begun["ts"]),
        "dur": float(duration),
        "tid": _thread((begun.get("pid"), begun.get("tid"))),
    }
    if "," in name:
        out["args"] = {"operators": name.split(",")}
    return out


def _thread(key: tuple[Any, Any]) -> str:
    """A stable name for an MXNet thread: its device and the order it was first seen."""
    if key not in _threads:
        device = _devices.get(key[0], f"device {key[0]}")
        count = sum(1 for pid, _ in _threads if pid == key[0])
        _threads[key] = f"mxnet {device} thread {count + 1}"
    return _threads[key]
