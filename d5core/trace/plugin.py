"""The trace package's internal plugin: ``d5 trace`` (the report draws traced runs' timelines:
:mod:`d5core.report.traces`)."""

from __future__ import annotations

from typing import Any

from d5core.hookspecs import hookimpl

__all__ = ["d5_cli_commands"]


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

