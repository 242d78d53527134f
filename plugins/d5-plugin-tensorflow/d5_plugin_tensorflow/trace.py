"""TensorFlow's profiler as a framework profiler of traced runs (``--trace framework``).

:class:`TensorFlowTraceProfiler` runs TensorFlow's own profiler (the host tracer, which
records every op kernel and the runtime's spans on every thread TensorFlow uses) from
``start`` to ``stop``, reads the ``XSpace`` protobuf it writes and gives its host events
back as Chrome trace complete events:

- an op kernel's event is named by the op (``n3_conv1/Conv2D``), with its type
  (``_MklConv2D``) as ``args.op_type``; the runtime's own spans (``EagerExecute``,
  ``KernelAndDeviceFunc::Run`` ...) keep TensorFlow's name and their readable stats as
  ``args``; zero-length markers that are not ops are left out;
- the thread of an event is its line in the trace, by name (``tf_Compute/...``); the
  line ``python`` is the thread that called ``start`` and gets its OS thread id, so its
  events share a track with d5's own spans (TensorFlow's line ids are not thread ids);
- times: TensorFlow keeps them in wall-clock nanoseconds, and the ``XSpace`` it writes
  holds them relative to the session's start (the ``profile_start_time`` of its ``Task
  Environment`` plane), in picoseconds within a line. The start is converted once to
  the trace's time base (:func:`d5core.api.wall_ns_to_trace_us`) and every event is
  placed from it exactly; a line whose times are absolute (not below the start) is
  read as such.

The profile is written to a temporary directory, removed at ``stop``. TensorFlow runs
one profiler session per process: ``start`` fails while another one (``d5 bench
--breakdown``'s, say) is running.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from d5_plugin_tensorflow import _tf
from d5core.api import wall_ns_to_trace_us

__all__ = [
    "EXECUTORS",
    "TensorFlowTraceProfiler",
    "active",
    "events_from_xspace",
    "xplane_module",
]

#: The executors and operator backends of this plugin (its entry points), which the
#: profiler answers for.
EXECUTORS = frozenset({"tensorflow", "tensorflow-xla"})

#: An op kernel's event name: ``<op name>:<op type>``.
_OP_EVENT = re.compile(r"^(?P<op>[^\s:]+):(?P<type>[A-Za-z_][A-Za-z0-9_]*)$")
#: The XSpace plane holding the session's start time.
_ENVIRONMENT = "Task Environment"
_START_STAT = "profile_start_time"
#: Module paths of the XSpace protobuf, in the order tried.
_XPLANE_MODULES = (
    "tensorflow.tsl.profiler.protobuf.xplane_pb2",
    "tsl.profiler.protobuf.xplane_pb2",
)


#: The sessions of :class:`TensorFlowTraceProfiler` started and not yet stopped.
_running: set[int] = set()


def active() -> bool:
    """Whether a :class:`TensorFlowTraceProfiler` session is running in this process:
    TensorFlow's profiler is taken, so the executor's per-node profile cannot start."""
    return bool(_running)


def xplane_module() -> Any | None:
    """The generated ``xplane_pb2`` module that ships with the installed TensorFlow, or
    ``None`` when none of the known paths imports (TensorFlow is set up first)."""
    import importlib

    _tf.tensorflow()
    for path in _XPLANE_MODULES:
        try:
            return importlib.import_module(path)
        except ImportError:
            continue
    return None


class TensorFlowTraceProfiler:
    """TensorFlow's host tracer from :meth:`start` to :meth:`stop` (see the module)."""

    name = "tensorflow.profiler"

    def __init__(self) -> None:
        self._logdir: str | None = None
        self._thread: int | None = None

    def start(self) -> None:
        """Start a TensorFlow profiler session writing to a new temporary directory."""
        tf = _tf.tensorflow()
        logdir = tempfile.mkdtemp(prefix="d5-tf-trace-")
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=2, python_tracer_level=0, device_tracer_level=0
        )
        try:
            tf.profiler.experimental.start(logdir, options=options)
        except BaseException:
            shutil.rmtree(logdir, ignore_errors=True)
            raise
        self._logdir = logdir
        self._thread = threading.get_native_id()
        _running.add(id(self))

    def stop(self) -> list[dict[str, Any]]:
        """Stop the session and return its host events (the directory is removed)."""
        if self._logdir is None:
            raise RuntimeError("the TensorFlow trace profiler was not started")
        logdir, self._logdir = self._logdir, None
        _running.discard(id(self))
        try:
            _tf.tensorflow().profiler.experimental.stop()
            found = sorted(Path(logdir).rglob("*.xplane.pb"))
            data = found[-1].read_bytes() if found else b""
        finally:
            shutil.rmtree(logdir, ignore_errors=True)
        return events_from_xspace(data, self._thread) if data else []


