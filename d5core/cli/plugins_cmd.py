"""``d5 list-plugins``: what is installed, and whether it works."""

from __future__ import annotations

import click
from rich.table import Table

from d5core.cli.output import console, print_json
from d5core.errors import CheckFailed
from d5core.plugins import Status, get_plugin_manager

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
    help="Also import every component and run each plugin's self-check; "
    "exit 1 if any plugin is failed or incompatible.",
)
def list_plugins(as_json: bool, check: bool) -> None:
    """List installed plugins with their status.

    Listing reads installed metadata and imports only each plugin's light plugin module,
    never a framework. Exit 0 even when a plugin is broken, unless --check is given.
    """
    manager = get_plugin_manager()
    records = manager.check() if check else manager.records
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
    bad = [r for r in records if r.status in (Status.FAILED, Status.INCOMPATIBLE)]
    if check and bad:
        names = ", ".join(sorted({f"{r.name} ({r.status.value})" for r in bad}))
        raise CheckFailed(f"plugin check failed for: {names}")
