"""Making a report: read the selected runs, collect every plugin's figures through the
``d5_report_figures`` hook (d5's own come from its ``builtins`` plugin), keep the ones
asked for, and save them (:mod:`d5core.report.writer`).

Every figure that draws a run measured on a busy machine carries a note naming it
(:func:`busy_notes`), whoever drew it. What goes wrong on the way costs only its own
part and is named in the report's problems: a plugin that raises, a section of d5's
figures that fails, a figure whose key another plugin took first, a figure that could
not be saved, figures beyond :data:`MAX_FIGURES`.
"""

from __future__ import annotations

import gc
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from d5core.errors import UsageError, one_line
from d5core.levels.report import REPORT_SECTIONS, ReportFigure, ReportRun
from d5core.report.document import RenderedFigure, ReportDocument
from d5core.results.store import ResultsStore, RunRecord

if TYPE_CHECKING:
    from d5core.plugins import PluginManager

__all__ = [
    "FAMILY_LEVELS",
    "HOOK",
    "MAX_FIGURES",
    "DrawnFigure",
    "build_report",
    "busy_notes",
    "collect_figures",
    "collector_paused",
    "figure_family",
    "mark_busy_runs",
]

#: The hook every report's figures come from.
HOOK = "d5_report_figures"

#: A report shows at most this many figures: saving is most of its cost (each figure is
#: drawn three times, about half a second of CPU on a laptop core), and a page of
#: hundreds of figures is read by nobody. d5's figure modules cap their own; this caps
#: the total, plugins' figures included, so that a report of 500 runs stays near 10 s.
MAX_FIGURES = 32

#: The level of runs a figure family draws, by the first part of its key (``op-roofline``
#: draws operator runs). Families with another prefix (``history-``, a plugin's own) may
#: draw runs of any kind.
FAMILY_LEVELS: dict[str, str] = {
    "op": "operators",
    "operators": "operators",
    "net": "networks",
    "networks": "networks",
    "train": "training",
    "training": "training",
    "dist": "distributed",
    "distributed": "distributed",
}

#: How a message names the runs of each level.
_LEVEL_NOUNS = {
    "operators": "operator",
    "networks": "network",
    "training": "training",
    "distributed": "distributed",
}

#: ``--kind`` for each level, to say how to select runs a family can draw.
_LEVEL_KINDS = {"operators": "op", "networks": "net", "training": "train", "distributed": "dist"}


@dataclass(frozen=True)
class DrawnFigure:
    """A figure as the hook gave it, with the plugin that drew it."""

    figure: ReportFigure
    plugin: str


def figure_family(key: str) -> str:
    """The family of a figure: the first two parts of its key (``op-samples-gemm-3f2a``
    -> ``op-samples``), what ``--figure`` names."""
    return "-".join(key.split("-")[:2])


def _in_family(key: str, name: str) -> bool:
    return key == name or key.startswith(name + "-")


def collect_figures(
    runs: Sequence[ReportRun], manager: PluginManager, store: ResultsStore | None = None
) -> tuple[list[DrawnFigure], list[str]]:
    """Call the hook once with ``runs`` (and the ``store`` they were read from, ``None``
    when they come from elsewhere) and return every figure drawn, with one problem
    line per failure: a plugin that raised or returned something else than figures, a
    section of d5's figures that failed (:class:`~d5core.report.figures.FigureWarning`),
    a figure whose key was taken first by another plugin (it is left out)."""
    from d5core.plugins import PluginWarning
    from d5core.report.figures import FigureWarning

    problems: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcomes = manager.call_each(HOOK, runs=tuple(runs), store=store)
    failed = {out.plugin for out in outcomes if out.error is not None}
    for found in caught:
        if issubclass(found.category, FigureWarning):
            problems.append(str(found.message))
        elif issubclass(found.category, PluginWarning):
            if not any(repr(name) in str(found.message) for name in failed):
                problems.append(str(found.message))
        else:
            warnings.warn_explicit(
                found.message, found.category, found.filename, found.lineno, source=found.source
            )
    drawn: list[DrawnFigure] = []
    owner: dict[str, str] = {}
    for out in outcomes:
        if out.error is not None:
            problems.append(
                f"plugin {out.plugin!r} failed to draw its figures ({one_line(out.error)}); "
                "they are left out"
            )
            continue
        result = out.result
        if result is None:
            continue
        items = list(result) if isinstance(result, Iterable) else [result]
        for item in items:
            if not isinstance(item, ReportFigure):
                problems.append(
                    f"plugin {out.plugin!r} returned a {type(item).__name__} from {HOOK}, "
                    "not a ReportFigure; left out"
                )
                continue
            if item.key in owner:
                problems.append(
                    f"figure {item.key!r} of plugin {out.plugin!r} left out: plugin "
                    f"{owner[item.key]!r} drew a figure with that key first"
                )
                item.figure.clear()
                continue
            owner[item.key] = out.plugin
            drawn.append(DrawnFigure(item, out.plugin))
    return drawn, problems


