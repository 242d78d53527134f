"""tinygemm's own events in a traced run: each Gemm call and each graph node it runs.

The operator and the executor mark their regions in :data:`REGIONS`, a log that is off
until a :class:`TinyGemmProfiler` starts it. While it is off, a region costs one check
of :attr:`RegionLog.on`. While it is on, each region is kept with its begin and end
from :func:`time.perf_counter_ns`, the clock of d5's trace (its events are
``perf_counter_ns() / 1000`` microseconds), and the OS id of the thread that ran it, so
the profiler's events line up with d5's own spans without any conversion.

This module imports nothing but the standard library: ``gemm`` and ``executor`` import
it whether or not anything is traced.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["REGIONS", "RegionLog", "TinyGemmProfiler"]


def _scalar(value: Any) -> Any:
    """``value`` if it is a JSON scalar, else its string."""
    return value if value is None or isinstance(value, str | int | float | bool) else str(value)


class RegionLog:
    """The regions recorded since :meth:`begin`; nothing is kept while :attr:`on` is
    false.

    A region is marked where it runs::

        begin = time.perf_counter_ns() if REGIONS.on else 0
        ...  # the work
        if begin:
            REGIONS.add("Gemm", begin, {"m": m, "n": n, "k": k})
    """

    def __init__(self) -> None:
        #: Whether regions are being recorded: the one check on the untraced path.
        self.on = False
        self._regions: list[tuple[str, int, int, int, Mapping[str, Any]]] = []
        self._lock = threading.Lock()

    def begin(self) -> None:
        """Start recording, from an empty log.

        :raises RuntimeError: when a recording is already on (one profiler at a time).
        """
        with self._lock:
            if self.on:
                raise RuntimeError("tinygemm is already recording its regions for a trace")
            self._regions = []
            self.on = True

    def add(self, name: str, begin_ns: int, args: Mapping[str, Any]) -> None:
        """Keep the region ``name`` that began at ``begin_ns`` and ends now, on the
        calling thread; a region that ends after :meth:`end` is dropped.

        ``args`` is kept as given: values that are not JSON scalars (a numpy dtype)
        become strings at :meth:`end`, outside the traced work."""
        end_ns = time.perf_counter_ns()
        if self.on:  # list.append is atomic: threads need no lock to add
            self._regions.append((name, begin_ns, end_ns, threading.get_native_id(), args))

    def end(self) -> list[dict[str, Any]]:
        """Stop recording and return the regions as Chrome complete events (``ts`` and
        ``dur`` in microseconds on the trace's time base, ``tid`` the OS thread id).

        :raises RuntimeError: when nothing is recording.
        """
        with self._lock:
            if not self.on:
                raise RuntimeError("tinygemm's region log was not started")
            self.on = False
            regions, self._regions = self._regions, []
        return [
            {
                "name": name,
                "ph": "X",
                "ts": begin_ns / 1000.0,
                "dur": (end_ns - begin_ns) / 1000.0,
                "tid": tid,
                "args": {key: _scalar(value) for key, value in args.items()},
            }
            for name, begin_ns, end_ns, tid, args in regions
        ]


#: The process's region log, which the operator and the executor write to.
REGIONS = RegionLog()


class TinyGemmProfiler:
    """tinygemm's profiler for d5's traced runs (a ``d5core.api.TraceProfiler``): it
    records :data:`REGIONS` from :meth:`start` to :meth:`stop`."""

    #: The events' category in the trace and their source in ``d5 trace RUN --top``.
    name = "tinygemm"

    def start(self) -> None:
        """Turn recording on (d5 calls this before it prepares the traced work)."""
        REGIONS.begin()

    def stop(self) -> list[dict[str, Any]]:
        """Turn recording off and return the Gemm calls and graph nodes recorded."""
        return REGIONS.end()
