"""Hooks of d5-plugin-loadavg: the load average in the environment, and ``d5 loadavg``."""

from __future__ import annotations

import json
import os

import click

from d5core.api import hookimpl

d5_plugin_api = ">=1.1,<2"

#: Load per core above which measurements are likely disturbed by other work.
BUSY_PER_CORE = 0.5


def load_report() -> dict[str, object]:
    """The 1-, 5- and 15-minute load averages, per core, and a verdict."""
    one, five, fifteen = os.getloadavg()
    cores = os.cpu_count() or 1
    return {
        "load": [one, five, fifteen],
        "cores": cores,
        "load_per_core_1min": one / cores,
        "quiet": one / cores <= BUSY_PER_CORE,
    }


@hookimpl
def d5_environment_info() -> dict[str, object]:
    return load_report()


@click.command("loadavg")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def loadavg(as_json: bool) -> None:
    """Tell whether the machine is quiet enough to benchmark on."""
    report = load_report()
    if as_json:
        click.echo(json.dumps(report))
        return
    verdict = "quiet" if report["quiet"] else "busy: expect noisy measurements"
    click.echo(f"load {report['load_per_core_1min']:.2f} per core over 1 min: {verdict}")


@hookimpl
def d5_cli_commands() -> list[click.Command]:
    return [loadavg]
