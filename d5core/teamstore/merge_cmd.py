"""``d5 results merge`` and ``d5 results import``: copy runs into one results store.

``merge`` copies the finished runs of other stores (SQLite files from cluster jobs, a
PostgreSQL URL); ``import`` reads the JSON Lines files ``d5 results export --format
jsonl`` wrote. Both print, per source, how many runs were copied, already there, in
conflict (left out) or skipped because they are still running; the work itself is
:mod:`d5core.teamstore.transfer`.

Exit codes: 0 when every run was copied or already there, 1 when conflicting runs were
left out (the others are copied), 2 for bad input (nothing is written then).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

import click
from rich.table import Table

from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.errors import CheckFailed
from d5core.teamstore.transfer import MergeReport, import_jsonl, merge_stores

__all__ = ["import_runs", "merge_runs"]

_COLUMNS = ("copied", "already there", "conflicts", "skipped (running)")
_KEYS = ("copied", "already_there", "conflicts", "skipped_running")


def _print_report(report: MergeReport, verb: str) -> None:
    out = console()
    done = {"merge": "merged", "import": "imported"}[verb]
    table = Table(title=f"runs {done} into {report.destination}", title_justify="left")
    table.add_column("source", overflow="fold")
    for column in _COLUMNS:
        table.add_column(column, justify="right")
    for source in report.sources:
        counts = source.counts()
        table.add_row(source.source, *(str(counts[k]) for k in _KEYS))
    if len(report.sources) > 1:
        totals = report.totals()
        table.add_row("total", *(str(totals[k]) for k in _KEYS), style="bold")
    out.print(table)
    for source in report.sources:
        for conflict in source.conflicts:
            out.print(
                f"conflict: run {conflict.run_id} of {source.source} differs from the one in "
                f"{report.destination} ({', '.join(conflict.differences)}); left out",
                markup=False,
                highlight=False,
            )
        for run_id in source.running:
            out.print(
                f"skipped: run {run_id} of {source.source} is still running; "
                f"{verb} again once it has finished",
                markup=False,
                highlight=False,
            )


def _finish(report: MergeReport, as_json: bool, verb: str) -> None:
    """Print ``report``; exit 1 (naming them) when conflicting runs were left out."""
    if as_json:
        print_json(report.to_json())
    else:
        _print_report(report, verb)
    conflicts = report.conflicts()
    if conflicts:
        ids = ", ".join(c.run_id for _, c in conflicts[:10]) + (
            ", ..." if len(conflicts) > 10 else ""
        )
        totals = report.totals()
        raise CheckFailed(
            f"{len(conflicts)} run(s) conflict with runs of the same id in "
            f"{report.destination} and were left out: {ids} (of the others, "
            f"{totals['copied']} copied, {totals['already_there']} already there)"
        )


@click.command("merge")
@click.argument("sources", nargs=-1, required=True, metavar="SRC...")
@click.option(
    "--into",
    "dest",
    required=True,
    metavar="DEST",
    help="The store to copy into: an SQLite file (created when missing) or a "
    "postgresql://user@host:port/dbname URL.",
)
@json_option
def merge_runs(sources: tuple[str, ...], dest: str, as_json: bool) -> None:
    """Copy the finished runs of the stores SRC... into the store DEST.

    SRC and DEST are SQLite files or postgresql://user@host:port/dbname URLs. A run is
    identified by its run id and its environment fingerprint. A run DEST lacks is copied
    whole (samples, environment, tags, artifacts); one DEST holds with the same content
    is left as it is, so merging twice changes nothing; one DEST holds with different
    content is a conflict: named with the keys that differ and left out, while the
    other runs are copied. Runs still running are skipped.

    Exit codes: 0 when nothing conflicted; 1 when conflicting runs were left out; 2 for
    bad input (a missing source, a file that is not a d5 store, DEST among the
    sources), in which case nothing is written.
    """
    _finish(merge_stores(sources, dest), as_json, "merge")


@click.command("import")
@click.argument(
    "files",
    nargs=-1,
    required=True,
    metavar="FILE...",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
)
@json_option
@db_option
def import_runs(files: tuple[Path, ...], as_json: bool, db: Path | str | None) -> None:
    """Import the runs of JSON Lines files into the store.

    The store is --db's (else $D5_DB's, else the per-user one), created when missing.
    FILE is what 'd5 results export --format jsonl' wrote ('-': standard input). Every
    file is checked to its end first: a malformed line is named (file and line) and
    nothing is imported. Each run is then imported whole in one transaction, and counted
    as with 'd5 results merge': copied, already there, a conflict (left out) or skipped
    (still running).

    Exit codes: 0 when nothing conflicted; 1 when conflicting runs were left out; 2 for
    bad input, in which case nothing is written.
    """
    sources: list[Path | TextIO] = [sys.stdin if str(f) == "-" else f for f in files]
    _finish(import_jsonl(sources, db), as_json, "import")
