"""What a traced run is made of: its levels, its time base and the profiler interface.

A trace is a Chrome trace event document (the format Perfetto and ``chrome://tracing``
open). Every event in it is on one time base: :func:`time.perf_counter_ns` (the
monotonic clock on Linux, shared by every process of the machine and the clock of the
metric bus), in microseconds. Profilers that keep wall-clock time convert with
:func:`wall_ns_to_trace_us`.
"""

from __future__ import annotations

import time
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "TRACE_LEVELS",
    "TraceProfiler",
    "trace_clock_us",
    "wall_ns_to_trace_us",
    "wall_offset_ns",
]

#: The trace levels, each adding to the one before: d5's own spans; the frameworks'
#: operator events (:func:`~d5core.hookspecs.trace.d5_trace_profiler`); process counters
#: and LoadGen's query events.
TRACE_LEVELS: tuple[str, ...] = ("step", "framework", "full")


def trace_clock_us() -> float:
    """Now, on the trace's time base, in microseconds."""
    return time.perf_counter_ns() / 1000.0


def wall_offset_ns() -> int:
    """The wall clock (nanoseconds since the epoch) less the trace clock, now.

    The best of three readings, each of the wall clock between two of the trace clock,
    taken at their midpoint: off by at most half the shortest gap (tens of nanoseconds).
    """
    best: tuple[int, int] | None = None
    for _ in range(3):
        before = time.perf_counter_ns()
        wall = time.time_ns()
        after = time.perf_counter_ns()
        if best is None or after - before < best[0]:
            best = (after - before, wall - (before + after) // 2)
    assert best is not None
    return best[1]


def wall_ns_to_trace_us(wall_ns: int | float) -> float:
    """A wall-clock time (nanoseconds since the epoch) on the trace's time base (µs).

    The offset between the two clocks is read at the call (:func:`wall_offset_ns`):
    convert right after profiling, not hours later (an NTP step in between would shift
    the events). Many events: subtract one :func:`wall_offset_ns` from each.
    """
    return (wall_ns - wall_offset_ns()) / 1000.0  # the difference first: exact for ints


@runtime_checkable
class TraceProfiler(Protocol):
    """A framework's profiler, as the ``d5_trace_profiler`` hook offers it."""

    #: What the events come from (``"torch.profiler"``): their category in the trace.
    name: str

    def start(self) -> None:
        """Start recording (before d5 prepares the traced work)."""

    def stop(self) -> list[dict[str, Any]]:
        """Stop and return the events recorded since :meth:`start`.

        Each is a Chrome trace complete event: ``{"name", "ph": "X", "ts", "dur",
        "tid"}`` with ``ts`` and ``dur`` in microseconds on the trace's time base,
        ``tid`` an OS thread id or a thread's name, and optionally ``cat`` (default:
        :attr:`name`) and ``args``. Instant (``"i"``) and counter (``"C"``) events
        are kept too, and a metadata event ``{"name": "thread_name", "ph": "M", "tid",
        "args": {"name"}}`` names a thread's track. d5 sets ``pid``.
        """
