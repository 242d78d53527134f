"""What differs between the databases behind a results store, behind one small interface.

:class:`~d5core.results.store.ResultsStore` holds the SQL both databases accept
(``?`` placeholders, ``INSERT ... ON CONFLICT DO NOTHING``, ``RETURNING id``); a
:class:`StoreBackend` holds the rest: connecting, identifying the database and applying
migrations, the write transaction and its retries, the few SQL fragments that differ,
and how a reader tells that the process writing a run is gone. The two backends are
:mod:`d5core.results.sqlite_backend` and :mod:`d5core.teamstore.postgres_backend`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

__all__ = ["Connection", "Cursor", "StoreBackend"]

_T = TypeVar("_T")


class Cursor(Protocol):
    """The rows of one statement: what ``Connection.execute`` returns."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Any: ...


class Connection(Protocol):
    """A connection that takes ``?`` placeholders: :class:`sqlite3.Connection` itself,
    or :class:`d5core.teamstore.postgres_backend.PostgresConnection`."""

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Any: ...

    def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]], /) -> Any: ...


class StoreBackend(ABC):
    """One open database: its connection, its identity, and its transactions."""

    #: ``"sqlite"`` or ``"postgresql"``.
    name: str
    #: SQL of ``BEGIN`` for a read that must see one state of the database throughout.
    begin_read: str = "BEGIN"
    #: An expression giving the tags of run ``r`` (table ``run_tags t``) as a JSON array.
    tags_array: str
    #: The column that orders runs of one ``created`` time in the order they were stored.
    insertion_order: str

    @property
    @abstractmethod
    def conn(self) -> Connection:
        """The connection the store runs its SQL on."""

    @property
    @abstractmethod
    def location(self) -> str:
        """What messages name: a file path, or a URL without its password."""

    @property
    def path(self) -> Path | None:
        """The database file, for a file-backed store; ``None`` otherwise."""
        return None

    @abstractmethod
    def prepare(self) -> None:
        """Check that the database is a d5 results database this code can read, then
        create or upgrade its schema; raise a one-line ``UsageError`` otherwise."""

    @abstractmethod
    def write(self, body: Callable[[Any], _T]) -> _T:
        """Run ``body(conn)`` in one write transaction and commit it, retried while the
        database asks to; on any error nothing of it is kept."""

    @abstractmethod
    def require_writable(self) -> None:
        """Raise a one-line ``UsageError`` unless runs can be written; write nothing."""

    def insert_samples(
        self,
        conn: Any,
        measurement_id: int,
        start: int,
        values: Sequence[float | None],
        processes: Sequence[int | None],
    ) -> None:
        """Insert samples ``start``, ``start + 1``, ... of a measurement in the current
        transaction (``None`` values stand for NaN)."""
        conn.executemany(
            "INSERT INTO samples (measurement_id, idx, value, process) VALUES (?, ?, ?, ?)",
            (
                (measurement_id, start + i, v, p)
                for i, (v, p) in enumerate(zip(values, processes, strict=True))
            ),
        )

    def hold_run(self, run_id: str) -> bool:
        """Mark, for readers on other hosts, that this process is writing ``run_id``;
        ``False`` when another live process holds that mark (then draw another id)."""
        return True

    def release_run(self, run_id: str) -> None:
        """Undo :meth:`hold_run` once the run is finished (or was never stored)."""
        return None

    def writer_gone_elsewhere(self, run_id: str) -> bool:
        """Whether the process of another host that was writing ``run_id`` is known to
        be gone; ``False`` when that cannot be known (a run is never marked incomplete
        on a guess)."""
        return False

    def is_transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a database error a caller may ignore for a best-effort
        write (a busy or read-only database)."""
        return False

    @abstractmethod
    def close(self) -> None:
        """Close the connection; committed writes are kept."""
