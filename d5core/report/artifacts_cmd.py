"""``d5 results artifacts``: the files kept with a run (LoadGen's logs, ...), listed or
written out. They live in the results database (runs keep them with ``add_artifact``),
so they travel with the run; this is how a reader gets them back as files."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.errors import UsageError
from d5core.results.store import read_store

__all__ = ["artifacts"]


@click.command("artifacts")
@click.argument("run")
@click.argument("names", nargs=-1)
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write the files (all, or NAMES) under this folder, keeping their relative paths.",
)
@json_option
@db_option
def artifacts(
    run: str, names: tuple[str, ...], output: Path | None, as_json: bool, db: str | Path | None
) -> None:
    """List the files kept with RUN, or write them out with -o DIR.

    NAMES selects files by their names as listed; a file that does not exist in the
    folder is written, one that exists is left alone and named (nothing is replaced).
    """
    with read_store(db) as store:
        record = store.get_run(run)
        kept = store.artifact_names(record.id)
        wanted = list(dict.fromkeys(names)) or kept
        missing = [n for n in wanted if n not in kept]
        if missing:
            shown = ", ".join(kept) if kept else "none"
            raise UsageError(
                f"run {record.id} keeps no artifact {missing[0]!r} (it keeps: {shown})"
            )
        contents = {name: store.read_artifact(record.id, name) for name in wanted}
    written: list[str] = []
    skipped: list[str] = []
    if output is not None:
        for name, data in contents.items():
            target = output.joinpath(*name.split("/"))
            if target.exists():
                skipped.append(str(target))
                continue
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "xb") as handle:
                    handle.write(data)
            except OSError as exc:
                raise UsageError(
                    f"cannot write {target}: {exc.strerror or exc}; pass -o with a writable folder"
                ) from None
            written.append(str(target))
    if as_json:
        print_json(
            {
                "run_id": record.id,
                "artifacts": [{"name": n, "bytes": len(d)} for n, d in contents.items()],
                "written": written,
                "left_alone": skipped,
            }
        )
        return
    if not contents:
        console().print(f"run {record.id} keeps no artifacts")
        return
    for name, data in contents.items():
        console().print(f"{escape(name)}  {len(data):,} B", highlight=False)
    if output is not None:
        console().print(
            f"wrote {len(written)} file(s) under {escape(str(output))}", highlight=False
        )
    for path in skipped:
        console().print(f"[yellow]left alone (exists): {escape(path)}[/yellow]")
