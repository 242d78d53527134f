"""Reports: stored runs drawn as figures in one self-contained HTML file
(``d5 report``), with PNG and PDF copies of every figure for papers.

The figures are made by the ``d5_report_figures`` hook (d5's own, one module per level,
come from its internal ``builtins`` plugin); :mod:`d5core.levels.report` holds what
they are made of.
"""

from __future__ import annotations

from d5core.levels.report import (
    REPORT_SECTIONS,
    ReportFigure,
    ReportMeasurement,
    ReportRun,
    level_of,
    machine_of,
)

__all__ = [
    "REPORT_SECTIONS",
    "ReportFigure",
    "ReportMeasurement",
    "ReportRun",
    "level_of",
    "machine_of",
]
