"""The operators that took the most time in a trace's steps (``d5 trace RUN --top N``).

Events on one thread nest (``aten::linear`` holds ``aten::addmm``; a ``bench.step`` holds
both), so each event is charged its *self* time: its duration less that of the events
directly inside it on the same thread. Summed per name over every step, self times never
count a microsecond twice, and on the step's own thread they add up, with the step's own
self time (time in no operator), to the steps exactly. Events on other threads (a
framework's intra-op pool) are listed too and counted apart.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from d5core.trace.document import D5_CATEGORY, STEP_NAMES, step_events

__all__ = ["OperatorRow", "TopOperators", "top_operators"]

#: d5 spans that hold steps or operators rather than being work of their own.
_CONTAINERS = frozenset({*STEP_NAMES, "run", "train.epoch", "prepare"})
#: How far (relative) the traced steps may be off the measured ones before a note says so.
_AGREE = 0.10


@dataclass
class OperatorRow:
    """One operator (an event name from one source) over every traced step."""

    name: str
    source: str
    calls: int = 0
    self_us: float = 0.0
    #: Whether it ran on the thread of the steps (else on a framework's worker thread).
    on_step_thread: bool = True

    def to_json(self, step_total_us: float, steps: int) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "calls": self.calls,
            "self_s": self.self_us / 1e6,
            "per_step_s": self.self_us / 1e6 / max(steps, 1),
            "share": self.self_us / step_total_us if step_total_us else None,
            "on_step_thread": self.on_step_thread,
        }


@dataclass
class TopOperators:
    """What ``--top`` prints: the slowest operators, and how they add up to the steps."""

    subject: str | None
    steps: int
    step_total_us: float
    step_median_us: float
    rows: list[OperatorRow]
    #: Self time of every operator on the steps' threads, and elsewhere.
    on_thread_us: float
    off_thread_us: float
    #: The step time the run measured untraced (seconds), where the run stored one.
    measured_step_s: float | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self, top: int) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "steps": self.steps,
            "step_total_s": self.step_total_us / 1e6,
            "step_median_s": self.step_median_us / 1e6,
            "measured_step_s": self.measured_step_s,
            "operators_on_step_thread_s": self.on_thread_us / 1e6,
            "operators_other_threads_s": self.off_thread_us / 1e6,
            "outside_operators_s": (self.step_total_us - self.on_thread_us) / 1e6,
            "rows": [r.to_json(self.step_total_us, self.steps) for r in self.rows[:top]],
            "notes": self.notes,
        }


def _label(event: Mapping[str, Any]) -> str:
    """An event's row name: a graph node's span is named by its node and type."""
    args = event.get("args") or {}
    if event.get("name") == "graph.node" and args.get("node"):
        return f"{args.get('op_type', '?')} {args['node']}"
    return str(event.get("name"))


def _self_times(events: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], float]]:
    """Each complete event of one thread with its self time (µs)."""
    ordered = sorted(events, key=lambda e: (e["ts"], -e["dur"]))
    out: list[tuple[dict[str, Any], float]] = []
    stack: list[list[Any]] = []  # [event, end, self]
    for event in ordered:
        start, end = float(event["ts"]), float(event["ts"]) + float(event["dur"])
        while stack and stack[-1][1] <= start:
            done = stack.pop()
            out.append((done[0], max(done[2], 0.0)))
        if stack:
            stack[-1][2] -= min(end, stack[-1][1]) - start
        stack.append([event, end, float(event["dur"])])
    out.extend((e, max(s, 0.0)) for e, _, s in stack)
    return out


def top_operators(
    document: Mapping[str, Any], subject: str | None = None, measured_step_s: float | None = None
) -> TopOperators:
    """Sum every operator's self time over the steps of ``subject`` (every subject when
    ``None``) in ``document``."""
    steps = step_events(document, subject)
    windows: dict[int, list[tuple[float, float]]] = {}
    step_threads: set[tuple[int, int]] = set()
    for s in steps:
        windows.setdefault(int(s["pid"]), []).append((s["ts"], s["ts"] + s["dur"]))
        step_threads.add((int(s["pid"]), int(s["tid"])))
    by_thread: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for e in document["traceEvents"]:
        if e.get("ph") != "X" or int(e.get("pid", -1)) not in windows:
            continue
        mid = float(e["ts"]) + float(e["dur"]) / 2
        if any(a <= mid <= b for a, b in windows[int(e["pid"])]):
            by_thread.setdefault((int(e["pid"]), int(e["tid"])), []).append(e)
    rows: dict[tuple[str, str], OperatorRow] = {}
    on_thread = off_thread = 0.0
    for thread, events in by_thread.items():
        on_step = thread in step_threads
        for event, self_us in _self_times(events):
            if event.get("cat") == D5_CATEGORY and event.get("name") in _CONTAINERS:
                continue
            key = (_label(event), str(event.get("cat", "")))
            row = rows.setdefault(key, OperatorRow(key[0], key[1], on_step_thread=on_step))
            row.calls += 1
            row.self_us += self_us
            if on_step:
                on_thread += self_us
            else:
                off_thread += self_us
    durations = [float(s["dur"]) for s in steps]
    result = TopOperators(
        subject, len(steps), sum(durations), statistics.median(durations) if durations else 0.0,
        sorted(rows.values(), key=lambda r: -r.self_us), on_thread, off_thread, measured_step_s,
    )  # fmt: skip
    _check(result)
    return result


def _check(result: TopOperators) -> None:
    """The notes that say how far to trust the rows."""
    if not result.steps:
        result.notes.append("the trace holds no steps of this subject")
        return
    total = result.step_total_us
    if result.on_thread_us > total * (1 + 1e-6):
        result.notes.append("operator self times exceed the steps: events overlap on one thread")
    if not result.rows:
        result.notes.append(
            "no operator events inside the steps: trace with --trace framework for the "
            "framework's operators (an executor without a profiler shows d5's spans only)"
        )
    measured = result.measured_step_s
    if measured:
        traced = result.step_median_us / 1e6
        off = (traced - measured) / measured
        if abs(off) > _AGREE:
            result.notes.append(
                f"the traced steps' median ({traced * 1e3:.3g} ms) is {100 * off:+.0f}% off the "
                f"measured step ({measured * 1e3:.3g} ms): tracing or load changed the steps, "
                f"so read the shares, not the times"
            )
