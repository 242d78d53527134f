"""The team store's internal plugin: PostgreSQL URLs for the results store, and
``d5 results merge`` and ``d5 results import``."""

from __future__ import annotations

from typing import Any

from d5core.hookspecs import hookimpl

__all__ = ["d5_cli_commands", "d5_results_backend"]


@hookimpl
def d5_results_backend(url: str, create: bool, timeout_s: float) -> Any:
    from urllib.parse import urlsplit

    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        return None
    if scheme not in ("postgresql", "postgres"):
        return None
    from d5core.teamstore.postgres_backend import PostgresBackend

    return PostgresBackend.open(url, create=create, timeout_s=timeout_s)


@hookimpl
def d5_cli_commands() -> list[Any]:
    from d5core.cli.lazy import LazyCommand, LazyGroup

    results = LazyGroup("results", help="List, show, export, compare and score stored runs.")
    for name, attribute, text in (
        ("merge", "merge_runs", "Copy the finished runs of the stores SRC... into the store DEST."),
        ("import", "import_runs", "Import the runs of JSON Lines files into the store."),
    ):
        results.add_command(LazyCommand(name, f"d5core.teamstore.merge_cmd:{attribute}", text))
    return [results]