def _check_families(names: Sequence[str], runs: Sequence[ReportRun]) -> None:
    """Refuse ``--figure`` families that cannot draw the selected runs: every run must
    be of a level one of the named families draws (families of any level excepted)."""
    levels: set[str] = set()
    for name in names:
        level = FAMILY_LEVELS.get(name.split("-")[0])
        if level is None:
            return  # a family of any level: it may draw every run
        levels.add(level)
    # Runs no level draws (validations, calibrations, conformance) mix with any figure.
    wrong = [run for run in runs if run.level is not None and run.level not in levels]
    if not wrong:
        return
    asked = " ".join(f"--figure {n}" for n in names)
    kinds = " or ".join(f"--kind {_LEVEL_KINDS[level]}" for level in sorted(levels))
    shown = ", ".join(f"{run.id} ({run.kind})" for run in wrong[:5])
    more = f" and {len(wrong) - 5} more" if len(wrong) > 5 else ""
    drawn = " and ".join(_LEVEL_NOUNS[level] for level in sorted(levels))
    raise UsageError(
        f"runs of incompatible kinds asked for in one figure: {asked} draws {drawn} runs, "
        f"but {shown}{more} {'is' if len(wrong) == 1 else 'are'} not; select runs with "
        f"{kinds}, or leave --figure out"
    )


def _keep_families(drawn: list[DrawnFigure], names: Sequence[str]) -> list[DrawnFigure]:
    kept = [d for d in drawn if any(_in_family(d.figure.key, n) for n in names)]
    missing = [n for n in names if not any(_in_family(d.figure.key, n) for d in drawn)]
    if missing:
        available = sorted({figure_family(d.figure.key) for d in drawn})
        raise UsageError(
            f"no figure {missing[0]!r} was drawn from these runs; figures drawn: "
            f"{', '.join(available) if available else 'none'}"
        )
    for d in drawn:
        if d not in kept:
            d.figure.figure.clear()
    return kept


#: A figure's note names at most this many busy runs one by one.
_BUSY_NAMED = 3


def busy_notes(figure: ReportFigure, runs: Mapping[str, ReportRun]) -> tuple[str, ...]:
    """The notes ``figure`` needs for the runs it draws (of ``runs``, by id) that were
    measured on a busy machine: one line per run, the first :data:`_BUSY_NAMED`, then
    one line counting the rest; none when no run it draws was busy."""
    from d5core.results.load import BUSY_LEGEND, busy_note

    found = [
        note
        for rid in dict.fromkeys(figure.runs)
        if (run := runs.get(rid)) is not None
        and (note := busy_note(rid, run.record.load_start, run.record.load_end)) is not None
    ]
    if not found:
        return ()
    more = len(found) - _BUSY_NAMED
    shown = found[:_BUSY_NAMED] + ([f"and {more} more busy run(s)"] if more > 0 else [])
    return (*shown, BUSY_LEGEND)


def mark_busy_runs(figures: Iterable[ReportFigure], runs: Sequence[ReportRun]) -> None:
    """Add :func:`busy_notes` to each of ``figures`` that draws a busy run of ``runs``,
    and write the mark into its picture too (top left), so that its PNG and PDF copies,
    seen without the page, still say it."""
    from d5core.results.load import BUSY_MARK

    by_id = {run.id: run for run in runs}
    for figure in figures:
        notes = busy_notes(figure, by_id)
        if not notes:
            continue
        figure.notes = (*figure.notes, *notes)
        busy = sum(1 for note in notes if note.startswith(f"{BUSY_MARK} run "))
        more = sum(int(n.split()[1]) for n in notes if n.startswith("and "))
        figure.figure.text(
            0.005, 0.995, f"{BUSY_MARK}: {busy + more} run(s) measured on a busy machine",
            ha="left", va="top", fontsize=6, color="#D55E00",
        )  # fmt: skip


def _section_order(section: str) -> int:
    return REPORT_SECTIONS.index(section) if section in REPORT_SECTIONS else len(REPORT_SECTIONS)


