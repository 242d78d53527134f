"""The clock the measurement engine reads: its resolution and the cost of reading it.

Both are measured once per process (a few milliseconds) and cached. They decide whether
an event is long enough to be timed on its own or must be timed in blocks.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Clock", "default_clock", "measure_clock"]

#: Clock reads per block and blocks used to estimate the cost of one read.
_READS, _BLOCKS = 1000, 21


@dataclass(frozen=True)
class Clock:
    """A nanosecond clock and what is known about it.

    :param read: returns the time in integer nanoseconds (monotonic).
    :param resolution_ns: the smallest step it can show: the larger of the declared
        resolution and the smallest positive difference seen between two reads.
    :param overhead_ns: the median cost of one read.
    :param declared_resolution_ns: what :func:`time.get_clock_info` declares.
    :param implementation: the OS clock behind it, as :func:`time.get_clock_info` names it.
    """

    read: Callable[[], int]
    resolution_ns: float
    overhead_ns: float
    declared_resolution_ns: float
    implementation: str = "unknown"

    @property
    def cost_ns(self) -> float:
        """Resolution plus overhead: the uncertainty one timed interval carries."""
        return self.resolution_ns + self.overhead_ns


def measure_clock(read: Callable[[], int] = time.perf_counter_ns) -> Clock:
    """Measure the resolution of ``read`` and the cost of calling it (not cached).

    The declared resolution is :func:`time.perf_counter`'s unless ``read`` is another of
    the :mod:`time` module's ``*_ns`` clocks.
    """
    name = getattr(read, "__name__", "").removesuffix("_ns")
    known = {"monotonic", "perf_counter", "process_time", "thread_time", "time"}
    info = time.get_clock_info(name if name in known else "perf_counter")  # type: ignore[arg-type]
    declared = info.resolution * 1e9
    smallest = 0
    for _ in range(50):
        # Spin until the value changes: the step seen is the clock's granularity
        # (bounded below by the cost of a read).
        t0 = read()
        t1 = read()
        while t1 == t0:
            t1 = read()
        step = t1 - t0
        smallest = step if smallest == 0 else min(smallest, step)
    per_read = []
    for _ in range(_BLOCKS):
        t0 = read()
        for _ in range(_READS // 10):
            read()
            read()
            read()
            read()
            read()
            read()
            read()
            read()
            read()
            read()
        per_read.append((read() - t0) / (_READS + 1))
    return Clock(
        read=read,
        resolution_ns=max(declared, float(smallest)),
        overhead_ns=statistics.median(per_read),
        declared_resolution_ns=declared,
        implementation=info.implementation,
    )


_lock = threading.Lock()
_default: Clock | None = None


def default_clock() -> Clock:
    """:func:`time.perf_counter_ns`, measured on first use and cached for the process."""
    global _default
    with _lock:
        if _default is None:
            _default = measure_clock()
        return _default
