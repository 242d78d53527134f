"""Where the results database lives when nobody says.

One database per user collects every run, so that runs made from different
virtualenvs (frameworks with conflicting pins) meet in one place. The path is, in
order: an explicit ``--db PATH``, the ``D5_DB`` environment variable, then
``$XDG_DATA_HOME/d5/results.sqlite``, falling back to ``~/.local/share/d5/results.sqlite``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from d5core.errors import UsageError

__all__ = ["DB_ENV_VAR", "DB_FILENAME", "default_db_path", "ensure_parent", "resolve_db_path"]

#: The environment variable naming the results database.
DB_ENV_VAR = "D5_DB"
#: The file name of the default database inside the d5 data directory.
DB_FILENAME = "results.sqlite"


def default_db_path(environ: Mapping[str, str] | None = None) -> Path:
    """The per-user database path, following the XDG base directory specification.

    ``$XDG_DATA_HOME`` is used only when it is an absolute path, as the specification
    asks; otherwise ``~/.local/share`` is.
    """
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_DATA_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "share"
    return base / "d5" / DB_FILENAME


def resolve_db_path(
    db: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> Path:
    """The database to use: ``db`` if given, else ``$D5_DB``, else :func:`default_db_path`.

    ``~`` is expanded; the path is returned as given otherwise (not resolved), so that
    messages show what the user typed.
    """
    env = os.environ if environ is None else environ
    if db is not None and str(db) != "":
        return Path(db).expanduser()
    from_env = env.get(DB_ENV_VAR, "")
    if from_env:
        return Path(from_env).expanduser()
    return default_db_path(env)


def ensure_parent(path: Path) -> None:
    """Create the directories above ``path``.

    :raises UsageError: when they cannot be created (a file in the way, no permission).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"cannot create the directory {str(path.parent)!r} for the results database: "
            f"{exc.strerror or exc}; pass --db PATH or set {DB_ENV_VAR}"
        ) from exc
