"""The trace document: Chrome trace events with d5's description of the run.

A trace is stored with its run as the artifact :data:`ARTIFACT` (one per rank in a
distributed run: :func:`artifact_name`). Each is a JSON object in the Chrome trace event
format's object form, which Perfetto and ``chrome://tracing`` open::

    {"traceEvents": [...], "displayTimeUnit": "ms",
     "otherData": {"format": "d5-trace/1", "run_id": ..., "level": ..., ...}}

- Times (``ts``, ``dur``) are microseconds on one time base
  (:func:`d5core.tracing.trace_clock_us`), so the events of several processes line up.
- ``pid`` is a track per process (and rank); metadata events (``"ph": "M"``) name
  every process and thread track.
- d5's own spans have category :data:`D5_CATEGORY`. The steps are the complete events
  named in :data:`STEP_NAMES`, with ``args.subject`` the executor or backend that ran
  them; a framework profiler's events have its name as category.
- ``otherData`` says which run, which level, which profilers ran and any notes (a
  profiler that failed, events dropped past the cap).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from d5core.errors import UsageError

__all__ = [
    "ARTIFACT",
    "D5_CATEGORY",
    "STEP_NAMES",
    "TRACE_FORMAT",
    "artifact_name",
    "check_events",
    "is_trace_artifact",
    "merge_documents",
    "new_document",
    "read_document",
    "step_events",
]

#: The value of ``otherData.format``.
TRACE_FORMAT = "d5-trace/1"
#: The artifact name of a run's trace (one process).
ARTIFACT = "trace.json"
#: The category of d5's own spans.
D5_CATEGORY = "d5"
#: The names of d5's step spans: one traced call of ``d5 bench``, one training step, one
#: executor's call in a validation.
STEP_NAMES = ("bench.step", "train.step", "validate.call")

#: The phases d5 writes or keeps, with the keys each must carry.
_REQUIRED: dict[str, tuple[str, ...]] = {
    "X": ("name", "ts", "dur", "pid", "tid"),
    "i": ("name", "ts", "pid", "tid"),
    "C": ("name", "ts", "pid", "args"),
    "M": ("name", "pid", "args"),
}


def artifact_name(rank: int | None = None) -> str:
    """``trace.json``, or ``trace.rank3.json`` for rank 3 of a distributed run."""
    return ARTIFACT if rank is None else f"trace.rank{rank}.json"


def is_trace_artifact(name: str) -> bool:
    """Whether the artifact ``name`` is (a part of) a run's trace."""
    return name == ARTIFACT or (name.startswith("trace.rank") and name.endswith(".json"))


def new_document(events: list[dict[str, Any]], **described: Any) -> dict[str, Any]:
    """A trace document of ``events``; ``described`` goes into ``otherData``."""
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"format": TRACE_FORMAT, **described},
    }


def check_events(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """What is wrong with ``events`` as Chrome trace events: one line per problem found
    (at most 20), empty when they conform."""
    problems: list[str] = []
    for index, event in enumerate(events):
        phase = event.get("ph")
        required = _REQUIRED.get(str(phase))
        if required is None:
            problems.append(f"event {index}: phase {phase!r} is not one d5 writes (X, i, C, M)")
        else:
            missing = [key for key in required if key not in event]
            if missing:
                problems.append(f"event {index} ({phase}): no {', '.join(missing)}")
            for key in ("ts", "dur"):
                if key in event and not isinstance(event[key], (int, float)):
                    problems.append(f"event {index}: {key} is not a number")
            if phase == "X" and isinstance(event.get("dur"), (int, float)) and event["dur"] < 0:
                problems.append(f"event {index}: negative duration")
        if len(problems) >= 20:
            break
    return problems


def read_document(data: bytes, name: str = ARTIFACT) -> dict[str, Any]:
    """Parse a stored trace artifact.

    :raises UsageError: when it is not a d5 trace document.
    """
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"the trace artifact {name} is not JSON ({exc})") from None
    if (
        not isinstance(document, dict)
        or not isinstance(document.get("traceEvents"), list)
        or not isinstance(document.get("otherData"), dict)
        or document["otherData"].get("format") != TRACE_FORMAT
    ):
        raise UsageError(f"the artifact {name} is not a {TRACE_FORMAT} trace document")
    return document


def merge_documents(documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One document holding every event of ``documents`` (the ranks of one run).

    The processes of one host share its monotonic clock, so their events line up as
    they are. Hosts' monotonic clocks do not: when the documents come from several
    hosts, each is moved onto the first one's time base through the wall clock
    (``otherData.wall_offset_us``), as close as the hosts' clocks agree (NTP: well
    under a millisecond on a cluster). ``otherData`` is the first document's, with every
    document's notes and ranks.
    """
    if not documents:
        raise ValueError("no trace documents to merge")
    if len(documents) == 1:
        return dict(documents[0])
    events: list[dict[str, Any]] = []
    notes: list[str] = []
    ranks: list[Any] = []
    first = documents[0].get("otherData", {})
    hosts = {doc.get("otherData", {}).get("host") for doc in documents}
    seen: set[Any] = set()
    for index, doc in enumerate(documents):
        pids = {e.get("pid") for e in doc["traceEvents"]}
        if pids & seen:  # the same OS pid on two hosts: give this document's its own
            doc = {**doc, "traceEvents": [
                {**e, "pid": e["pid"] + (index + 1) * 10_000_000} if "pid" in e else e
                for e in doc["traceEvents"]
            ]}  # fmt: skip
            pids = {e.get("pid") for e in doc["traceEvents"]}
        seen |= pids
        shift = 0.0
        offset = doc.get("otherData", {}).get("wall_offset_us")
        if len(hosts) > 1 and offset is not None and first.get("wall_offset_us") is not None:
            shift = float(offset) - float(first["wall_offset_us"])
        if shift:
            events.extend({**e, "ts": e["ts"] + shift} if "ts" in e else e
                          for e in doc["traceEvents"])  # fmt: skip
        else:
            events.extend(doc["traceEvents"])
        other = doc.get("otherData", {})
        notes.extend(other.get("notes", []))
        if other.get("rank") is not None:
            ranks.append(other["rank"])
    if len(hosts) > 1:
        notes.append(f"{len(hosts)} hosts: their events are aligned through the wall clock")
    other = {**first, "notes": notes, "ranks": sorted(ranks)}
    other.pop("rank", None)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def step_events(document: Mapping[str, Any], subject: str | None = None) -> list[dict[str, Any]]:
    """The step spans of ``document`` (of the executor ``subject``, if given), in time
    order."""
    steps = [
        e
        for e in document["traceEvents"]
        if e.get("ph") == "X"
        and e.get("cat") == D5_CATEGORY
        and e.get("name") in STEP_NAMES
        and (subject is None or (e.get("args") or {}).get("subject") == subject)
    ]
    return sorted(steps, key=lambda e: (e["ts"], e["pid"]))