def _cap(drawn: list[DrawnFigure], problems: list[str]) -> list[DrawnFigure]:
    """At most :data:`MAX_FIGURES` of ``drawn``, taken from the sections in turn (the
    first of each section, then the second, ...) so that no section loses all of its
    figures to the ones before it; the order of ``drawn`` is kept."""
    if len(drawn) <= MAX_FIGURES:
        return drawn
    by_section: dict[str, list[int]] = {}
    for i, d in enumerate(drawn):
        by_section.setdefault(d.figure.section, []).append(i)
    chosen: set[int] = set()
    round_ = 0
    while len(chosen) < MAX_FIGURES:
        for indices in by_section.values():
            if round_ < len(indices) and len(chosen) < MAX_FIGURES:
                chosen.add(indices[round_])
        round_ += 1
    left_out = [d for i, d in enumerate(drawn) if i not in chosen]
    for d in left_out:
        d.figure.figure.clear()
    keys = ", ".join(d.figure.key for d in left_out[:8]) + (", ..." if len(left_out) > 8 else "")
    problems.append(
        f"{len(left_out)} of {len(drawn)} figures left out: a report shows at most "
        f"{MAX_FIGURES} ({keys}); select fewer runs or name figures with --figure"
    )
    return [d for i, d in enumerate(drawn) if i in chosen]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (and in the workers forked
    inside it), as it was after; the cycles left meanwhile are collected later."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def build_report(
    store: ResultsStore,
    runs: Sequence[RunRecord],
    *,
    output: Path,
    selection: str,
    figures: Sequence[str] = (),
    manager: PluginManager | None = None,
    formats: Sequence[str] | None = None,
    jobs: int | None = None,
    timings: MutableMapping[str, float] | None = None,
) -> ReportDocument:
    """Draw and save the report of ``runs``; the page itself is rendered from the result
    (:func:`d5core.report.html.render_html`).

    :param runs: the selected runs (:func:`d5core.report.selection.select_runs`).
    :param output: the HTML file the report will be written to; the figures' copies go
        to the folder beside it (:func:`d5core.report.writer.figures_folder`), the traces
        of traced runs to ``traces/`` beside it (``<run id>.trace.json``).
    :param selection: how the runs were selected, as the user asked, for the page.
    :param figures: figure families to keep (``--figure``: key prefixes such as
        ``op-roofline``); all figures when empty.
    :param manager: the plugin manager whose hook draws; the process-wide one by default.
    :param formats: the copies to write beside the page (``png``, ``pdf``; both by default).
    :param jobs: worker processes that save figures
        (:func:`~d5core.report.writer.save_figures`).
    :param timings: filled with the seconds spent reading, drawing and saving
        (``read``, ``figures``, ``save``).
    :raises UsageError: when ``figures`` names a family that cannot draw the selected
        runs, or one that no plugin drew.
    """
    from d5core.report.writer import FILE_FORMATS, save_figures

    if manager is None:
        from d5core.plugins import get_plugin_manager

        manager = get_plugin_manager()
    spent = timings if timings is not None else {}
    # The runs' data and the figures' artists are hundreds of thousands of objects that
    # live until the report is written: the cyclic collector, run again and again over
    # all of them while figures are drawn and saved, would take a fifth of the time.
    with collector_paused():
        started = time.perf_counter()
        stored = store.read_runs([r.id for r in runs])
        report_runs = sorted((ReportRun.from_stored(s) for s in stored), key=lambda r: r.created)
        if figures:
            _check_families(figures, report_runs)
        spent["read"] = time.perf_counter() - started

        started = time.perf_counter()
        drawn, problems = collect_figures(report_runs, manager, store)
        if figures:
            drawn = _keep_families(drawn, figures)
        drawn.sort(key=lambda d: _section_order(d.figure.section))
        drawn = _cap(drawn, problems)
        mark_busy_runs((d.figure for d in drawn), report_runs)
        spent["figures"] = time.perf_counter() - started

        started = time.perf_counter()
        saved = save_figures(
            [d.figure for d in drawn],
            output,
            formats=FILE_FORMATS if formats is None else formats,
            jobs=jobs,
        )
        rendered: list[RenderedFigure] = []
        for d, result in zip(drawn, saved, strict=True):
            if result.error is not None:
                problems.append(
                    f"figure {d.figure.key!r} of plugin {d.plugin!r} could not be saved "
                    f"({result.error}); left out"
                )
                continue
            rendered.append(RenderedFigure(d.figure, result.svg, result.files, d.plugin))
        traces = _write_traces(store, report_runs, output, problems)
        spent["save"] = time.perf_counter() - started

    return ReportDocument(
        title=f"d5 report: {len(report_runs)} run{'s' if len(report_runs) != 1 else ''}",
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        database=store.location,
        selection=selection,
        runs=tuple(report_runs),
        figures=tuple(rendered),
        problems=tuple(problems),
        traces=traces,
    )


def _write_traces(
    store: ResultsStore, runs: Sequence[ReportRun], output: Path, problems: list[str]
) -> dict[str, str]:
    """Write the trace of every traced run of ``runs`` into the traces folder beside the
    page (:mod:`d5core.report.traces`); the files' paths relative to the page, by
    run id. What cannot be read or written is added to ``problems``."""
    from d5core.report.traces import TRACES_FOLDER, write_report_traces

    written, failed = write_report_traces(
        store, [run.id for run in runs], output.parent / TRACES_FOLDER
    )
    problems.extend(failed)
    return {run_id: f"{TRACES_FOLDER}/{path.name}" for run_id, path in written.items()}
