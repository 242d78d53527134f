"""The trace package's internal plugin: ``d5 trace``, and the report's timelines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from d5core.hookspecs import hookimpl

__all__ = ["d5_cli_commands", "d5_report_figures"]


@hookimpl
def d5_cli_commands() -> list[Any]:
    from d5core.cli.lazy import LazyCommand

    return [
        LazyCommand(
            "trace",
            "d5core.trace.trace_cmd:trace",
            "Export a traced run's timeline for Perfetto, or list its slowest operators.",
        )
    ]


@hookimpl
def d5_report_figures(runs: Sequence[Any], store: Any) -> list[Any]:
    from d5core.trace.report_hooks import report_figures

    return report_figures(runs, store)
