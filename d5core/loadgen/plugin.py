"""The inference package's internal plugin: the latency-under-load report figures.
(Its scenarios run through ``d5 bench net --scenario`` and inference recipes.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from d5core.hookspecs import hookimpl

__all__ = ["d5_report_figures"]


@hookimpl(tryfirst=True)
def d5_report_figures(runs: Sequence[Any]) -> list[Any]:
    from d5core.loadgen.figures import figures
    from d5core.report.figures import section_figures

    return section_figures("inference", lambda: figures(runs))
