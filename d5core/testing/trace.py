"""Checks for a plugin's trace profiler (the hook ``d5_trace_profiler``), for its tests.

:func:`check_trace_events` says what is wrong with the events a profiler's ``stop()``
returned, as d5 would keep them; :func:`events_between` keeps those that lie within a
window of the trace clock, to check a profiler's conversion of its clock::

    from d5core.api import trace_clock_us
    from d5core.testing.trace import check_trace_events, events_between

    profiler.start()
    before = trace_clock_us()
    step()
    after = trace_clock_us()
    events = profiler.stop()
    assert check_trace_events(events) == []
    assert events_between(events, before, after, slack_us=200)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["check_trace_events", "events_between"]


def check_trace_events(events: Iterable[Mapping[str, Any]], pid: int = 1) -> list[str]:
    """One line per problem of ``events`` as Chrome trace events (at most 20), empty when
    they conform; each gets ``pid`` first, as d5 sets it."""
    from d5core.trace.document import check_events

    return check_events({"pid": pid, **e} for e in events)


def events_between(
    events: Iterable[Mapping[str, Any]], start_us: float, end_us: float, slack_us: float = 0.0
) -> list[Mapping[str, Any]]:
    """The complete events of ``events`` that begin and end within ``[start_us, end_us]``
    (widened by ``slack_us`` each side)."""
    low, high = start_us - slack_us, end_us + slack_us
    return [
        e for e in events
        if e.get("ph") == "X" and low <= e["ts"] and e["ts"] + e.get("dur", 0) <= high
    ]  # fmt: skip
