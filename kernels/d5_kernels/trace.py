"""The kernels' own regions as a d5 trace profiler.

The compiled kernels time their regions themselves while a trace is on (a GEMM call,
its packing passes and macro-kernels per thread; a convolution's algorithm, its im2col
or weight packing and its jobs; every other operator's whole call). Their clock is
``CLOCK_MONOTONIC``, the one :func:`time.perf_counter_ns` reads, so their times are
already on d5's trace time base and only change unit (ns to µs).

The tracer is one per process: a second profiler started before the first stops
restarts it, and the first then gets nothing.
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["CATEGORY", "NativeTraceProfiler", "chrome_events", "dropped_event"]

#: The category of the kernels' events, and the profiler's name.
CATEGORY = "d5_kernels"


def chrome_events(regions: list[tuple[str, int, int, int]]) -> list[dict[str, Any]]:
    """Chrome complete events of ``regions`` as the tracer returns them (name, OS thread
    id, begin and end in ns of ``CLOCK_MONOTONIC``): ``ts`` and ``dur`` in µs."""
    return [
        {
            "name": name,
            "cat": CATEGORY,
            "ph": "X",
            "ts": begin_ns / 1000.0,
            "dur": (end_ns - begin_ns) / 1000.0,
            "tid": tid,
        }
        for name, tid, begin_ns, end_ns in regions
    ]


def dropped_event(dropped: int) -> dict[str, Any]:
    """An instant event, now and on the calling thread, saying that ``dropped`` regions
    did not fit the tracer's buffers."""
    return {
        "name": "d5_kernels.dropped",
        "cat": CATEGORY,
        "ph": "i",
        "s": "p",
        "ts": time.perf_counter_ns() / 1000.0,
        "tid": threading.get_native_id(),
        "args": {"dropped": dropped},
    }


class NativeTraceProfiler:
    """The ``d5_trace_profiler`` offer of d5-kernels: the compiled kernels' regions.

    :attr:`dropped` is how many regions the last :meth:`stop` lost past the tracer's
    capacity (``_native.trace_capacity()`` events per trace).
    """

    name = CATEGORY

    def __init__(self) -> None:
        self.dropped = 0

    def start(self) -> None:
        """Turn the kernels' tracer on (forgetting any regions an earlier trace left)."""
        from d5_kernels import _native

        _native.trace_start()

    def stop(self) -> list[dict[str, Any]]:
        """Turn the tracer off and return the regions since :meth:`start` as Chrome
        complete events (``ts``/``dur`` in µs on the trace time base, ``tid`` the OS
        thread id, category ``d5_kernels``), and an instant event ``d5_kernels.dropped``
        when some did not fit."""
        from d5_kernels import _native

        regions, dropped = _native.trace_stop()
        self.dropped = dropped
        events = chrome_events(regions)
        if dropped:
            events.append(dropped_event(dropped))
        return events
