"""The environment legend that every ``d5 results table`` prints under its table when
its values come from more than one environment."""

from __future__ import annotations

import click
from rich.markup import escape

from d5core.cli.output import console
from d5core.results.environments import EnvironmentLegend

__all__ = ["print_legend"]


def print_legend(legend: EnvironmentLegend, *, facts: bool = True) -> None:
    """Each environment's facts (unless ``facts`` is false: JSON output holds them);
    with more than one environment, a warning on standard error naming what differs."""
    for tag, found in legend.facts.items() if facts else ():
        shown = ", ".join(f"{k} {v}" for k, v in found.items() if k != "interpreter")
        where = found.get("interpreter", "")
        console().print(escape(f"{tag}: {shown}" + (f" ({where})" if where else "")))
    warning = legend.warning()
    if warning:
        click.echo(f"d5: warning: {warning}", err=True)
