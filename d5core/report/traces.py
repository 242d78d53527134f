"""Traced runs in ``d5 report``: their timeline figures and their trace files.

A run traced with ``--trace`` keeps its trace as artifacts (one per rank,
:mod:`d5core.trace.document`). For such a run the report shows a timeline of one step
per executor (:func:`report_figures`, what the trace package's plugin returns from
``d5_report_figures``) and writes the whole merged trace beside the page
(:func:`write_report_traces`, called by :func:`d5core.report.build.build_report`), linked
from the page so that it can be opened in Perfetto or ``chrome://tracing``.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5core.errors import UsageError, one_line
from d5core.trace.document import is_trace_artifact, merge_documents, read_document

if TYPE_CHECKING:
    from d5core.levels.report import ReportFigure, ReportRun

__all__ = [
    "MAX_TRACED_RUNS",
    "TRACES_FOLDER",
    "TRACE_SECTION",
    "read_run_trace",
    "report_figures",
    "trace_artifacts",
    "trace_file_name",
    "write_report_traces",
]

#: The report section of the timeline figures.
TRACE_SECTION = "traces"
#: The folder beside the report page that holds the traces of its runs.
TRACES_FOLDER = "traces"
#: At most this many traced runs of a report get timeline figures (the newest).
MAX_TRACED_RUNS = 8

_RANK = re.compile(r"^trace\.rank(\d+)\.json$")
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def trace_artifacts(store: Any, run_id: str) -> list[str]:
    """The names of ``run_id``'s trace artifacts, the single-process one first, then the
    ranks in rank order; empty for a run that was not traced."""

    def order(name: str) -> tuple[int, str]:
        found = _RANK.match(name)
        return (int(found.group(1)) + 1 if found else 0, name)

    return sorted((n for n in store.artifact_names(run_id) if is_trace_artifact(n)), key=order)


def read_run_trace(store: Any, run_id: str) -> dict[str, Any] | None:
    """The trace of ``run_id``, its ranks merged into one document; ``None`` when the
    run keeps no trace.

    :raises UsageError: when a trace artifact is not a d5 trace document.
    """
    names = trace_artifacts(store, run_id)
    if not names:
        return None
    return merge_documents([read_document(store.read_artifact(run_id, n), n) for n in names])


def trace_file_name(run_id: str) -> str:
    """The file name of ``run_id``'s trace in :data:`TRACES_FOLDER`: ``<run id>.trace.json``
    (run ids that are not plain names are hashed)."""
    if _SAFE_ID.match(run_id):
        return f"{run_id}.trace.json"
    import hashlib

    return f"run-{hashlib.sha256(run_id.encode()).hexdigest()[:16]}.trace.json"


def _problem(message: str) -> None:
    from d5core.report.figures import FigureWarning

    warnings.warn(message, FigureWarning, stacklevel=3)


def report_figures(runs: Sequence[ReportRun], store: Any) -> list[ReportFigure]:
    """Timeline figures of the traced runs among ``runs`` (the newest
    :data:`MAX_TRACED_RUNS`): one per traced executor of each
    (:func:`d5core.report.trace_figure.timeline_figures`), in section :data:`TRACE_SECTION`.

    A run whose trace cannot be read or drawn costs only its own figures: the reason is
    issued as a :class:`~d5core.report.figures.FigureWarning`, which the report lists
    with its problems. Nothing is drawn when ``store`` is ``None``.
    """
    if store is None:
        return []
    from d5core.report.trace_figure import timeline_figures

    traced: list[tuple[ReportRun, list[str]]] = []
    for run in runs:
        try:
            names = trace_artifacts(store, run.id)
        except UsageError:
            continue  # a run the store no longer holds: nothing to draw
        if names:
            traced.append((run, names))
    if len(traced) > MAX_TRACED_RUNS:
        skipped = ", ".join(run.id for run, _ in traced[:-MAX_TRACED_RUNS])
        _problem(
            f"only the newest {MAX_TRACED_RUNS} of {len(traced)} traced runs get trace "
            f"timelines; not drawn: {skipped} (their trace files are still linked)"
        )
        traced = traced[-MAX_TRACED_RUNS:]
    figures: list[ReportFigure] = []
    for run, names in traced:
        try:
            document = merge_documents(
                [read_document(store.read_artifact(run.id, n), n) for n in names]
            )
            drawn = timeline_figures(document, run.id, section=TRACE_SECTION, run_name=run.name)
        except Exception as exc:
            _problem(f"the trace of run {run.id} could not be drawn: {one_line(exc)}")
            continue
        if not drawn:
            _problem(
                f"the trace of run {run.id} holds no step (bench.step or train.step): "
                "no timeline drawn; open its trace file instead"
            )
        figures.extend(drawn)
    return figures


def write_report_traces(
    store: Any, run_ids: Iterable[str], folder: Path
) -> tuple[dict[str, Path], list[str]]:
    """Write the merged trace of each traced run of ``run_ids`` into ``folder`` (created
    when needed) as :func:`trace_file_name`.

    :return: the files written, by run id, and one problem line per trace that could
        not be read or written (that run's trace is then not linked).
    """
    from d5core.report.writer import write_text_atomically

    written: dict[str, Path] = {}
    problems: list[str] = []
    for run_id in run_ids:
        try:
            document = read_run_trace(store, run_id)
        except UsageError as exc:
            problems.append(f"the trace of run {run_id} could not be read: {one_line(exc)}")
            continue
        if document is None:
            continue
        path = folder / trace_file_name(run_id)
        try:
            folder.mkdir(exist_ok=True)
            write_text_atomically(path, json.dumps(document, separators=(",", ":")))
        except (OSError, TypeError, ValueError) as exc:
            problems.append(
                f"the trace of run {run_id} could not be written to {path}: {one_line(exc)}"
            )
            continue
        written[run_id] = path
    return written, problems
