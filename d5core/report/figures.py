"""d5's own figures: one module per report section, each with a ``figures(runs)``
function that draws what it knows from the runs it is given and ignores the others.

The internal ``builtins`` plugin hands them to the ``d5_report_figures`` hook
(:mod:`d5core.builtin`), so d5's figures and a plugin's are collected by the same call.
"""

from __future__ import annotations

import importlib
import inspect
import warnings
from collections.abc import Sequence
from typing import Any

from d5core.report.model import ReportFigure, ReportRun

__all__ = ["FIGURE_MODULES", "FigureWarning", "builtin_figures"]

#: The modules that draw d5's own figures, in the order of the report's sections.
FIGURE_MODULES: tuple[str, ...] = (
    "d5core.report.operators",
    "d5core.report.networks",
    "d5core.report.inference",
    "d5core.report.training",
    "d5core.report.distributed",
    "d5core.report.conformance",
    "d5core.report.history",
)


class FigureWarning(UserWarning):
    """A section of d5's own figures could not be drawn; the report shows the message."""


def builtin_figures(runs: Sequence[ReportRun], store: Any = None) -> list[ReportFigure]:
    """Every figure d5 itself draws of ``runs``, section by section (``store``: the
    results store they were read from, which the history reads noise calibrations from).

    A section that fails costs only its own figures: the failure is issued as a
    :class:`FigureWarning` (one line, naming the section), which the report shows.
    """
    drawn: list[ReportFigure] = []
    for name in FIGURE_MODULES:
        try:
            module = importlib.import_module(name)
            if "store" in inspect.signature(module.figures).parameters:
                drawn.extend(module.figures(runs, store=store))
            else:
                drawn.extend(module.figures(runs))
        except Exception as exc:
            message = " ".join(str(exc).split()) or type(exc).__name__
            section = name.rsplit(".", 1)[-1]
            warnings.warn(
                f"d5's {section} figures could not be drawn: {type(exc).__name__}: {message}",
                FigureWarning,
                stacklevel=2,
            )
    return drawn
