"""A report ready to be rendered: its runs, its figures saved as files, and what went
wrong while drawing. :mod:`d5core.report.build` makes it; :mod:`d5core.report.html`
turns it into one HTML page."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from d5core.levels.report import ReportFigure, ReportRun

__all__ = ["RenderedFigure", "ReportDocument"]


@dataclass(frozen=True)
class RenderedFigure:
    """One figure as the page shows it.

    :param figure: the figure's key, title, section, caption, notes, runs and data (its
        matplotlib figure is closed once saved).
    :param svg: the figure as inline SVG markup (no XML declaration or DOCTYPE).
    :param files: its copies for papers, by format (``png``, ``pdf``): paths relative to
        the HTML file.
    :param plugin: the plugin that drew it (``builtins`` for d5's own figures).
    """

    figure: ReportFigure
    svg: str
    files: Mapping[str, str]
    plugin: str


@dataclass(frozen=True)
class ReportDocument:
    """Everything one report page shows.

    :param title: the page title.
    :param created: when the report was made (UTC, ISO 8601).
    :param database: the results database the runs were read from.
    :param selection: how the runs were selected, as the user asked
        (``--last 20 --kind op``).
    :param runs: the selected runs, oldest first.
    :param figures: the rendered figures in the order they are shown.
    :param problems: one line each: a plugin whose figures failed, a figure left out
        (a duplicate key), a section that could not be drawn.
    :param traces: the trace file of each traced run, by run id: a path relative to the
        HTML file (``traces/<run id>.trace.json``).
    """

    title: str
    created: str
    database: str
    selection: str
    runs: tuple[ReportRun, ...]
    figures: tuple[RenderedFigure, ...]
    problems: tuple[str, ...] = field(default_factory=tuple)
    traces: Mapping[str, str] = field(default_factory=dict)
