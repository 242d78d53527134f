"""The PostgreSQL backend of the results store: one database shared by a team or a cluster.

Open it with a URL ``postgresql://user@host:port/dbname`` as ``--db`` or ``D5_DB``. It
needs psycopg 3, an optional dependency (``pip install 'd5core[postgres]'``), imported
only when such a URL is opened.

Transactions: each write is ``BEGIN ... COMMIT`` at PostgreSQL's default isolation
(read committed), retried whole when the server reports a serialization failure or a
deadlock; reads that must see one state of the database use repeatable read.

Killed writers: while a run is running, its process holds a session-level advisory lock
keyed by the run id on a connection of its own, kept for the life of the process and
released when the run is finished. The server releases it when the process dies (its
connection closes), so a reader on any host that can take the lock knows the writer is
gone and the run is ``incomplete``.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import SplitResult, urlsplit

from d5core.errors import UsageError, one_line
from d5core.results import schema
from d5core.results.backend import StoreBackend
from d5core.results.paths import DB_ENV_VAR, redact_url
from d5core.teamstore import postgres_schema

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "INSTALL_HINT",
    "POSTGRES_SCHEMES",
    "POSTGRES_URL_FORM",
    "PostgresBackend",
    "PostgresConnection",
    "check_postgres_url",
    "run_lock_key",
]

_T = TypeVar("_T")

#: What to install for PostgreSQL URLs to work.
INSTALL_HINT = "pip install 'd5core[postgres]'"
#: How long to wait for the server to answer a new connection, in seconds.
CONNECT_TIMEOUT_S = 10
#: The advisory lock (two-key form) of the migrating transaction.
_MIGRATION_LOCK = (schema.APPLICATION_ID, 0)
#: The URL schemes this backend opens.
POSTGRES_SCHEMES = ("postgresql", "postgres")
#: The form of a PostgreSQL database URL, as messages show it.
POSTGRES_URL_FORM = "postgresql://user@host:port/dbname"
#: SQLSTATEs retried by :meth:`PostgresBackend.write`: serialization failure, deadlock.
_RETRIED = ("40001", "40P01")


def check_postgres_url(url: str) -> SplitResult:
    """The parts of a PostgreSQL URL ``postgresql://user@host:port/dbname``.

    :raises UsageError: naming what is wrong and the form expected, for another scheme,
        a missing host or database name, or a port that is not a number.
    """
    shown = redact_url(url)
    expected = f"expected {POSTGRES_URL_FORM} (or a file path)"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"bad database URL {shown!r}: {exc}; {expected}") from None
    if parts.scheme.lower() not in POSTGRES_SCHEMES:
        raise UsageError(
            f"unsupported database URL {shown!r}: d5 stores results in SQLite files and "
            f"PostgreSQL databases, not {parts.scheme!r}; {expected}"
        )
    if not parts.hostname:
        raise UsageError(f"database URL {shown!r} names no host; {expected}")
    dbname = parts.path.lstrip("/")
    if not dbname or "/" in dbname:
        raise UsageError(f"database URL {shown!r} names no database; {expected}")
    if port is not None and port == 0:
        raise UsageError(f"database URL {shown!r} has port 0; {expected}")
    return parts


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise UsageError(f"PostgreSQL results databases need psycopg 3: {INSTALL_HINT}") from None
    return psycopg


@lru_cache(maxsize=512)
def _placeholders(sql: str) -> str:
    """``sql`` with ``?`` placeholders written as psycopg's ``%s``."""
    return sql.replace("%", "%%").replace("?", "%s")


