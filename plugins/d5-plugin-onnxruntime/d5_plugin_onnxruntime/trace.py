"""ONNX Runtime's profiler as a d5 trace profiler (``--trace framework`` or ``full``).

ONNX Runtime profiles a session only if the session was created with profiling on, so
:class:`OnnxRuntimeTraceProfiler` needs the executor it traces: ``start()`` puts a new
session with profiling on (the executor's ``profiling_session``) in the executor's
``session``, so the steps d5 prepares next run on it; ``stop()`` ends profiling, reads
the profile, deletes it and gives the executor its own session back.
Steps prepared before ``start()`` keep the session they bound and are not profiled.

**Events.** A node's kernel time (``<node>_kernel_time`` in the profile) becomes an
event named after the node, with ``args.op_type`` (``Gemm``, ``MatMul``, a fused type
such as ``FusedConv``) and ``args.provider``; at level ``full``, ``args`` also holds
ONNX Runtime's input and output shapes and memory figures. The session's own spans
(``model_run``, ``SequentialExecutor::Execute``, loading and initialising the session)
keep their names. Nodes are those of the graph ONNX Runtime optimised.

**Clock.** ONNX Runtime writes ``ts`` in microseconds since profiling started, and
``session.get_profiling_start_time_ns()`` is that start in wall-clock time (nanoseconds
since the epoch, ``CLOCK_REALTIME``, in onnxruntime 1.32). ``stop()`` reads the offset
to ``time.perf_counter_ns()`` once, in integers, and moves every event onto d5's time
base. ``tid`` is the OS thread id ONNX Runtime records.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from d5core.api import wall_offset_ns

__all__ = ["OnnxRuntimeTraceProfiler", "profiler_for"]

_KERNEL_SUFFIX = "_kernel_time"
#: What a node event's ``args`` keeps at level ``full`` (besides the operator type).
_FULL_ARGS = (
    "input_type_shape",
    "output_type_shape",
    "activation_size",
    "parameter_size",
    "output_size",
)


def profiler_for(subject: object, level: str) -> OnnxRuntimeTraceProfiler | None:
    """A profiler for ``subject`` if it is an ONNX Runtime executor, else ``None``.

    Never imports onnxruntime: an executor instance exists only if its module (and
    onnxruntime) is imported already.
    """
    module = sys.modules.get("d5_plugin_onnxruntime.executor")
    if module is None or not isinstance(subject, module.OnnxRuntimeExecutor):
        return None
    return OnnxRuntimeTraceProfiler(subject, level)


class OnnxRuntimeTraceProfiler:
    """ONNX Runtime's profiler on one executor's session (see the module docstring).

    :param executor: an :class:`~d5_plugin_onnxruntime.executor.OnnxRuntimeExecutor`.
    :param level: ``framework`` or ``full``.
    """

    name = "onnxruntime"

    def __init__(self, executor: Any, level: str = "framework") -> None:
        self.executor = executor
        self.level = level
        self._session: Any = None
        self._original: Any = None
        self._directory: str | None = None

    def start(self) -> None:
        """Give the executor a session with profiling on."""
        directory = tempfile.mkdtemp(prefix="d5-ort-trace-")
        try:
            session = self.executor.profiling_session(os.path.join(directory, "profile"))
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        self._directory = directory
        self._original = self.executor.session
        self._session = session
        self.executor.session = session

    def stop(self) -> list[dict[str, Any]]:
        """End profiling, restore the executor's session and return the profile's
        events on d5's time base."""
        session, self._session = self._session, None
        if session is None:
            return []
        if self.executor.session is session:  # unless something replaced it since
            self.executor.session = self._original
        self._original = None
        directory, self._directory = self._directory, None
        try:
            start_ns = int(session.get_profiling_start_time_ns())
            path = session.end_profiling()
            offset = wall_offset_ns()
            profile = json.loads(Path(path).read_text()) if path else []
        finally:
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
        base_us = (start_ns - offset) / 1000.0
        full = self.level == "full"
        events = (_event(e, base_us, full) for e in _profile_events(profile))
        return [e for e in events if e is not None]


def _profile_events(profile: Any) -> list[dict[str, Any]]:
    """The events of a profile: a JSON array, or Chrome's object form."""
    if isinstance(profile, dict):
        profile = profile.get("traceEvents", [])
    return [e for e in profile if isinstance(e, dict)] if isinstance(profile, list) else []


def _event(event: dict[str, Any], base_us: float, full: bool) -> dict[str, Any] | None:
    """One profile event as a Chrome complete event, or ``None`` for one left out
    (the fences around a node, anything that is not a complete event)."""
    if event.get("ph") != "X" or "ts" not in event:
        return None
    name = str(event.get("name", ""))
    found = event.get("args")
    ort_args: dict[str, Any] = found if isinstance(found, dict) else {}
    args: dict[str, Any] = {}
    if event.get("cat") == "Node":
        if not name.endswith(_KERNEL_SUFFIX):
            return None
        op_type = str(ort_args.get("op_name", "?"))
        name = name.removesuffix(_KERNEL_SUFFIX) or op_type
        args = {"op_type": op_type, "provider": ort_args.get("provider")}
        if full:
            args.update({k: ort_args[k] for k in _FULL_ARGS if k in ort_args})
    return {
        "name": name,
        "ph": "X",
        "ts": base_us + float(event["ts"]),
        "dur": max(float(event.get("dur", 0)), 0.0),
        "tid": event.get("tid", 0),
        "args": args,
    }
