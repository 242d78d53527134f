"""One step of a traced run drawn as a timeline, for ``d5 report``.

The whole trace is for Perfetto or ``chrome://tracing`` (the report links the file);
the report itself shows a still picture of one step, so that a reader sees at a glance
where a step's time goes without leaving the page. For each executor (or backend) whose
steps the trace holds, :func:`timeline_figures` picks the step of median duration
(:func:`choose_step`) and draws every event that overlaps it (:func:`step_timeline`):

- one row per track, a process (a rank) and one of its threads, named from the trace's
  metadata events (``process_name``, ``thread_name``);
- nested spans one lane below their parent, so that d5's spans and a profiler's operator
  tree stay readable;
- a colour per category (d5's own spans, then each profiler's), the longest events
  labelled, the x axis in milliseconds from the step's start.

Counter events (``"ph": "C"``) are not drawn; instant events are drawn as markers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from d5core.levels.report import ReportFigure
from d5core.report.style import PALETTE, figure_key, new_figure, short_label
from d5core.trace.document import D5_CATEGORY, step_events

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "MAX_EVENTS",
    "MAX_LANES",
    "MAX_SUBJECTS",
    "MAX_TRACKS",
    "StepChoice",
    "Timeline",
    "TimelineTrack",
    "choose_step",
    "step_subjects",
    "step_timeline",
    "timeline_figures",
]

#: At most this many executors of one trace get a figure (the first ones traced).
MAX_SUBJECTS = 4
#: At most this many rows (tracks) in one figure: the busiest during the step are kept.
MAX_TRACKS = 24
#: Nested spans deeper than this many lanes are drawn in the last lane of their track.
MAX_LANES = 8
#: At most this many events drawn in one figure: the longest are kept.
MAX_EVENTS = 4000
#: How many of the longest events get their name written on them.
LABELLED = 12

#: The colour of d5's own spans; profilers' categories take the palette's other colours.
_D5_COLOR = PALETTE[0]
#: Containment and free-lane tests allow this much rounding, in microseconds.
_SLACK_US = 0.5
#: Width of the plotting area in inches (the figure's width less the track names).
_PLOT_WIDTH_IN = 7.6
#: Width of one label character in inches, at the labels' font size.
_CHAR_IN = 6.0 * 0.66 / 72


@dataclass(frozen=True)
class StepChoice:
    """The step drawn for one executor, and what it was chosen among."""

    #: The executor or backend that ran the steps (``None``: the steps name none).
    subject: str | None
    #: The chosen step event.
    step: Mapping[str, Any]
    #: Its position among the subject's steps, in time order (0-based).
    index: int
    #: The durations of all the subject's steps, in time order, in microseconds.
    durations_us: tuple[float, ...]


@dataclass
class TimelineTrack:
    """One row of a timeline: a process's thread and its events during the step."""

    pid: Any
    tid: Any
    name: str
    #: ``[name, category, start ms, duration ms, lane]`` per complete event; start and
    #: duration as the trace holds them (relative to the step's start), not clipped.
    spans: list[list[Any]] = field(default_factory=list)
    #: ``[name, category, at ms]`` per instant event.
    instants: list[list[Any]] = field(default_factory=list)
    #: How many lanes the row takes (one, or one per nesting level).
    lanes: int = 1
    #: What each span is called on the picture, in the order of :attr:`spans`: its name,
    #: or the graph node it ran (``gemm0 (Gemm)``) for d5's node spans.
    labels: list[str] = field(default_factory=list)

    def busy_us(self) -> float:
        """The time its events take during the step, added up (µs)."""
        return float(sum(float(span[3]) for span in self.spans)) * 1000.0


@dataclass
class Timeline:
    """Everything one figure draws: the step, its tracks and their events."""

    choice: StepChoice
    tracks: list[TimelineTrack]
    #: The step's start on the trace's time base (µs) and its duration (ms).
    start_us: float
    duration_ms: float
    #: Category -> colour, in legend order.
    colors: dict[str, str]
    #: What had to be left out to keep the figure readable.
    left_out: dict[str, int] = field(default_factory=dict)


# -- choosing the step --------------------------------------------------------------------


