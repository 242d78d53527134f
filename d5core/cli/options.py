"""Options shared by several commands, so they read and behave the same everywhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

import click

from d5core.results.paths import DB_ENV_VAR

__all__ = ["db_option", "json_option"]

_F = TypeVar("_F", bound=Callable[..., Any])


def db_option(fn: _F) -> _F:
    """``--db PATH|URL``: the results store, passed to the command as ``db`` (a string).

    ``None`` when not given; :func:`d5core.results.paths.resolve_db_path` then applies
    ``D5_DB`` and the per-user default. A string, not a path: a ``postgresql://`` URL
    must reach the store as typed (a path would fold its ``//``).
    """
    option = click.option(
        "--db",
        "db",
        type=str,
        default=None,
        metavar="PATH|URL",
        help=f"Results store: an SQLite file, or postgresql://USER@HOST:PORT/DBNAME "
        f"(default: ${DB_ENV_VAR}, else $XDG_DATA_HOME/d5/results.sqlite or "
        "~/.local/share/d5/results.sqlite).",
    )
    return option(fn)


@overload
def json_option(fn: _F) -> _F: ...


@overload
def json_option(*, help: str = ...) -> Callable[[_F], _F]: ...


def json_option(
    fn: _F | None = None, *, help: str = "Print JSON instead of a table."
) -> _F | Callable[[_F], _F]:
    """``--json``: print JSON instead of tables, passed to the command as ``as_json``.

    Use it bare (``@json_option``) or with its own help (``@json_option(help=...)``).
    """
    option = click.option("--json", "as_json", is_flag=True, help=help)
    if fn is None:
        return option
    return option(fn)