def events_from_xspace(data: bytes, python_tid: int | None = None) -> list[dict[str, Any]]:
    """The host events of a serialized ``XSpace`` as Chrome complete events on the
    trace's time base (see the module for names, threads and times); those of the line
    ``python`` get the OS thread id ``python_tid`` when given."""
    xplane_pb2 = xplane_module()
    if xplane_pb2 is None:
        raise RuntimeError("the installed TensorFlow ships no importable xplane_pb2 module")
    space = xplane_pb2.XSpace()
    space.ParseFromString(data)
    start_ns = _start_time_ns(space)
    base_us = wall_ns_to_trace_us(start_ns)
    events: list[dict[str, Any]] = []
    for plane in space.planes:
        if plane.name.startswith("/host:"):
            events.extend(_plane_events(plane, start_ns, base_us, python_tid))
    events.sort(key=lambda e: e["ts"])
    return events


def _start_time_ns(space: Any) -> int:
    """The session's start (wall-clock ns) the XSpace's times are relative to; 0 when
    it says none (its times are then absolute)."""
    for plane in space.planes:
        if plane.name != _ENVIRONMENT:
            continue
        names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for stat in plane.stats:
            if names.get(stat.metadata_id) == _START_STAT:
                return int(stat.uint64_value or stat.int64_value)
    return 0


def _plane_events(
    plane: Any, start_ns: int, base_us: float, python_tid: int | None
) -> list[dict[str, Any]]:
    stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
    line_names = [line.display_name or line.name or str(line.id) for line in plane.lines]
    events: list[dict[str, Any]] = []
    for line, thread in zip(plane.lines, line_names, strict=True):
        if line_names.count(thread) > 1:
            thread = f"{thread} ({line.id})"
        # TensorFlow's "python" line is the thread that ran the Python code: the one that
        # started the profile, whose OS id d5's own spans carry; other lines keep a name
        tid: int | str = python_tid if thread == "python" and python_tid else thread
        if line.timestamp_ns < start_ns:  # relative to the session's start
            line_us = base_us + line.timestamp_ns / 1000
        else:  # absolute: wall-clock nanoseconds
            line_us = wall_ns_to_trace_us(line.timestamp_ns)
        for event in line.events:
            meta = plane.event_metadata.get(event.metadata_id)
            name = meta.name if meta is not None else ""
            op = _op_of(name, meta.display_name if meta is not None else "")
            if op is None and event.duration_ps == 0:
                continue  # a marker (ThreadpoolListener::Record ...), not a span
            out: dict[str, Any] = {
                "name": op[0] if op else name,
                "ph": "X",
                "ts": line_us + event.offset_ps / 1e6,
                "dur": event.duration_ps / 1e6,
                "tid": tid,
            }
            args = {"op_type": op[1]} if op else _readable_stats(meta, event, stat_names)
            if args:
                out["args"] = args
            events.append(out)
    return events


def _op_of(name: str, display_name: str) -> tuple[str, str] | None:
    """``(op name, op type)`` of an op kernel's event, ``None`` for other events."""
    if display_name and name.endswith(":" + display_name):
        return name[: -len(display_name) - 1], display_name
    match = _OP_EVENT.match(name)
    return (match["op"], match["type"]) if match else None


def _readable_stats(meta: Any, event: Any, stat_names: dict[int, str]) -> dict[str, Any]:
    """An event's stats (its metadata's, then its own) by name, leaving out the
    internal ones (flow and correlation ids, raw bytes)."""
    found: dict[str, Any] = {}
    for stat in [*(meta.stats if meta is not None else ()), *event.stats]:
        key = stat_names.get(stat.metadata_id, "")
        kind = stat.WhichOneof("value")
        if not key or key.startswith("_") or key == "id" or kind in (None, "bytes_value"):
            continue
        value = getattr(stat, kind)
        found[key] = stat_names.get(value, str(value)) if kind == "ref_value" else value
    return found
