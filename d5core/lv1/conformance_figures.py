"""The conformance figure: how many of onnx's backend node cases each executor passes.

``d5 conformance EXECUTOR`` stores one run of kind ``conformance`` per executor it runs
(metrics ``passed``, ``failed``, ``errors``, ``unsupported`` and ``total``, counted in
cases; in its config ``passed_with_fallback``, the passes that ran some node on the
executor's fallback engine). :func:`figures` draws the stored runs as one figure of
stacked horizontal bars, one bar per run, with each count written on its segment, in the
report's ``networks`` section (conformance is a property of a graph executor). The passed
segment is split: the passes on the executor's own code, then (hatched) those that needed
its fallback engine, so a rate lifted by another engine is not read as the executor's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from d5core.levels.report import ReportFigure, ReportRun
from d5core.report.style import machines_note, new_figure, short_label

__all__ = ["CONFORMANCE_SEGMENTS", "FALLBACK_SEGMENT", "MAX_BARS", "figures"]

#: The kind of run ``d5 conformance`` stores.
_KIND = "conformance"

#: The segments of each bar: the stored metric, its legend label and its colour (passed
#: green, failed vermillion, errors reddish purple, unsupported grey).
CONFORMANCE_SEGMENTS: tuple[tuple[str, str, str], ...] = (
    ("passed", "passed on its own code", "#009E73"),
    ("failed", "failed (wrong output)", "#D55E00"),
    ("errors", "error", "#CC79A7"),
    ("unsupported", "unsupported operator", "#BBBBBB"),
)

#: The part of the passed segment that ran on a fallback engine (the bar's key
#: ``passed_with_fallback``), drawn after the own passes: its legend label and colour.
FALLBACK_SEGMENT: tuple[str, str, str] = (
    "passed_with_fallback",
    "passed on a fallback engine",
    "#8FD1BD",
)

#: The x axis runs to this many times the longest bar, leaving room for the text after it.
_SPAN = 1.45

#: Roughly how wide the axes are (inches) and how wide one digit of a count is written.
_AXES_WIDTH_IN = 5.0
_DIGIT_IN = 0.075

#: At most this many runs are drawn (the newest); the caption names how many were left out.
MAX_BARS = 40


def _count(run: ReportRun, name: str) -> int | None:
    """The stored count ``name`` of ``run`` as an integer, ``None`` when it has none."""
    value = run.metric_value(name)
    if value is None or not math.isfinite(value):
        return None
    return round(value)


def _bar(run: ReportRun) -> dict[str, Any] | None:
    """What one run's bar draws, or ``None`` for a run without its counts (one that
    failed before it stored them)."""
    counts = {name: _count(run, name) for name, _, _ in CONFORMANCE_SEGMENTS}
    total = _count(run, "total")
    if counts["passed"] is None or total is None:
        return None
    executor = str(run.config.get("executor") or run.name.removeprefix("conformance ").strip())
    recorded = run.config.get("passed_with_fallback")
    fallback = (
        min(int(recorded), counts["passed"])
        if isinstance(recorded, (int, float)) and math.isfinite(recorded) and recorded >= 0
        else None
    )
    return {
        "run_id": run.id,
        "executor": executor,
        **{name: value or 0 for name, value in counts.items()},
        # None: stored before d5 recorded it; its passes are drawn as the executor's own
        "passed_with_fallback": fallback,
        "total": total,
        "pattern": run.config.get("pattern"),
        "limit": run.config.get("limit"),
        "onnx": run.config.get("onnx"),
    }


def _fits(count: int, span: float) -> bool:
    """Whether ``count`` can be written inside its segment on an axis ``span`` long."""
    return count / span * _AXES_WIDTH_IN >= _DIGIT_IN * len(str(count)) + 0.06


def _labels(bars: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each bar's axis label: the executor, with the run id where an executor has
    several bars, and the case selection where the run did not run every case."""
    per_executor: dict[str, int] = {}
    for bar in bars:
        per_executor[bar["executor"]] = per_executor.get(bar["executor"], 0) + 1
    labels = []
    for bar in bars:
        label = short_label(bar["executor"], 24)
        if per_executor[bar["executor"]] > 1:
            label += f" ({bar['run_id'][:6]})"
        if bar["pattern"] is not None:
            label += f"\n/{short_label(bar['pattern'], 20)}/"
        if bar["limit"] is not None:
            label += f" first {bar['limit']}"
        labels.append(label)
    return labels


