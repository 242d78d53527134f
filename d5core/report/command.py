"""``d5 report``: stored runs drawn as one self-contained HTML page, with PNG and PDF
copies of every figure in a folder beside it (``docs/report.md``).

The command parses and prints; selecting runs is :mod:`d5core.report.selection`,
drawing and saving :mod:`d5core.report.build`, the page :mod:`d5core.report.html`.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import click

from d5core.cli._parse import parse_list
from d5core.cli.options import db_option, json_option
from d5core.cli.output import print_json
from d5core.errors import UsageError

__all__ = ["DEFAULT_OUTPUT", "check_output", "report"]

#: Where the page goes when ``-o`` is not given (in the current directory).
DEFAULT_OUTPUT = Path("d5-report.html")


def check_output(path: Path) -> Path:
    """``path`` if a report can be written there: an ``.html`` file in a folder that exists.

    :raises UsageError: naming the path and what to change.
    """
    if path.is_dir():
        raise UsageError(f"report output {str(path)!r} is a directory; pass -o DIR/NAME.html")
    if path.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"report output {str(path)!r} must be an .html file; pass -o NAME.html")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(
            f"the folder {str(folder)!r} of report output {str(path)!r} does not exist; "
            "create it or pass -o with a folder that exists"
        )
    return path


def _formats(value: str) -> tuple[str, ...]:
    from d5core.report.writer import FILE_FORMATS

    if value.strip().lower() == "none":
        return ()
    names = tuple(parse_list(value.lower(), "--formats"))
    unknown = [n for n in names if n not in FILE_FORMATS]
    if unknown:
        raise UsageError(
            f"--formats {unknown[0]!r} is not a figure format; use png, pdf, png,pdf "
            "or none (the SVG is always in the page)"
        )
    return names


@click.command("report")
@click.argument("run_ids", nargs=-1, metavar="[RUN_ID]...")
@click.option(
    "--last",
    type=int,
    default=None,
    metavar="N",
    help="The N newest runs (with the other filters).",
)
@click.option(
    "--kind",
    default=None,
    metavar="KIND",
    help="Only runs of this kind: op, net, train (single-process training), dist "
    "(distributed training and communication), inference (LoadGen scenarios) or "
    "algorithms (the trials of d5 bench algorithms).",
)
@click.option("--tag", default=None, metavar="NAME", help="Only runs tagged NAME.")
@click.option(
    "--figure",
    "figure_names",
    multiple=True,
    metavar="NAME",
    help="Only this figure family, a key prefix such as op-roofline or net-breakdown "
    "(repeat for several).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    metavar="PATH.html",
    help=f"The page to write (default: ./{DEFAULT_OUTPUT}); the figures' copies go to "
    "PATH_figures/ beside it.",
)
@click.option(
    "--formats",
    default="png,pdf",
    show_default=True,
    metavar="LIST",
    help="Copies of each figure to write beside the page: png, pdf, png,pdf or none.",
)
@json_option(help="Print the report's figures and problems as JSON.")
@db_option
def report(
    run_ids: tuple[str, ...],
    last: int | None,
    kind: str | None,
    tag: str | None,
    figure_names: tuple[str, ...],
    output: Path | None,
    formats: str,
    as_json: bool,
    db: str | Path | None,
) -> None:
    """Write an HTML report of stored runs, with PNG and PDF copies of its figures.

    Select runs by id (RUN_ID..., unique prefixes do), or with filters that combine:
    --last N, --kind op|net|train|dist|inference|algorithms, --tag NAME. With neither, the 20
    newest runs.
    """
    from d5core.report.build import build_report, collector_paused
    from d5core.report.html import render_html
    from d5core.report.selection import describe_selection, select_runs
    from d5core.report.writer import write_text_atomically
    from d5core.results.store import read_store

    started = time.perf_counter()
    page = check_output(output if output is not None else DEFAULT_OUTPUT)
    wanted = _formats(formats)
    timings: dict[str, float] = {}
    with read_store(db) as store:
        runs = select_runs(store, run_ids, last=last, kind=kind, tag=tag)
        try:
            document = build_report(
                store,
                runs,
                output=page,
                selection=describe_selection(run_ids, last, kind, tag),
                figures=figure_names,
                formats=wanted,
                timings=timings,
            )
        except OSError as exc:
            raise _unwritable(page, exc) from exc
    html_started = time.perf_counter()
    try:
        with collector_paused():
            text = render_html(document)
        write_text_atomically(page, text)
    except OSError as exc:
        raise _unwritable(page, exc) from exc
    timings["html"] = time.perf_counter() - html_started
    timings["total"] = time.perf_counter() - started
    path = page.resolve()
    if as_json:
        print_json(_json(document, path, timings))
        return
    _print(document, path)


def _unwritable(page: Path, exc: OSError) -> UsageError:
    where = exc.filename or page
    return UsageError(
        f"cannot write the report to {str(where)!r}: {exc.strerror or exc}; "
        "pass -o with a folder you can write to"
    )


def _json(document: Any, path: Path, timings: dict[str, float]) -> dict[str, Any]:
    return {
        "path": str(path),
        "figures": [
            {
                "key": f.figure.key,
                "title": f.figure.title,
                "section": f.figure.section,
                "plugin": f.plugin,
                "files": {fmt: str(path.parent / rel) for fmt, rel in f.files.items()},
            }
            for f in document.figures
        ],
        "runs": [{"run_id": r.id, "kind": r.kind, "name": r.name} for r in document.runs],
        "problems": list(document.problems),
        "seconds": {k: round(v, 4) for k, v in timings.items()},
    }


def _print(document: Any, path: Path) -> None:
    runs = len(document.runs)
    click.echo(f"d5: report of {runs} run{'s' if runs != 1 else ''} written to {path}")
    sections = Counter(f.figure.section for f in document.figures)
    if sections:
        from d5core.report.writer import figures_folder

        for section, n in sections.items():
            click.echo(f"  {section}: {n} figure{'s' if n != 1 else ''}")
        if any(f.files for f in document.figures):
            click.echo(f"  figure files: {figures_folder(path)}")
    else:
        click.echo("  no figures: nothing in these runs is drawn (see the page for the runs)")
    for problem in document.problems:
        click.echo(f"d5: warning: {problem}", err=True)