def step_subjects(document: Mapping[str, Any]) -> list[str | None]:
    """The executors whose steps ``document`` holds, in the order of their first step
    (``None`` for steps that name no subject)."""
    seen: dict[str | None, None] = {}
    for step in step_events(document):
        seen.setdefault(_subject_of(step), None)
    return list(seen)


def _subject_of(event: Mapping[str, Any]) -> str | None:
    subject = (event.get("args") or {}).get("subject")
    return None if subject is None else str(subject)


def choose_step(document: Mapping[str, Any], subject: str | None) -> StepChoice | None:
    """The step of ``subject`` to draw: the one of median duration (the lower median for
    an even count, the earliest of equal ones), so that the picture is of a typical
    step rather than the first (warm-up) or an outlier; ``None`` when it has none."""
    steps = [s for s in step_events(document) if _subject_of(s) == subject]
    if not steps:
        return None
    durations = tuple(float(s["dur"]) for s in steps)
    by_length = sorted(range(len(steps)), key=lambda i: (durations[i], i))
    index = by_length[(len(steps) - 1) // 2]
    return StepChoice(subject, steps[index], index, durations)


# -- the events of one step -----------------------------------------------------------------


def _sort_value(value: Any) -> tuple[int, float, str]:
    """A key that orders ints and strings (pids and tids may be either) without error."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return (1, 0.0, str(value))
    return (0, float(value), "")


def _names(
    events: Iterable[Mapping[str, Any]],
) -> tuple[dict[Any, str], dict[Any, str], dict[Any, float]]:
    """Process names by pid, thread names by (pid, tid) and sort indices, from the
    metadata events."""
    processes: dict[Any, str] = {}
    threads: dict[Any, str] = {}
    order: dict[Any, float] = {}
    for event in events:
        if event.get("ph") != "M":
            continue
        args = event.get("args") or {}
        kind = event.get("name")
        pid = event.get("pid")
        if kind == "process_name" and args.get("name") is not None:
            processes[pid] = str(args["name"])
        elif kind == "thread_name" and args.get("name") is not None:
            threads[(pid, event.get("tid"))] = str(args["name"])
        elif kind in ("process_sort_index", "thread_sort_index"):
            index = args.get("sort_index")
            if isinstance(index, int | float):
                where = pid if kind == "process_sort_index" else (pid, event.get("tid"))
                order[(kind, where)] = float(index)
    return processes, threads, order


def _assign_lanes(spans: list[tuple[float, float, int]]) -> dict[int, int]:
    """A lane for each ``(start, end, id)``: below every span that contains it, in the
    first lane free at its start, so nested spans stack and overlapping ones never
    share a lane."""
    lanes: list[tuple[float, float]] = []  # the last span placed in each lane
    placed: dict[int, int] = {}
    for start, end, ident in sorted(spans, key=lambda s: (s[0], -(s[1] - s[0]), s[2])):
        lowest = 0
        for lane, (s, e) in enumerate(lanes):
            if s <= start + _SLACK_US and end <= e + _SLACK_US:
                lowest = lane + 1
        lane = lowest
        while lane < len(lanes) and lanes[lane][1] > start + _SLACK_US:
            lane += 1
        if lane == len(lanes):
            lanes.append((start, end))
        else:
            lanes[lane] = (start, end)
        placed[ident] = lane
    return placed


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _label_of(event: Mapping[str, Any]) -> str:
    """The text written on an event's bar: the graph node for a span that names one
    (``gemm0 (Gemm)``), else its name."""
    args = event.get("args") or {}
    node = args.get("node") if isinstance(args, Mapping) else None
    if node:
        op_type = args.get("op_type")
        return f"{node} ({op_type})" if op_type and op_type != node else str(node)
    return str(event.get("name", ""))


def _category(event: Mapping[str, Any]) -> str:
    cat = event.get("cat")
    return str(cat) if cat else "(no category)"


def _ms(value_us: float) -> float:
    return round(value_us / 1000.0, 4)


def step_timeline(document: Mapping[str, Any], choice: StepChoice) -> Timeline:
    """The tracks and events of ``document`` during the chosen step.

    Every complete event that overlaps the step (and every instant event inside it) is
    kept, on the track of its process and thread. Tracks without events in the step are
    kept as empty rows while there is room (:data:`MAX_TRACKS`), so that an idle rank
    or thread shows as idle. Beyond :data:`MAX_EVENTS` events or :data:`MAX_TRACKS`
    tracks, the shortest events and the least busy tracks are left out and counted in
    :attr:`Timeline.left_out`.
    """
    events = document["traceEvents"]
    step = choice.step
    start = float(step["ts"])
    end = start + float(step["dur"])
    processes, threads, order = _names(events)

    tracks: dict[tuple[Any, Any], TimelineTrack] = {}
    inside: list[tuple[tuple[Any, Any], Mapping[str, Any]]] = []
    for event in events:
        phase = event.get("ph")
        if phase not in ("X", "i", "I") or "pid" not in event or not _number(event.get("ts")):
            continue
        if phase == "X" and not _number(event.get("dur", 0.0)):
            continue
        key = (event["pid"], event.get("tid"))
        if key not in tracks:
            pid, tid = key
            process = processes.get(pid, f"pid {pid}")
            thread = threads.get(key, f"thread {tid}")
            tracks[key] = TimelineTrack(pid, tid, short_label(f"{process} · {thread}", 44))
        ts = float(event["ts"])
        if phase == "X":
            finish = ts + float(event.get("dur", 0.0))
            overlaps = ts < end and finish > start if finish > ts else start <= ts <= end
        else:
            overlaps = start <= ts <= end
        if overlaps:
            inside.append((key, event))

    left_out: dict[str, int] = {}
    spans = [(k, e) for k, e in inside if e.get("ph") == "X"]
    if len(spans) > MAX_EVENTS:
        spans.sort(key=lambda ke: -float(ke[1].get("dur", 0.0)))
        left_out["events"] = len(spans) - MAX_EVENTS
        spans = spans[:MAX_EVENTS]
    instants = [(k, e) for k, e in inside if e.get("ph") != "X"]

    by_track: dict[tuple[Any, Any], list[Mapping[str, Any]]] = {}
    for key, event in spans:
        by_track.setdefault(key, []).append(event)
    deepest = 0
    for key, track_events in by_track.items():
        lanes = _assign_lanes(
            [
                (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), i)
                for i, e in enumerate(track_events)
            ]
        )
        track = tracks[key]
        rows: list[tuple[list[Any], str]] = []
        for i, event in enumerate(track_events):
            lane = lanes[i]
            deepest = max(deepest, lane + 1)
            span = [
                str(event.get("name", "")),
                _category(event),
                _ms(float(event["ts"]) - start),
                _ms(float(event.get("dur", 0.0))),
                min(lane, MAX_LANES - 1),
            ]
            rows.append((span, _label_of(event)))
        rows.sort(key=lambda row: (row[0][2], row[0][4]))
        track.spans = [span for span, _ in rows]
        track.labels = [label for _, label in rows]
        track.lanes = min(MAX_LANES, 1 + max(s[4] for s in track.spans))
    if deepest > MAX_LANES:
        left_out["lanes"] = deepest - MAX_LANES
    for key, event in instants:
        tracks[key].instants.append(
            [str(event.get("name", "")), _category(event), _ms(float(event["ts"]) - start)]
        )

    step_key = (step["pid"], step.get("tid"))

    def track_order(key: tuple[Any, Any]) -> tuple[Any, ...]:
        pid, tid = key
        has_d5 = any(s[1] == D5_CATEGORY for s in tracks[key].spans)
        return (
            order.get(("process_sort_index", pid), 0.0),
            pid != step_key[0],
            _sort_value(pid),
            key != step_key,
            order.get(("thread_sort_index", key), 0.0),
            not has_d5,
            _sort_value(tid),
        )

    kept = list(tracks)
    if len(kept) > MAX_TRACKS:
        kept.sort(key=lambda k: (k != step_key, -tracks[k].busy_us(), track_order(k)))
        left_out["tracks"] = len(kept) - MAX_TRACKS
        dropped = kept[MAX_TRACKS:]
        left_out["events"] = left_out.get("events", 0) + sum(
            len(tracks[k].spans) + len(tracks[k].instants) for k in dropped
        )
        kept = kept[:MAX_TRACKS]
    kept.sort(key=track_order)

    categories = sorted(
        {s[1] for k in kept for s in tracks[k].spans}
        | {i[1] for k in kept for i in tracks[k].instants}
    )
    colors: dict[str, str] = {D5_CATEGORY: _D5_COLOR} if D5_CATEGORY in categories else {}
    others = [category for category in categories if category != D5_CATEGORY]
    for i, category in enumerate(others):
        colors[category] = PALETTE[1 + i % (len(PALETTE) - 1)]
    return Timeline(
        choice=choice,
        tracks=[tracks[k] for k in kept],
        start_us=start,
        duration_ms=_ms(end - start),
        colors=colors,
        left_out=left_out,
    )


# -- drawing ------------------------------------------------------------------------


def _text_color(color: str) -> str:
    """Black or white, whichever reads better on ``color`` (``#rrggbb``)."""
    r, g, b = (int(color[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "white"


def _draw(ax: Axes, timeline: Timeline) -> list[str]:
    """Draw ``timeline`` on ``ax``; the names of the labelled events."""
    duration = max(timeline.duration_ms, 1e-6)
    margin = 0.02 * duration
    low, high = -margin, duration + margin
    y = 0.0
    ticks: list[float] = []
    labels: list[str] = []
    bars: list[tuple[float, float, float, str, str]] = []  # x, width, y, colour, name
    for track in timeline.tracks:
        ticks.append(y + 0.5)
        labels.append(track.name)
        by_lane: dict[tuple[int, str], list[tuple[float, float]]] = {}
        for (_, category, begin, length, lane), name in zip(track.spans, track.labels, strict=True):
            left = max(begin, low)
            right = min(begin + length, high)
            width = max(right - left, 0.0)
            by_lane.setdefault((lane, category), []).append((left, width))
            bars.append((left, width, y + lane, timeline.colors[category], name))
        for (lane, category), ranges in by_lane.items():
            ax.broken_barh(
                ranges,
                (y + lane + 0.1, 0.8),
                facecolors=timeline.colors[category],
                edgecolors="white",
                linewidth=0.3,
            )
        if track.instants:
            ax.scatter(
                [i[2] for i in track.instants],
                [y + 0.1] * len(track.instants),
                c=[timeline.colors[i[1]] for i in track.instants],
                marker="v",
                s=14,
                zorder=3,
            )
        y += track.lanes
        ax.axhline(y, color="#999999", linewidth=0.5)
    ax.set_ylim(max(y, 1.0), 0.0)
    ax.set_xlim(low, high)
    ax.set_yticks(ticks, labels, fontsize=7)
    ax.tick_params(axis="y", length=0)
    ax.grid(False, axis="y")
    for edge in (0.0, duration):
        ax.axvline(edge, color="black", linestyle="--", linewidth=0.8)
    ax.set_xlabel("time from the step's start (ms)")

    labelled: list[str] = []
    per_char = (high - low) * _CHAR_IN / _PLOT_WIDTH_IN
    for left, width, lane_y, color, name in sorted(bars, key=lambda b: -b[1])[:LABELLED]:
        room = int(width / per_char) - 1
        if room < 3 or not name:
            continue
        ax.text(
            left + width / 2,
            lane_y + 0.5,
            short_label(name, room),
            ha="center",
            va="center",
            fontsize=6,
            color=_text_color(color),
            clip_on=True,
        )
        labelled.append(name)
    from matplotlib.patches import Patch

    ax.legend(
        handles=[Patch(color=c, label=cat) for cat, c in timeline.colors.items()],
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=7,
        frameon=False,
        title="category",
        title_fontsize=7,
    )
    return labelled


def _data(timeline: Timeline, run_id: str, labelled: Sequence[str]) -> dict[str, Any]:
    choice = timeline.choice
    durations = choice.durations_us
    step = choice.step
    return {
        "run": run_id,
        "subject": choice.subject,
        "step": {
            "name": step.get("name"),
            "pid": step.get("pid"),
            "tid": step.get("tid"),
            "index": choice.index,
            "count": len(durations),
            "ts_us": float(step["ts"]),
            "duration_ms": timeline.duration_ms,
            "durations_ms": [_ms(d) for d in durations],
        },
        "tracks": [
            {
                "pid": t.pid,
                "tid": t.tid,
                "name": t.name,
                "lanes": t.lanes,
                "spans": t.spans,
                "instants": t.instants,
            }
            for t in timeline.tracks
        ],
        "colors": dict(timeline.colors),
        "labelled": list(labelled),
        "left_out": dict(timeline.left_out),
    }


def _caption(timeline: Timeline, other: Mapping[str, Any]) -> str:
    choice = timeline.choice
    durations = [d / 1000.0 for d in choice.durations_us]
    n = len(durations)
    what = f"{choice.subject}'s" if choice.subject else "the"
    parts = [
        f"The median-duration step of {what} {n} traced step{'s' if n != 1 else ''} "
        f"(step {choice.index + 1} in time order, {timeline.duration_ms:.3g} ms; the steps "
        f"took {min(durations):.3g} to {max(durations):.3g} ms).",
        "Every event that overlaps it, one row per process and thread; nested spans are "
        "drawn one lane below the span that holds them, and the longest are labelled.",
        "Colours are the event categories: d5's own spans and each profiler's events.",
        "x: milliseconds from the step's start; the dashed lines are the step's start and "
        "end (events that begin before or end after it are cut there).",
    ]
    profilers = other.get("profilers")
    if isinstance(profilers, list | tuple) and profilers:
        parts.append("Profilers: " + ", ".join(str(p) for p in profilers) + ".")
    parts.append("The whole trace opens in Perfetto or chrome://tracing (linked below).")
    return " ".join(parts)


def _notes(timeline: Timeline, other: Mapping[str, Any]) -> tuple[str, ...]:
    notes: list[str] = []
    left = timeline.left_out
    if left.get("tracks"):
        notes.append(
            f"{left['tracks']} of the trace's least busy tracks are not drawn "
            f"(at most {MAX_TRACKS} rows)"
        )
    if left.get("events"):
        notes.append(
            f"{left['events']} events of this step are not drawn (the shortest past "
            f"{MAX_EVENTS}, and those of the tracks left out); the trace file holds them all"
        )
    if left.get("lanes"):
        notes.append(f"spans nested deeper than {MAX_LANES} levels are drawn in the last lane")
    found = other.get("notes")
    if isinstance(found, list | tuple):
        notes.extend(f"trace: {note}" for note in found[:5] if str(note).strip())
    return tuple(notes)


def timeline_figures(
    document: Mapping[str, Any], run_id: str, *, section: str, run_name: str = ""
) -> list[ReportFigure]:
    """A timeline figure of one step per traced executor of ``document`` (the first
    :data:`MAX_SUBJECTS`), in section ``section`` of the report; none when the trace
    holds no step."""
    other = document.get("otherData") or {}
    figures: list[ReportFigure] = []
    for subject in step_subjects(document)[:MAX_SUBJECTS]:
        choice = choose_step(document, subject)
        if choice is None:
            continue
        timeline = step_timeline(document, choice)
        lanes = sum(t.lanes for t in timeline.tracks)
        figure = new_figure(10.0, min(1.3 + 0.24 * max(lanes, 3), 13.0))
        ax = figure.add_subplot()
        labelled = _draw(ax, timeline)
        step_name = str(choice.step.get("name", "step"))
        who = f" of {choice.subject}" if choice.subject else ""
        named = f" ({short_label(run_name, 40)})" if run_name else ""
        ax.set_title(short_label(f"{step_name}{who}: run {run_id}{named}", 90), fontsize=9)
        figures.append(
            ReportFigure(
                key=figure_key("trace-timeline", run_id, choice.subject or ""),
                title=f"Trace of run {run_id}{named}: one {step_name}{who}",
                section=section,
                figure=figure,
                data=_data(timeline, run_id, labelled),
                runs=(run_id,),
                caption=_caption(timeline, other),
                notes=_notes(timeline, other),
            )
        )
    return figures
