"""Hooks of ``d5 report``: the figures drawn from stored runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from d5core.hookspecs._markers import hookspec

if TYPE_CHECKING:
    from d5core.levels.report import ReportFigure, ReportRun

__all__ = ["d5_report_figures"]


# -------------------------------------------------------------------------
# Reports
# -------------------------------------------------------------------------


@hookspec
def d5_report_figures(runs: Sequence[ReportRun], store: Any) -> Sequence[ReportFigure] | None:
    """Draw figures of the runs a report was asked for.

    d5's own figures (samples per backend, rooflines, node breakdowns, learning curves,
    bandwidth against message size, history) come through this hook too, from its
    internal ``builtins`` plugin. A framework or metric plugin adds what only it knows
    how to draw: say, a device-utilisation timeline from measurements it stored.

    :param runs: every selected run, oldest first, each a
        :class:`~d5core.levels.report.ReportRun` with its environment, measurements
        (raw samples included) and scalar metrics. Select the runs you draw by
        ``run.kind``, ``run.level`` or the metrics they hold; ignore the others.
    :param store: the :class:`~d5core.results.ResultsStore` the runs were read from,
        for what the runs alone do not hold (d5's history reads the machines' stored
        noise calibrations from it). Read from it only; ``None`` when the runs did not
        come from a store.
    :return: :class:`~d5core.levels.report.ReportFigure` objects (matplotlib figures with
        the numbers they draw, a key unique in the report, and the section they belong
        to), or ``None`` when there is nothing to draw. Draw with the ``Agg`` backend
        (``matplotlib.figure.Figure()``, not ``pyplot``): the report saves each figure
        as inline SVG, PNG and PDF and closes it.

    Not firstresult: every plugin's figures are shown. An implementation that raises
    costs only its own figures; the report names the plugin and its one-line error
    instead. Figures whose key was already taken are left out and named the same way.
    Titles, captions and notes are plain text: the report escapes them.

    .. versionadded:: 1.6
    """
