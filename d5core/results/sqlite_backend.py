"""The SQLite backend of the results store: one file, the default.

The file uses WAL journaling, a busy timeout and ``BEGIN IMMEDIATE`` transactions
retried while another writer holds the lock, so concurrent writers wait instead of
failing with "database is locked". The schema version is ``PRAGMA user_version``; the
file is marked as a d5 database by ``PRAGMA application_id``.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from d5core.errors import UsageError, one_line
from d5core.results import schema
from d5core.results.backend import StoreBackend
from d5core.results.paths import DB_ENV_VAR, ensure_parent

__all__ = ["SqliteBackend"]

_T = TypeVar("_T")
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
_SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_FULL, _SQLITE_CANTOPEN = 8, 10, 13, 14
_SQLITE_NOTADB = 26


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _is_busy(exc: sqlite3.Error) -> bool:
    code = _primary_code(exc)
    if code is not None:
        return code in (_SQLITE_BUSY, _SQLITE_LOCKED)
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


def _is_readonly(exc: sqlite3.Error) -> bool:
    return "readonly" in str(exc).lower() or "read-only" in str(exc).lower()


def _is_full(exc: sqlite3.Error) -> bool:
    return _primary_code(exc) == _SQLITE_FULL or "disk is full" in str(exc).lower()


def _is_notadb(exc: sqlite3.Error) -> bool:
    code = _primary_code(exc)
    if code is not None:
        return code == _SQLITE_NOTADB
    return "not a database" in str(exc).lower()


def _free_space(path: Path) -> tuple[int | None, str]:
    """The free bytes of the filesystem holding ``path`` and the same in words, with the
    mount point (the nearest existing folder above ``path`` that is one)."""
    mount = path.absolute()
    while not (mount.exists() and os.path.ismount(mount)) and mount != mount.parent:
        mount = mount.parent
    try:
        free = shutil.disk_usage(mount).free
    except OSError:
        return None, f"free space unknown on the filesystem at {mount}"
    size, unit = float(free), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    shown = f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
    return free, f"{shown} free on the filesystem at {mount}"


def _write_failure(path: Path, exc: sqlite3.Error) -> UsageError | None:
    """A write to the database at ``path`` that failed for a reason outside d5 (a full
    disk, a read-only file, an I/O error), as the one-line :class:`UsageError` to raise;
    ``None`` for any other error."""
    code = _primary_code(exc)
    free, space = _free_space(path)
    if _is_full(exc) or (code == _SQLITE_IOERR and free == 0):
        return UsageError(
            f"the results database {path} cannot grow: it or its disk is full ({space}); "
            f"runs already stored are kept; free space there, or pass --db (or set "
            f"{DB_ENV_VAR}) to a file on another disk"
        )
    if code == _SQLITE_READONLY or _is_readonly(exc):
        return UsageError(
            f"the results database {path} is read-only ({one_line(exc)}); pass --db with a "
            f"writable file, or set {DB_ENV_VAR}"
        )
    if code in (_SQLITE_IOERR, _SQLITE_CANTOPEN):
        return UsageError(
            f"cannot use the results database {path} ({one_line(exc)}; {space}); "
            f"check that disk (full? failing?), or pass --db "
            f"(or set {DB_ENV_VAR}) to a file on another disk"
        )
    return None


class SqliteBackend(StoreBackend):
    """A results database in one SQLite file; open it with :meth:`open`."""

    name = "sqlite"
    tags_array = "(SELECT json_group_array(t.tag) FROM run_tags t WHERE t.run_id = r.id)"
    insertion_order = "r.rowid"

    def __init__(self, conn: sqlite3.Connection, path: Path, timeout_s: float) -> None:
        self._conn = conn
        self._path = path
        self._timeout_s = timeout_s

    @classmethod
    def open(cls, db: Path, *, create: bool, timeout_s: float) -> SqliteBackend:
        """Connect to the file ``db`` (creating it and its directories when ``create``).

        :raises UsageError: for a directory, a special file, a missing file when not
            ``create``, or a file SQLite cannot open.
        """
        if db.is_dir():
            raise UsageError(f"{db} is a directory, not a d5 results database; pass a file path")
        if db.exists() and not db.is_file():
            raise UsageError(
                f"{db} is a device or another special file, not a d5 results database; "
                f"pass --db (or set {DB_ENV_VAR}) with a file path"
            )
        if not db.exists():
            if not create:
                raise UsageError(
                    f"no results database at {db}; run a benchmark first, or pass "
                    f"--db PATH or set {DB_ENV_VAR} to the database to read"
                )
            ensure_parent(db)
        uri = db.absolute().as_uri() + ("?mode=rwc" if create else "?mode=rw")
        try:
            conn = sqlite3.connect(
                uri, uri=True, timeout=timeout_s, isolation_level=None, check_same_thread=True
            )
        except sqlite3.Error as exc:
            raise UsageError(f"cannot open the results database {db}: {exc}") from exc
        return cls(conn, db, timeout_s)

    @property
    def conn(self) -> sqlite3.Connection:
        return self._conn

    @property
    def location(self) -> str:
        return str(self._path)

    @property
    def path(self) -> Path:
        return self._path

    def close(self) -> None:
        self._conn.close()

    def is_transient(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError)

    # -- transactions ----------------------------------------------------------

    def _retrying(self, action: Callable[[], _T]) -> _T:
        """Run ``action`` again while SQLite reports the database busy, up to the timeout."""
        deadline = time.monotonic() + self._timeout_s
        delay = 0.005
        while True:
            try:
                return action()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise UsageError(
                        f"the results database {self._path} stayed locked by another "
                        f"process for {self._timeout_s:g} s; try again when it has finished"
                    ) from exc
                time.sleep(delay * (1.0 + random.random()))
                delay = min(delay * 2.0, 0.25)

    def write(self, body: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction and commit it.

        ``IMMEDIATE`` takes the write lock up front, so a transaction never has to
        upgrade a read lock (the case SQLite's busy handler cannot wait out). The whole
        transaction is retried while the database is busy; on any error it is rolled
        back and nothing of it is kept.
        """
        conn = self._conn

        def attempt() -> _T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = body(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result

        try:
            return self._retrying(attempt)
        except sqlite3.Error as exc:
            failure = _write_failure(self._path, exc)
            if failure is None:
                raise
            raise failure from exc

    def require_writable(self) -> None:
        conn = self._conn

        def probe() -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("UPDATE runs SET status = status WHERE 1 = 0")
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

        try:
            self._retrying(probe)
        except sqlite3.OperationalError as exc:
            raise UsageError(
                f"the results database {self._path} is not writable ({one_line(exc)}); "
                f"pass --db with a writable file, or set {DB_ENV_VAR}"
            ) from None

    # -- identity and migrations -------------------------------------------------

    def _identify(self) -> tuple[int, int, list[str]]:
        # One read transaction: the three reads see one state of the file. Read one by
        # one, another process creating the database could commit in between, and its
        # tables would be seen without its application id.
        conn = self._conn
        in_transaction = conn.in_transaction
        if not in_transaction:
            conn.execute("BEGIN")
        try:
            app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite_%' ORDER BY name"
                )
            ]
        finally:
            if not in_transaction and conn.in_transaction:
                conn.execute("COMMIT")
        return app_id, version, tables

    def _check(self, app_id: int, version: int, tables: list[str]) -> None:
        if app_id not in (0, schema.APPLICATION_ID) or (app_id == 0 and tables):
            shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
            what = f"tables {shown}" if tables else f"application id {app_id:#x}"
            raise UsageError(
                f"{self._path} is not a d5 results database: it is an SQLite database "
                f"of another program ({what}); pass --db with another path"
            )
        schema.check_version(version, str(self._path), schema.MIGRATIONS)

    def prepare(self) -> None:
        conn = self._conn
        try:
            app_id, version, tables = self._retrying(self._identify)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and not _is_notadb(exc):
                failure = _write_failure(self._path, exc)
                if failure is not None:
                    raise failure from exc
                raise UsageError(f"cannot read the results database {self._path}: {exc}") from exc
            raise UsageError(f"{self._path} is not a d5 results database: {exc}") from exc
        self._check(app_id, version, tables)

        conn.execute(f"PRAGMA busy_timeout = {int(self._timeout_s * 1000)}")
        # FULL: a committed run survives a power cut too, not only a killed process.
        conn.execute("PRAGMA synchronous = FULL")
        try:
            self._retrying(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
        except sqlite3.OperationalError as exc:
            if not _is_readonly(exc):
                failure = _write_failure(self._path, exc)
                if failure is not None:
                    raise failure from exc
                raise UsageError(f"cannot use the results database {self._path}: {exc}") from exc

        if version < schema.latest_version(schema.MIGRATIONS):

            def upgrade(c: sqlite3.Connection) -> None:
                # Another process may have created or upgraded it since we looked.
                now = self._identify()
                self._check(*now)
                schema.apply_migrations(c, schema.pending_migrations(now[1], schema.MIGRATIONS))

            try:
                self.write(upgrade)
            except sqlite3.OperationalError as exc:
                raise UsageError(
                    f"cannot create or upgrade the results database {self._path}: {exc}"
                ) from exc
        # Only now: a migration that rebuilds a table must not cascade deletions.
        conn.execute("PRAGMA foreign_keys = ON")