def run_lock_key(run_id: str) -> int:
    """The advisory lock key (a signed 64-bit integer) of the process writing ``run_id``."""
    digest = hashlib.sha256(b"d5-run:" + run_id.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresConnection:
    """A psycopg connection (autocommit; transactions are explicit ``BEGIN``) that
    takes the store's ``?`` placeholders, as :class:`sqlite3.Connection` does."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.raw = conn

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        return bool(self.raw.info.transaction_status != TransactionStatus.IDLE)

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Any:
        if parameters:
            return self.raw.execute(_placeholders(sql), tuple(parameters))
        return self.raw.execute(sql)

    def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]], /) -> Any:
        rows = [tuple(p) for p in seq_of_parameters]
        cur = self.raw.cursor()
        if rows:
            cur.executemany(_placeholders(sql), rows)
        return cur

    def close(self) -> None:
        self.raw.close()


def _connect_failure(url: str, exc: BaseException) -> UsageError:
    """A failed connection as the one-line error to show, by what libpq said."""
    shown = redact_url(url)
    text = one_line(exc)
    low = text.lower()
    parts = check_postgres_url(url)
    where = f"{parts.hostname}:{parts.port or 5432}"
    if "password authentication failed" in low or "authentication failed" in low:
        what = f"authentication failed for user {parts.username or '(default)'!r}"
        return UsageError(
            f"cannot open the results database {shown}: {what}; check the user and password "
            "(or ~/.pgpass, PGPASSWORD)"
        )
    if "role" in low and "does not exist" in low:
        return UsageError(
            f"cannot open the results database {shown}: the server at {where} has no user "
            f"{parts.username or '(default)'!r}; pass a URL with an existing user"
        )
    if "no pg_hba.conf entry" in low:
        return UsageError(
            f"cannot open the results database {shown}: the server at {where} does not let "
            "this user connect from here (pg_hba.conf)"
        )
    if "database" in low and "does not exist" in low:
        dbname = parts.path.lstrip("/")
        return UsageError(
            f"cannot open the results database {shown}: the server at {where} has no "
            f"database {dbname!r}; create it (createdb {dbname}) or name another"
        )
    reasons = {
        "connection refused": "connection refused",
        "could not translate host name": "unknown host",
        "failed to resolve host": "unknown host",
        "name or service not known": "unknown host",
        "timeout expired": "no answer in time",
        "no route to host": "no route to host",
        "network is unreachable": "network is unreachable",
        "could not connect": "cannot connect",
        "connection failed": "connection failed",
    }
    for phrase, reason in reasons.items():
        if phrase in low:
            return UsageError(
                f"the PostgreSQL server at {where} is not reachable ({reason}); start it, "
                f"or pass --db (or set {DB_ENV_VAR}) with another database"
            )
    return UsageError(f"cannot open the results database {shown}: {text[:240]}")


def _connect(url: str, *, application: str = "d5") -> psycopg.Connection[Any]:
    psycopg = _psycopg()
    check_postgres_url(url)
    try:
        return psycopg.connect(  # type: ignore[no-any-return]
            url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            application_name=application,
        )
    except psycopg.Error as exc:
        raise _connect_failure(url, exc) from None


class _RunLocks:
    """This process's connections (one per database: advisory locks belong to one)
    holding the advisory locks of the runs it writes; a connection is closed when it
    holds no lock any more."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._pid = os.getpid()
        self._conns: dict[str, Any] = {}
        self._held: dict[str, set[str]] = {}
        #: Connections inherited from a parent process: kept, never used or closed (a
        #: close would end the parent's session and release its locks).
        self._inherited: list[Any] = []

    def _own(self) -> None:
        if self._pid != os.getpid():
            self._inherited.extend(self._conns.values())
            self._conns, self._held, self._pid = {}, {}, os.getpid()

    def hold(self, url: str, run_id: str, wait_s: float = 1.0) -> bool:
        """Take ``run_id``'s lock; ``False`` when it stays held elsewhere for ``wait_s``."""
        key = run_lock_key(run_id)
        deadline = time.monotonic() + wait_s
        with self._mutex:
            self._own()
            if run_id in self._held.get(url, ()):
                return False  # this process already writes a run of this id
            conn: Any = self._conns.get(url)
            if conn is None or conn.closed:
                conn = self._conns[url] = _connect(url, application="d5 run locks")
            while True:
                (taken,) = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
                if taken:
                    self._held.setdefault(url, set()).add(run_id)
                    return True
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            if not self._held.get(url):
                self._conns.pop(url).close()
            return False

    def release(self, url: str, run_id: str) -> None:
        """Drop ``run_id``'s lock if this process holds it."""
        with self._mutex:
            self._own()
            held = self._held.get(url, set())
            conn = self._conns.get(url)
            if run_id not in held or conn is None:
                return
            held.discard(run_id)
            if held:
                conn.execute("SELECT pg_advisory_unlock(%s)", (run_lock_key(run_id),))
            else:
                del self._held[url]
                self._conns.pop(url).close()  # ends the session: its locks go with it

    def close_all(self) -> None:
        """Close this process's lock connections (at exit: the locks would go anyway)."""
        with self._mutex:
            if self._pid == os.getpid():
                for conn in self._conns.values():
                    conn.close()
                self._conns, self._held = {}, {}


_RUN_LOCKS = _RunLocks()
atexit.register(_RUN_LOCKS.close_all)


class PostgresBackend(StoreBackend):
    """A results database in PostgreSQL; open it with :meth:`open`."""

    name = "postgresql"
    begin_read = "BEGIN ISOLATION LEVEL REPEATABLE READ"
    tags_array = "(SELECT json_agg(t.tag)::text FROM run_tags t WHERE t.run_id = r.id)"
    insertion_order = "r.id"

    def __init__(
        self, conn: PostgresConnection, url: str, timeout_s: float, *, create: bool = True
    ) -> None:
        self._conn = conn
        self._url = url
        self._timeout_s = timeout_s
        self._create = create

    @classmethod
    def open(cls, url: str, *, create: bool = True, timeout_s: float) -> PostgresBackend:
        """Connect to the database at ``url``; with ``create`` an empty database gets
        the schema, without it an empty database is an error (as a missing file is).

        :raises UsageError: for a malformed URL, psycopg missing, an unreachable
            server, failed authentication or a missing database, in one line.
        """
        return cls(PostgresConnection(_connect(url)), url, timeout_s, create=create)

    @property
    def conn(self) -> PostgresConnection:
        return self._conn

    @property
    def location(self) -> str:
        return redact_url(self._url)

    def close(self) -> None:
        self._conn.close()

    def is_transient(self, exc: BaseException) -> bool:
        psycopg = _psycopg()
        return isinstance(exc, psycopg.Error)

    def insert_samples(
        self,
        conn: Any,
        measurement_id: int,
        start: int,
        values: Sequence[float | None],
        processes: Sequence[int | None],
    ) -> None:
        """One statement for all the samples (arrays unnested by the server), about ten
        times faster than a row each."""
        if len(values) != len(processes):
            raise ValueError("one process per sample")
        if not values:
            return
        conn.execute(
            "INSERT INTO samples (measurement_id, idx, value, process) "
            "SELECT ?, ? + o.n - 1, o.v, o.p "
            "FROM unnest(CAST(? AS DOUBLE PRECISION[]), CAST(? AS INTEGER[])) "
            "WITH ORDINALITY AS o (v, p, n)",
            (measurement_id, start, list(values), list(processes)),
        )

    # -- transactions ----------------------------------------------------------

    def _failure(self, exc: BaseException) -> UsageError | None:
        psycopg = _psycopg()
        state = getattr(exc, "sqlstate", None) or ""
        if state == "53100":
            return UsageError(
                f"the results database {self.location} cannot grow: its server's disk is "
                f"full ({one_line(exc)}); runs already stored are kept"
            )
        if state in ("42501", "25006"):
            return UsageError(
                f"the results database {self.location} is read-only for this user "
                f"({one_line(exc)}); pass --db with a database you may write, or set "
                f"{DB_ENV_VAR}"
            )
        if isinstance(exc, psycopg.OperationalError) and not state:
            return UsageError(
                f"lost the connection to the results database {self.location} "
                f"({one_line(exc)[:160]}); the write in progress is not stored"
            )
        return None

    def write(self, body: Callable[[Any], _T]) -> _T:
        """Run ``body`` in one ``BEGIN ... COMMIT`` and retry it whole on a
        serialization failure or a deadlock, up to the timeout; on any error it is
        rolled back and nothing of it is kept."""
        psycopg = _psycopg()
        conn = self._conn
        deadline = time.monotonic() + self._timeout_s
        delay = 0.005
        while True:
            try:
                conn.execute("BEGIN")
                try:
                    result = body(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction and not conn.raw.closed:
                        conn.execute("ROLLBACK")
                    raise
                return result
            except psycopg.Error as exc:
                state = getattr(exc, "sqlstate", None)
                if state in _RETRIED and time.monotonic() < deadline:
                    time.sleep(delay * (1.0 + random.random()))
                    delay = min(delay * 2.0, 0.25)
                    continue
                failure = self._failure(exc)
                if failure is None:
                    raise
                raise failure from exc

    def require_writable(self) -> None:
        psycopg = _psycopg()
        conn = self._conn
        try:
            conn.execute("BEGIN")
            try:
                conn.execute("UPDATE runs SET status = status WHERE 1 = 0")
                (allowed,) = conn.execute(
                    "SELECT bool_and(has_table_privilege(t, 'INSERT')) FROM unnest("
                    "ARRAY['runs', 'environments', 'measurements', 'samples', 'run_metrics', "
                    "'run_tags', 'artifacts']) AS t"
                ).fetchone()
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        except psycopg.Error as exc:
            allowed, why = False, one_line(exc)
        else:
            why = "this user may not insert into its tables"
        if not allowed:
            raise UsageError(
                f"the results database {self.location} is not writable ({why}); "
                f"pass --db with a database you may write, or set {DB_ENV_VAR}"
            )

    # -- identity and migrations -------------------------------------------------

    def _identify(self) -> tuple[str | None, int | None, list[str]]:
        """(application marker, version, tables) of the current schema; marker and
        version ``None`` when there is no ``d5_schema`` table."""
        conn = self._conn
        tables = [
            str(name)
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "ORDER BY tablename"
            ).fetchall()
        ]
        if "d5_schema" not in tables:
            return None, None, tables
        row = conn.execute("SELECT application, version FROM d5_schema").fetchone()
        if row is None:
            return "", None, tables
        return str(row[0]), int(row[1]), tables

    def _check(self, marker: str | None, version: int | None, tables: list[str]) -> None:
        if marker == schema.APPLICATION_MARKER and version is not None:
            schema.check_version(version, self.location, postgres_schema.POSTGRES_MIGRATIONS)
            return
        if marker is None and not tables:
            if not self._create:
                raise UsageError(
                    f"no d5 results in {self.location} yet (the database is empty); run a "
                    f"benchmark with it as --db first, or pass --db (or set {DB_ENV_VAR}) to "
                    "the database to read"
                )
            return  # an empty database: it becomes a d5 one
        others = [t for t in tables if t != "d5_schema"]
        shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
        what = f"tables {shown}" if others else f"marker {marker!r}"
        raise UsageError(
            f"{self.location} is not a d5 results database: it is a database of another "
            f"application ({what}); pass --db with another database"
        )

    def prepare(self) -> None:
        psycopg = _psycopg()
        try:
            marker, version, tables = self._identify()
        except psycopg.Error as exc:
            raise UsageError(
                f"cannot read the results database {self.location}: {one_line(exc)}"
            ) from None
        self._check(marker, version, tables)
        latest = schema.latest_version(postgres_schema.POSTGRES_MIGRATIONS)
        if version is not None and version >= latest:
            return

        def upgrade(c: PostgresConnection) -> None:
            # Concurrent openers wait here; the second sees the first one's work.
            c.execute("SELECT pg_advisory_xact_lock(?, ?)", _MIGRATION_LOCK)
            now = self._identify()
            self._check(*now)
            found = now[1]
            steps = schema.pending_migrations(found or 0, postgres_schema.POSTGRES_MIGRATIONS)
            postgres_schema.apply_postgres_migrations(c, found, steps)

        try:
            self.write(upgrade)
        except psycopg.Error as exc:
            raise UsageError(
                f"cannot create or upgrade the results database {self.location}: {one_line(exc)}"
            ) from None

    # -- runs of processes that died ------------------------------------------------

    def hold_run(self, run_id: str) -> bool:
        """Take the run's advisory lock on this process's lock connection; ``False``
        when it stays held elsewhere longer than a reader holds it (another live
        process writes a run of this id)."""
        return _RUN_LOCKS.hold(self._url, run_id)

    def release_run(self, run_id: str) -> None:
        _RUN_LOCKS.release(self._url, run_id)

    def writer_gone_elsewhere(self, run_id: str) -> bool:
        key = run_lock_key(run_id)
        (free,) = self._conn.execute("SELECT pg_try_advisory_lock(?)", (key,)).fetchone()
        if free:
            self._conn.execute("SELECT pg_advisory_unlock(?)", (key,))
        return bool(free)
