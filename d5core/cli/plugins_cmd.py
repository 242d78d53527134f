"""``d5 list-plugins``: what is installed, and whether it works."""

from __future__ import annotations

import warnings

import click
from rich.table import Table

from d5core.cli.output import console, print_json
from d5core.errors import CheckFailed
from d5core.plugins import (
    HookProblem,
    PluginRecord,
    PluginWarning,
    Status,
    get_plugin_manager,
)
from d5core.plugins.problems import CLASH

__all__ = ["list_plugins"]

_STYLE = {
    Status.OK: "green",
    Status.FAILED: "bold red",
    Status.INCOMPATIBLE: "yellow",
    Status.DISABLED: "dim",
}


@click.command("list-plugins")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
@click.option(
    "--check",
    is_flag=True,
    help="Also import every component, run each plugin's self-check and call the hooks "
    "whose entries are merged by name; exit 1 if any plugin is failed or incompatible, or "
    "a hook failed or two plugins offer the same name.",
)
def list_plugins(as_json: bool, check: bool) -> None:
    """List installed plugins with their status.

    Listing reads installed metadata and imports only each plugin's light plugin module,
    never a framework. Exit 0 even when a plugin is broken, unless --check is given.
    """
    manager = get_plugin_manager()
    problems: list[HookProblem] = []
    if check:
        with warnings.catch_warnings():  # each problem is shown once, below the table
            warnings.simplefilter("ignore", PluginWarning)
            records = manager.check()
        problems = manager.problems
    else:
        records = manager.records
    if as_json:
        print_json([r.to_json() for r in records])
    else:
        table = Table(title="d5 plugins", title_justify="left")
        for column in ("name", "group", "distribution", "version", "status", "provides", "reason"):
            table.add_column(column, overflow="fold")
        for r in records:
            table.add_row(
                r.name,
                r.group,
                r.distribution,
                r.version,
                f"[{_STYLE[r.status]}]{r.status.value}[/]",
                ", ".join(r.hooks),
                r.error or "",
            )
        console().print(table)
        for problem in problems:
            console().print(f"{problem.kind}: {problem.message}")
    if check:
        _fail_on(records, problems)


def _fail_on(records: list[PluginRecord], problems: list[HookProblem]) -> None:
    """Raise :class:`CheckFailed` naming the broken plugins and every hook problem that
    the records do not already name (clashes, and failures of unlisted plugins)."""
    bad = [r for r in records if r.status in (Status.FAILED, Status.INCOMPATIBLE)]
    named = {f"{r.distribution}:{r.name}" for r in bad}
    what = [", ".join(sorted({f"{r.name} ({r.status.value})" for r in bad}))] if bad else []
    for problem in problems:
        if problem.kind == CLASH:
            what.append(f"{problem.hook} ({' and '.join(problem.plugins)} clash)")
        elif not set(problem.plugins) <= named:
            what.append(f"{problem.hook} ({', '.join(problem.plugins)} failed)")
    if what:
        raise CheckFailed(f"plugin check failed for: {'; '.join(what)}")