def _selection_note(bars: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """A note when the bars counted different case selections or onnx versions, whose
    counts do not compare."""
    selections = {(b["pattern"], b["limit"]) for b in bars}
    versions = {b["onnx"] for b in bars if b["onnx"]}
    notes = []
    if len(selections) > 1:
        notes.append(
            "the runs ran different selections of cases (--pattern, --limit): compare their "
            "counts with care"
        )
    if len(versions) > 1:
        shown = ", ".join(sorted(str(v) for v in versions))
        notes.append(f"the runs took their cases from different onnx versions ({shown})")
    unsplit = sorted({b["executor"] for b in bars if b["passed_with_fallback"] is None})
    if unsplit:
        notes.append(
            f"runs of {', '.join(unsplit)} did not record which passes needed a fallback "
            "engine: all their passes are drawn as the executor's own"
        )
    return tuple(notes)


def figures(runs: Sequence[ReportRun]) -> list[ReportFigure]:
    """The conformance figure of the ``conformance`` runs among ``runs`` (other runs are
    ignored); ``[]`` when there is none with its counts stored.

    One bar per run (at most :data:`MAX_BARS`, the newest), sorted by executor then age;
    its segments are the stored counts of passed, failed, error and unsupported cases,
    each written on its segment, and the bar's end names the total and the pass rate.
    """
    found = [(run, bar) for run in runs if run.kind == _KIND for bar in [_bar(run)] if bar]
    if not found:
        return []
    found.sort(key=lambda item: item[0].created, reverse=True)
    left_out = len(found) - MAX_BARS if len(found) > MAX_BARS else 0
    kept = sorted(found[:MAX_BARS], key=lambda item: (item[1]["executor"], item[0].created))
    drawn_runs = [run for run, _ in kept]
    bars = [bar for _, bar in kept]
    labels = _labels(bars)

    figure = new_figure(7.0, 1.3 + 0.42 * len(bars))
    ax = figure.add_subplot()
    positions = list(range(len(bars)))[::-1]  # the first bar at the top
    widest = max(max(sum(bar[n] for n, _, _ in CONFORMANCE_SEGMENTS), bar["total"], 1)
                 for bar in bars)  # fmt: skip
    span = widest * _SPAN
    left = [0] * len(bars)
    beside: list[list[str]] = [[] for _ in bars]  # counts too narrow to write inside
    fallback = [bar["passed_with_fallback"] or 0 for bar in bars]
    series: list[tuple[str, str, str, list[int]]] = []
    for name, legend, color in CONFORMANCE_SEGMENTS:
        if name == "passed":  # own passes, then those a fallback engine ran
            own = [bar[name] - f for bar, f in zip(bars, fallback, strict=True)]
            series.append((name, legend, color, own))
            series.append((*FALLBACK_SEGMENT, fallback))
        else:
            series.append((name, legend, color, [bar[name] for bar in bars]))  # fmt: skip
    for name, legend, color, widths in series:
        if not any(widths):
            continue
        drawn = ax.barh(
            positions, widths, left=left, color=color, label=legend, height=0.6,
            hatch="///" if name == FALLBACK_SEGMENT[0] else None,
        )  # fmt: skip
        inside = [_fits(w, span) for w in widths]
        ax.bar_label(
            drawn,
            labels=[str(w) if w and fits else "" for w, fits in zip(widths, inside, strict=True)],
            label_type="center",
            fontsize=7,
            color="black" if name in ("unsupported", FALLBACK_SEGMENT[0]) else "white",
        )
        for i, (w, fits) in enumerate(zip(widths, inside, strict=True)):
            if w and not fits:
                word = "fallback" if name == FALLBACK_SEGMENT[0] else legend.split(" ")[0]
                beside[i].append(f"{word} {w}")
        left = [a + w for a, w in zip(left, widths, strict=True)]
    for position, bar, end, extra in zip(positions, bars, left, beside, strict=True):
        rate = bar["passed"] / bar["total"] if bar["total"] else 0.0
        text = f"{bar['total']} cases, {rate:.1%} passed"
        if bar["passed_with_fallback"]:  # the executor's own rate beside the lifted one
            own = (bar["passed"] - bar["passed_with_fallback"]) / bar["total"]
            text += f",\n{own:.1%} on its own code"
        ax.text(
            end + widest * 0.01,
            position,
            text + (f"\n({', '.join(extra)})" if extra else ""),
            va="center",
            fontsize=7,
        )
    ax.set_yticks(positions, labels)
    ax.set_xlim(0, span)
    ax.set_xlabel("onnx backend node cases")
    ax.grid(axis="y", visible=False)
    figure.legend(loc="outside lower center", fontsize=7, frameon=False, ncols=3)

    caption = (
        "Cases of onnx's backend node tests per executor, as d5 conformance stored them: "
        "passed on the executor's own code, passed with some node run on its fallback "
        "engine (hatched; the numpy executor's is onnx.reference), failed (a wrong "
        "output), error and unsupported (the executor refused an operator), one bar per "
        "stored run. Where a fallback ran, the bar's end gives both rates."
    )
    if left_out:
        caption += f" The {left_out} oldest conformance run(s) were left out (at most {MAX_BARS})."
    return [
        ReportFigure(
            key="net-conformance",
            title="Conformance: onnx node cases per executor",
            section="networks",
            figure=figure,
            data={
                "segments": [name for name, _, _ in CONFORMANCE_SEGMENTS],
                "bars": bars,
                "left_out": left_out,
            },
            runs=tuple(run.id for run in drawn_runs),
            caption=caption,
            notes=machines_note(drawn_runs) + _selection_note(bars),
        )
    ]
