"""The report package's internal plugin: what shows stored runs to a reader, ``d5 report``
and ``d5 results`` (list, show, export, compare, table, artifacts), the history figures
and the timelines of traced runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from d5core.hookspecs import hookimpl

__all__ = ["d5_cli_commands", "d5_report_figures"]


@hookimpl(tryfirst=True)
def d5_cli_commands() -> list[Any]:
    from d5core.cli.lazy import LazyCommand, LazyGroup

    # a group of lazy members, so that other plugins can add theirs (level 2's ``score``,
    # the team store's ``merge`` and ``import``)
    results = LazyGroup(
        "results", help="List, show, export, compare, merge, import and score stored runs."
    )
    for name, attribute, text in (
        ("list", "list_runs", "List stored runs, newest first."),
        ("show", "show_run", "Show one run: its settings, environment, measurements and metrics."),
        ("export", "export_runs", "Export runs with their raw samples as JSON, CSV or JSON Lines."),
        ("compare", "compare_runs", "Compare CANDIDATE with BASELINE, measurement by measurement."),
        ("table", "table_runs", "Stored runs side by side, from any number of environments."),
    ):
        results.add_command(LazyCommand(name, f"d5core.report.results_cmd:{attribute}", text))
    results.add_command(
        LazyCommand(
            "artifacts",
            "d5core.report.artifacts_cmd:artifacts",
            "List the files kept with a run (LoadGen's logs, ...), or write them out.",
        )
    )
    return [
        results,
        LazyCommand(
            "report",
            "d5core.report.command:report",
            "Write an HTML report of stored runs, with PNG and PDF figures.",
        ),
    ]


@hookimpl(tryfirst=True)
def d5_report_figures(runs: Sequence[Any], store: Any) -> list[Any]:
    from d5core.report.figures import section_figures
    from d5core.report.history import figures
    from d5core.report.traces import report_figures

    # a traced run's timelines isolate each run themselves (one unreadable trace costs
    # only its own figure)
    return [
        *section_figures("history", lambda: figures(runs, store=store)),
        *report_figures(runs, store),
    ]
