"""Where the results database lives when nobody says.

One database per user collects every run, so that runs made from different
virtualenvs (frameworks with conflicting pins) meet in one place. The database is, in
order: an explicit ``--db PATH``, the ``D5_DB`` environment variable, then
``$XDG_DATA_HOME/d5/results.sqlite``, falling back to ``~/.local/share/d5/results.sqlite``.

``--db`` and ``D5_DB`` may also name a database by URL, such as a PostgreSQL database
shared by a team (``postgresql://user@host:port/dbname``): a plugin opens it
(the ``d5_results_backend`` hook; d5's own :mod:`d5core.teamstore` opens PostgreSQL).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from d5core.errors import UsageError

__all__ = [
    "DB_ENV_VAR",
    "DB_FILENAME",
    "absolute_db",
    "default_db_path",
    "ensure_parent",
    "is_db_url",
    "redact_url",
    "resolve_db",
    "resolve_db_path",
]

#: The environment variable naming the results database.
DB_ENV_VAR = "D5_DB"
#: The file name of the default database inside the d5 data directory.
DB_FILENAME = "results.sqlite"

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: A URL that went through pathlib, which folds "//" into "/" (two letters at least, so
#: that a drive letter is never taken for a scheme).
_MANGLED_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/(?!/)")


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


def is_db_url(db: str | os.PathLike[str]) -> bool:
    """Whether ``db`` is a URL (``scheme://...``) rather than a file path."""
    return isinstance(db, str) and _URL.match(db) is not None


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***``: what messages may show."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def resolve_db(
    db: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> Path | str:
    """The database to use, as :func:`resolve_db_path` finds it: a file path, or a
    database URL (``scheme://...``) returned unchanged as a string, for the plugin that
    opens it to check."""
    env = os.environ if environ is None else environ
    given = db if db is not None and str(db) != "" else env.get(DB_ENV_VAR, "")
    if isinstance(given, os.PathLike):
        # A URL that went through pathlib lost one slash of its "//":
        # Path("postgresql://u@h/db") is "postgresql:/u@h/db": give the URL back.
        text = os.fspath(given)
        mangled = _MANGLED_URL.match(text)
        if mangled:
            given = f"{mangled.group(1)}://{text[mangled.end() :]}"
    if isinstance(given, str) and is_db_url(given):
        return given
    return resolve_db_path(db, environ=env)


def absolute_db(
    db: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> Path | str:
    """The database as :func:`resolve_db` finds it, to hand to child processes (ranks,
    trials) that may run in another folder: a file path made absolute, a URL unchanged."""
    target = resolve_db(db, environ=environ)
    return target if isinstance(target, str) else target.absolute()


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
