"""``d5 op``: C++ custom operators, compiled at run time into every installed framework."""

from __future__ import annotations

from pathlib import Path

import click

from d5core.cli._parse import parse_list
from d5core.cli.options import json_option
from d5core.cli.output import print_json

__all__ = ["op"]


@click.group("op")
def op() -> None:
    """Build C++ custom operators (one .cpp against d5's header d5_op.h) for every
    installed framework; validate and benchmark them with --custom."""


@op.command("build")
@click.argument("source", type=click.Path(path_type=Path))
@click.option(
    "--frameworks",
    default=None,
    help="Comma-separated frameworks to build for (default: every installed one).",
)
@click.option(
    "--cache",
    "cache",
    type=click.Path(path_type=Path),
    default=None,
    help="Build cache folder (default: $D5_OP_CACHE, else ~/.cache/d5/ops).",
)
@json_option
def build_op(source: Path, frameworks: str | None, cache: Path | None, as_json: bool) -> None:
    """Compile SOURCE for each framework, or take each build from the cache.

    A build is cached under a hash of the source, d5_op.h, the compiler and the
    framework's version; a cached build runs no compiler. Each new build is loaded
    once in a child process before it is cached: one that does not load (an undefined
    symbol, a crashing static initializer) is reported as not built. A framework that
    is not installed is skipped with a note; an unknown framework name exits 2. A
    compile error shows the compiler's first error lines and exits 2, caching nothing;
    so does a build ready for no framework. The cache, like ssh's keys, must be yours
    and writable by no one else.
    """
    from d5core.errors import UsageError
    from d5core.lv0.customop import FrameworkBuild, build

    names = None if frameworks is None else parse_list(frameworks, "frameworks")

    def note(line: str) -> None:
        if not as_json:
            click.echo(f"d5: {line}", err=True)

    def built(b: FrameworkBuild) -> None:
        if as_json:
            return
        seconds = f"built in {b.build_seconds:.1f} s"
        click.echo(f"{b.framework}: {f'cached ({seconds})' if b.cached else seconds}: {b.artifact}")

    result = build(source, names, cache=cache, on_note=note, on_built=built)
    if not result.builds:
        why = "; ".join(result.notes) if as_json else "see the notes above"
        raise UsageError(f"{result.spec.name} is ready for no framework ({why})")
    if as_json:
        print_json(result.to_json())
        return
    count = len(result.builds)
    click.echo(
        f"{result.spec.name}: {count} framework{'s' if count != 1 else ''} ready in "
        f"{result.seconds:.2f} s"
    )
