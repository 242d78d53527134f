"""The results store: every run, its raw samples, summaries and environment, in SQLite.

Why SQLite: one file that several processes (ranks, parallel benchmark sessions, runs
from different virtualenvs) write at once, that survives a killed process, and that any
tool can read. The file uses WAL journaling, a busy timeout and ``BEGIN IMMEDIATE``
transactions retried while another writer holds the lock, so concurrent writers wait
instead of failing with "database is locked".

Durability: beginning a run, adding a measurement (with all its samples), adding a
metric and finishing a run are each one committed transaction. Killing the process at
any moment loses at most the write in progress, never a finished run, and never leaves
half a measurement. A run left ``running`` by a process that no longer exists on this
host reads back as ``incomplete`` (and is marked so when a store is opened).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import shutil
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from d5core.environment import RUN_SPECIFIC_KEYS, capture_environment, environment_fingerprint
from d5core.errors import UsageError, one_line
from d5core.metrics.directions import better_of, check_better
from d5core.results import schema
from d5core.results.load import LoadAverage, current_load
from d5core.results.paths import DB_ENV_VAR, ensure_parent, resolve_db_path
from d5core.results.tags import check_tags

if TYPE_CHECKING:
    from d5core.measure.engine import Measurement
    from d5core.measure.stats import Summary
    from d5core.plugins import PluginManager

__all__ = [
    "BUSY_TIMEOUT_S",
    "FINAL_STATUSES",
    "RUN_STATUSES",
    "MeasurementRecord",
    "MetricRecord",
    "ResultsStore",
    "RunRecord",
    "StoredMeasurement",
    "StoredRun",
    "read_store",
]

#: Every status a run can have. ``running`` until finished; ``incomplete`` when its
#: process ended (killed, crashed) before finishing it.
RUN_STATUSES: tuple[str, ...] = (
    "running",
    "complete",
    "failed",
    "diverged",
    "incomplete",
    "interrupted",
)
#: The statuses :meth:`ResultsStore.finish_run` accepts.
FINAL_STATUSES: tuple[str, ...] = ("complete", "failed", "diverged", "incomplete", "interrupted")
#: How long a writer waits for another writer's lock before giving up, in seconds.
BUSY_TIMEOUT_S = 30.0

_ID_LENGTH = 12
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
_SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_FULL, _SQLITE_CANTOPEN = 8, 10, 13, 14
_log = logging.getLogger(__name__)
_T = TypeVar("_T")


# -- records -----------------------------------------------------------------


@dataclass(frozen=True)
class RunRecord:
    """One run as stored; ``status`` is ``incomplete`` for runs whose process died."""

    id: str
    kind: str
    name: str
    status: str
    created: str
    finished: str | None
    pid: int | None
    hostname: str | None
    seed: int | None
    recipe_hash: str | None
    config: dict[str, Any]
    environment_id: int | None
    #: :func:`d5core.environment.environment_fingerprint` of the run's environment.
    fingerprint: str | None
    error: str | None
    #: How many measurements and scalar metrics the run holds.
    n_measurements: int = 0
    n_metrics: int = 0
    #: The machine's load average when the run began and when it was finished
    #: (``None``: not recorded, as for runs stored before d5 recorded it, or killed runs).
    load_start: LoadAverage | None = None
    load_end: LoadAverage | None = None
    #: The run's tags, sorted (see :mod:`d5core.results.tags`).
    tags: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON types; its id is ``run_id``, as everywhere in d5's JSON."""
        data = asdict(self)
        data["tags"] = list(self.tags)
        return {"run_id": data.pop("id"), **data}


@dataclass(frozen=True)
class MeasurementRecord:
    """One measurement of a run: a metric under labels, its summary and sample count."""

    id: int
    run_id: str
    metric: str
    labels: dict[str, Any]
    unit: str
    n: int
    #: :meth:`d5core.measure.stats.Summary.to_json`, or ``None`` when the samples could
    #: not be summarised (for example a NaN among them).
    summary: dict[str, Any] | None
    blocked: bool | None
    block_size: int | None
    warmup_runs: int | None
    stopped_by: str | None
    #: How the samples were taken, for a :class:`~d5core.measure.engine.Measurement`:
    #: its options, timer resolution and overhead, elapsed time (``{}`` otherwise).
    details: dict[str, Any] = field(default_factory=dict)
    #: ``"lower"`` or ``"higher"``: which direction is better; ``None`` when unknown.
    better: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON types."""
        return asdict(self)


@dataclass(frozen=True)
class MetricRecord:
    """One scalar metric of a run (final accuracy, time to accuracy, ...)."""

    id: int
    run_id: str
    name: str
    labels: dict[str, Any]
    value: float
    unit: str
    #: ``"lower"`` or ``"higher"``: which direction is better; ``None`` when unknown.
    better: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON types; a NaN value becomes ``None``."""
        data = asdict(self)
        if isinstance(self.value, float) and not math.isfinite(self.value):
            data["value"] = None if math.isnan(self.value) else self.value
        return data


@dataclass(frozen=True)
class StoredMeasurement:
    """A measurement with its raw samples, as :meth:`ResultsStore.read_runs` reads it."""

    record: MeasurementRecord
    samples: tuple[float, ...]
    #: The worker process of each sample (``None``: not recorded).
    processes: tuple[int | None, ...]


@dataclass(frozen=True)
class StoredRun:
    """Everything stored about one run: :meth:`ResultsStore.read_runs`' unit."""

    run: RunRecord
    environment: dict[str, Any]
    measurements: tuple[StoredMeasurement, ...]
    metrics: tuple[MetricRecord, ...]


# -- helpers -------------------------------------------------------------------


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _dumps(value: Any, *, canonical: bool = True) -> str:
    """Compact JSON; ``canonical`` sorts keys so equal content gives equal text."""
    return json.dumps(value, sort_keys=canonical, separators=(",", ":"), default=str)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return (code & 0xFF) in (_SQLITE_BUSY, _SQLITE_LOCKED)
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


def _is_readonly(exc: sqlite3.Error) -> bool:
    return "readonly" in str(exc).lower() or "read-only" in str(exc).lower()


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _is_full(exc: sqlite3.Error) -> bool:
    return _primary_code(exc) == _SQLITE_FULL or "disk is full" in str(exc).lower()


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


def _own_start_time() -> float | None:
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:
        return None


def _process_alive(pid: int, started: float | None) -> bool:
    """Whether process ``pid`` on this host is still the one that began the run.

    A different start time means the pid was reused by another process. When the OS
    does not let us look, the process is assumed alive (a run is never marked
    incomplete on a guess).
    """
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return not (started is not None and abs(proc.create_time() - started) > 1.0)
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def _load_json(load: LoadAverage | None) -> str | None:
    return None if load is None else _dumps(load.to_json(), canonical=False)


def _direction(stored: str | None, name: str, unit: str) -> str | None:
    """The stored direction, else the one d5 knows for ``name`` in ``unit`` (older rows)."""
    return stored if stored in ("lower", "higher") else better_of(name, unit)


def _float_or_none(value: float) -> float | None:
    """SQLite stores NaN as NULL; keep that explicit."""
    v = float(value)
    return None if math.isnan(v) else v


def _split_environment(env: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``env`` as (the part shared by runs on the same set-up, the part of this run)."""
    shared = {k: v for k, v in env.items() if k not in RUN_SPECIFIC_KEYS}
    own = {k: env[k] for k in RUN_SPECIFIC_KEYS if k in env}
    return shared, own


def _summary_json(summary: Summary | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if summary is None:
        return None
    if isinstance(summary, Mapping):
        return dict(summary)
    data: dict[str, Any] = summary.to_json()
    return data


def _process_column(processes: Sequence[int] | None, n: int, what: str) -> list[int | None]:
    """The ``process`` column for ``n`` samples: one non-negative integer each, or none."""
    if processes is None:
        return [None] * n
    owners = list(processes)
    if len(owners) != n or not all(isinstance(p, int) and p >= 0 for p in owners):
        raise UsageError(
            f"measurement {what}: processes must give one non-negative integer per sample "
            f"({n}), got {len(owners)}"
        )
    return [int(p) for p in owners]


def _summarize(values: Sequence[float]) -> dict[str, Any] | None:
    from d5core.measure.stats import summarize

    try:
        return _summary_json(summarize(list(values)))
    except ValueError:
        return None


#: The columns :func:`_measurement_record` reads, in its order (``FROM measurements``).
_MEASUREMENT_COLUMNS = (
    "id, run_id, metric, labels, unit, n, summary, blocked, block_size, warmup_runs, "
    "stopped_by, details, better"
)
#: The columns :func:`_metric_record` reads, in its order (``FROM run_metrics``).
_METRIC_COLUMNS = "id, run_id, name, labels, value, unit, better"


def _measurement_record(row: Sequence[Any]) -> MeasurementRecord:
    """A ``measurements`` row (:data:`_MEASUREMENT_COLUMNS`) as its record."""
    return MeasurementRecord(
        id=row[0],
        run_id=row[1],
        metric=row[2],
        labels=_loads(row[3]) or {},
        unit=row[4],
        n=int(row[5]),
        summary=_loads(row[6]),
        blocked=None if row[7] is None else bool(row[7]),
        block_size=row[8],
        warmup_runs=row[9],
        stopped_by=row[10],
        details=_loads(row[11]) or {},
        better=_direction(row[12], row[2], row[4]),
    )


def _metric_record(row: Sequence[Any]) -> MetricRecord:
    """A ``run_metrics`` row (:data:`_METRIC_COLUMNS`) as its record; NULL is NaN."""
    mid, rid, name, labels, value, unit, better = row
    return MetricRecord(
        id=mid,
        run_id=rid,
        name=name,
        labels=_loads(labels) or {},
        value=math.nan if value is None else float(value),
        unit=unit,
        better=_direction(better, name, unit),
    )


def _joined_environment(shared: str | None, own: str | None) -> dict[str, Any]:
    """A run's whole environment from its stored parts: the shared set-up, then its own keys."""
    env: dict[str, Any] = _loads(shared) or {}
    env.update(_loads(own) or {})
    return env


# -- the store -----------------------------------------------------------------


class ResultsStore:
    """A handle on one results database; open it with :meth:`open`.

    Use it as a context manager, or call :meth:`close`. A handle belongs to the thread
    that opened it; processes each open their own.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: Path,
        *,
        manager: PluginManager | None = None,
        timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        self._conn = conn
        self._path = path
        self._manager = manager
        self._timeout_s = timeout_s
        self._host = socket.gethostname()

    # -- opening and closing ---------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        create: bool = True,
        manager: PluginManager | None = None,
        timeout_s: float = BUSY_TIMEOUT_S,
    ) -> ResultsStore:
        """Open (and create or upgrade) the results database.

        :param path: the database file; see :func:`d5core.results.paths.resolve_db_path`
            for the default.
        :param create: create the file (and its directories) when it does not exist;
            with ``False`` a missing file is a :class:`UsageError`.
        :param manager: the plugin manager whose ``d5_result_stored`` hooks are called
            and whose environment hooks fill environments captured by :meth:`begin_run`;
            the process-wide one by default.
        :param timeout_s: how long to wait for another writer's lock.
        :raises UsageError: when the file is not a d5 results database (it is left
            untouched), was written by a newer d5, or cannot be opened.
        """
        db = resolve_db_path(path)
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
        store = cls(conn, db, manager=manager, timeout_s=timeout_s)
        try:
            store._prepare()
        except BaseException:
            conn.close()
            raise
        return store

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def close(self) -> None:
        """Close the connection; finished writes are already on disk."""
        self._conn.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

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

    def _write(self, body: Callable[[sqlite3.Connection], _T]) -> _T:
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

    def _prepare(self) -> None:
        conn = self._conn

        def identify() -> tuple[int, int, list[str]]:
            # One read transaction: the three reads see one state of the file. Read one
            # by one, another process creating the database could commit in between,
            # and its tables would be seen without its application id.
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

        def check(app_id: int, version: int, tables: list[str]) -> None:
            if app_id not in (0, schema.APPLICATION_ID) or (app_id == 0 and tables):
                shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
                what = f"tables {shown}" if tables else f"application id {app_id:#x}"
                raise UsageError(
                    f"{self._path} is not a d5 results database: it is an SQLite database "
                    f"of another program ({what}); pass --db with another path"
                )
            schema.check_version(version, str(self._path), schema.MIGRATIONS)

        try:
            app_id, version, tables = self._retrying(identify)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and not _is_notadb(exc):
                failure = _write_failure(self._path, exc)
                if failure is not None:
                    raise failure from exc
                raise UsageError(f"cannot read the results database {self._path}: {exc}") from exc
            raise UsageError(f"{self._path} is not a d5 results database: {exc}") from exc
        check(app_id, version, tables)

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
                now = identify()
                check(*now)
                schema.apply_migrations(c, schema.pending_migrations(now[1], schema.MIGRATIONS))

            try:
                self._write(upgrade)
            except sqlite3.OperationalError as exc:
                raise UsageError(
                    f"cannot create or upgrade the results database {self._path}: {exc}"
                ) from exc
        # Only now: a migration that rebuilds a table must not cascade deletions.
        conn.execute("PRAGMA foreign_keys = ON")
        self._mark_dead_runs_incomplete()

    def _mark_dead_runs_incomplete(self) -> None:
        """Persist ``incomplete`` for runs whose process on this host has ended."""
        rows = self._conn.execute(
            "SELECT id, pid, proc_started FROM runs WHERE status = 'running' AND hostname = ?",
            (self._host,),
        ).fetchall()
        dead = [
            (run_id, pid)
            for run_id, pid, started in rows
            if pid is not None and not _process_alive(int(pid), started)
        ]
        if not dead:
            return

        def mark(c: sqlite3.Connection) -> None:
            for run_id, pid in dead:
                c.execute(
                    "UPDATE runs SET status = 'incomplete', error = ? "
                    "WHERE id = ? AND status = 'running'",
                    (self._dead_message(pid), run_id),
                )

        try:
            self._write(mark)
        except (sqlite3.OperationalError, UsageError) as exc:
            # A read-only or busy file: reads still report these runs as incomplete.
            _log.debug("could not mark dead runs incomplete: %s", exc)

    def _dead_message(self, pid: int | None) -> str:
        return f"its process (pid {pid} on {self._host}) ended before the run was finished"

    # -- writing -----------------------------------------------------------------

    def begin_run(
        self,
        kind: str,
        name: str,
        *,
        config: Mapping[str, Any] | None = None,
        environment: Mapping[str, Any] | None = None,
        seed: int | None = None,
        recipe_hash: str | None = None,
        tags: Sequence[str] = (),
    ) -> str:
        """Start a run (status ``running``) and return its id, a 12-character hex string.

        :param kind: what was run: ``"op"``, ``"net"``, ``"train"``, ``"measure"``, ...
        :param name: what the user would call it (``"gemm"``, ``"resnet18"``).
        :param config: the run's settings (JSON-serialisable; unknown objects become
            strings).
        :param environment: :func:`d5core.environment.capture_environment`'s result;
            captured now when ``None``. Environments are stored once per distinct
            content; the per-run keys (command line, seeds, recipe hash, time) with the run.
        :param seed: the seed the run used.
        :param recipe_hash: the content hash of the recipe it follows.
        :param tags: names to find the run by later (:func:`d5core.results.tags.check_tag`).

        The machine's load average now is stored with the run (see
        :mod:`d5core.results.load`).
        """
        if not isinstance(kind, str) or not kind.strip():
            raise UsageError(f"a run needs a kind such as 'op' or 'train', got {kind!r}")
        if seed is not None and not isinstance(seed, int):
            raise UsageError(f"a run's seed must be an integer, got {seed!r}")
        run_tags = check_tags(tags)
        env = (
            dict(environment)
            if environment is not None
            else capture_environment(seeds=seed, recipe_hash=recipe_hash, manager=self._manager)
        )
        shared, own = _split_environment(env)
        env_data = _dumps(shared)
        env_hash = hashlib.sha256(env_data.encode()).hexdigest()
        fingerprint = environment_fingerprint(shared)
        row = (
            kind,
            str(name),
            _now(),
            os.getpid(),
            self._host,
            _own_start_time(),
            None if seed is None else str(seed),
            recipe_hash,
            _dumps(dict(config or {}), canonical=False),
            _dumps(own),
            _load_json(current_load()),
        )

        def write(conn: sqlite3.Connection) -> str:
            conn.execute(
                "INSERT OR IGNORE INTO environments (hash, fingerprint, data) VALUES (?, ?, ?)",
                (env_hash, fingerprint, env_data),
            )
            env_id = conn.execute(
                "SELECT id FROM environments WHERE hash = ?", (env_hash,)
            ).fetchone()[0]
            while True:
                run_id = uuid.uuid4().hex[:_ID_LENGTH]
                try:
                    conn.execute(
                        "INSERT INTO runs (id, kind, name, status, created, pid, hostname, "
                        "proc_started, seed, recipe_hash, config, context, load_start, "
                        "environment_id) "
                        "VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (run_id, *row, env_id),
                    )
                except sqlite3.IntegrityError:
                    continue  # an id already taken: draw another
                conn.executemany(
                    "INSERT INTO run_tags (run_id, tag) VALUES (?, ?)",
                    [(run_id, tag) for tag in run_tags],
                )
                return run_id

        return self._write(write)

    def _require_running(self, conn: sqlite3.Connection, run_id: str) -> None:
        found = conn.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
        if found is None:
            raise UsageError(f"no run {run_id!r} in {self._path}")
        if found[0] != "running":
            raise UsageError(f"run {run_id} is already {found[0]}; a finished run is never changed")

    def add_measurement(
        self,
        run_id: str,
        metric: str,
        measurement_or_samples: Measurement | Sequence[float],
        *,
        labels: Mapping[str, Any] | None = None,
        unit: str = "s",
        summary: Summary | Mapping[str, Any] | None = None,
        better: str | None = None,
        processes: Sequence[int] | None = None,
    ) -> int:
        """Store a measurement with all its raw samples, in one transaction.

        :param run_id: a ``running`` run.
        :param metric: what was measured (``"time"``, ``"forward"``, ``"throughput"``).
        :param measurement_or_samples: a :class:`d5core.measure.engine.Measurement`
            (its samples, summary, blocking and stopping reason are kept), or the samples.
        :param labels: what tells this measurement apart within the run (backend,
            shape, dtype); compare pairs measurements with equal metric and labels.
        :param unit: the samples' unit; ``"s"`` for times. Units ending in ``/s`` are
            rates, for which higher is better.
        :param summary: a summary to store instead of the measurement's own, or of one
            computed from the samples.
        :param better: ``"lower"`` or ``"higher"``: which direction is better; by default
            the one :func:`d5core.metrics.directions.better_of` knows for ``metric`` and
            ``unit`` (``None`` when it knows none).
        :param processes: for each sample, the worker process (its round, from 0) that
            took it; by default none is recorded (one process took them all).
        :return: the measurement's id.
        """
        direction = check_better(better, f"measurement {metric!r}") or better_of(metric, unit)
        m: Any = measurement_or_samples
        blocked: bool | None = None
        block_size: int | None = None
        warmup: int | None = None
        stopped_by: str | None = None
        details: dict[str, Any] = {}
        if hasattr(m, "samples") and hasattr(m, "summary"):
            values = [float(v) for v in m.samples]
            summary = summary if summary is not None else m.summary
            blocked = None if m.blocked is None else bool(m.blocked)
            block_size = None if m.block_size is None else int(m.block_size)
            warmup = None if m.warmup_runs is None else int(m.warmup_runs)
            stopped_by = None if m.stopped_by is None else str(m.stopped_by)
            if hasattr(m, "to_json"):
                details = {k: v for k, v in m.to_json().items() if k not in ("samples", "summary")}
        else:
            try:
                values = [float(v) for v in m]
            except (TypeError, ValueError) as exc:
                raise UsageError(
                    f"measurement {metric!r} needs a Measurement or a sequence of numbers: "
                    f"{one_line(exc)}"
                ) from exc
        if not values:
            raise UsageError(f"measurement {metric!r} of run {run_id} has no samples")
        owners = _process_column(processes, len(values), metric)
        summary_data = _summary_json(summary) if summary is not None else _summarize(values)
        labels_json = _dumps(dict(labels or {}))
        summary_text = None if summary_data is None else _dumps(summary_data, canonical=False)
        details_text = _dumps(details, canonical=False)

        def write(conn: sqlite3.Connection) -> int:
            self._require_running(conn, run_id)
            cur = conn.execute(
                "INSERT INTO measurements (run_id, metric, labels, unit, n, summary, blocked, "
                "block_size, warmup_runs, stopped_by, details, better) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    metric,
                    labels_json,
                    unit,
                    len(values),
                    summary_text,
                    blocked,
                    block_size,
                    warmup,
                    stopped_by,
                    details_text,
                    direction,
                ),
            )
            mid = cur.lastrowid
            assert mid is not None
            conn.executemany(
                "INSERT INTO samples (measurement_id, idx, value, process) VALUES (?, ?, ?, ?)",
                (
                    (mid, i, _float_or_none(v), owner)
                    for i, (v, owner) in enumerate(zip(values, owners, strict=True))
                ),
            )
            return mid

        return self._write(write)

    def add_metric(
        self,
        run_id: str,
        name: str,
        value: float,
        *,
        labels: Mapping[str, Any] | None = None,
        unit: str = "",
        better: str | None = None,
    ) -> int:
        """Store one scalar metric of a ``running`` run (accuracy, time to accuracy, ...).

        :param better: ``"lower"`` or ``"higher"``: which direction is better; by default
            the one :func:`d5core.metrics.directions.better_of` knows for ``name`` and
            ``unit`` (``None`` when it knows none).
        :return: the metric's id.
        """
        direction = check_better(better, f"metric {name!r}") or better_of(name, unit)
        try:
            number = float(value)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"metric {name!r} must be a number, got {value!r}") from exc
        labels_json = _dumps(dict(labels or {}))

        def write(conn: sqlite3.Connection) -> int:
            self._require_running(conn, run_id)
            cur = conn.execute(
                "INSERT INTO run_metrics (run_id, name, labels, value, unit, better) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, name, labels_json, _float_or_none(number), unit, direction),
            )
            assert cur.lastrowid is not None
            return cur.lastrowid

        return self._write(write)

    def finish_run(self, run_id: str, status: str = "complete", error: str | None = None) -> None:
        """Mark a ``running`` run finished, then tell plugins (``d5_result_stored``).

        :param status: ``complete``, ``failed``, ``diverged`` or ``incomplete``.
        :param error: what went wrong, for the statuses other than ``complete``.
        :raises UsageError: for an unknown run, an unknown status, or a run that is
            already finished (a finished run is never changed).

        The machine's load average now is stored with the run.
        """
        if status not in FINAL_STATUSES:
            raise UsageError(
                f"a run finishes as one of {', '.join(FINAL_STATUSES)}, not {status!r}"
            )

        load_end = _load_json(current_load())

        def write(conn: sqlite3.Connection) -> None:
            self._require_running(conn, run_id)
            conn.execute(
                "UPDATE runs SET status = ?, finished = ?, error = ?, load_end = ? WHERE id = ?",
                (status, _now(), error, load_end, run_id),
            )

        self._write(write)
        self._notify_stored(run_id)

    def _notify_stored(self, run_id: str) -> None:
        manager = self._manager
        if manager is None:
            from d5core.plugins import get_plugin_manager

            manager = get_plugin_manager()
        # a plugin that raises is left out and warned about by the manager
        manager.hook.d5_result_stored(run_id=run_id, database=str(self._path))

    @contextmanager
    def run(
        self,
        kind: str,
        name: str,
        *,
        config: Mapping[str, Any] | None = None,
        environment: Mapping[str, Any] | None = None,
        seed: int | None = None,
        recipe_hash: str | None = None,
        tags: Sequence[str] = (),
    ) -> Iterator[str]:
        """Begin a run for the ``with`` block and finish it however the block ends.

        The run finishes ``complete`` when the block ends normally, ``failed`` (with
        the exception as its error) when it raises, and ``incomplete`` on
        ``KeyboardInterrupt``; a run the block already finished is left as it is.
        """
        run_id = self.begin_run(
            kind,
            name,
            config=config,
            environment=environment,
            seed=seed,
            recipe_hash=recipe_hash,
            tags=tags,
        )
        try:
            yield run_id
        except BaseException as exc:
            if self._stored_status(run_id) == "running":
                if isinstance(exc, KeyboardInterrupt):
                    status, error = "interrupted", str(exc) or "interrupted (SIGINT)"
                else:
                    status, error = "failed", one_line(exc)
                try:
                    self.finish_run(run_id, status, error=error)
                except UsageError as unrecorded:
                    # The same full or read-only disk: the run is left ``running``, and
                    # reads as ``incomplete`` once this process has ended.
                    _log.debug("could not finish run %s as %s: %s", run_id, status, unrecorded)
            raise
        if self._stored_status(run_id) == "running":
            self.finish_run(run_id)

    def record_measurement_run(
        self,
        name: str,
        measurements: Mapping[str, Measurement | Sequence[float]],
        *,
        kind: str = "measure",
        labels: Mapping[str, Any] | None = None,
        unit: str = "s",
        config: Mapping[str, Any] | None = None,
        environment: Mapping[str, Any] | None = None,
        seed: int | None = None,
        recipe_hash: str | None = None,
    ) -> str:
        """Store a whole run of measurements at once: ``{metric: measurement}``.

        :return: the id of the completed run.
        """
        with self.run(
            kind,
            name,
            config=config,
            environment=environment,
            seed=seed,
            recipe_hash=recipe_hash,
        ) as run_id:
            for metric, measurement in measurements.items():
                self.add_measurement(run_id, metric, measurement, labels=labels, unit=unit)
        return run_id

    # -- reading -----------------------------------------------------------------

    def _stored_status(self, run_id: str) -> str | None:
        row = self._conn.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
        return None if row is None else str(row[0])

    _RUN_COLUMNS = (
        "r.id, r.kind, r.name, r.status, r.created, r.finished, r.pid, r.hostname, "
        "r.proc_started, r.seed, r.recipe_hash, r.config, r.environment_id, e.fingerprint, "
        "r.error, "
        "(SELECT count(*) FROM measurements m WHERE m.run_id = r.id), "
        "(SELECT count(*) FROM run_metrics k WHERE k.run_id = r.id), "
        "r.load_start, r.load_end, "
        "(SELECT json_group_array(t.tag) FROM run_tags t WHERE t.run_id = r.id)"
    )
    _RUN_FROM = "FROM runs r LEFT JOIN environments e ON e.id = r.environment_id"

    def _run_record(self, row: Sequence[Any]) -> RunRecord:
        rid, kind, name, status, created, finished, pid, host, started = row[:9]
        seed, recipe, config, env_id, fingerprint, error, n_meas, n_metrics = row[9:17]
        load_start, load_end = (LoadAverage.from_json(_loads(text)) for text in row[17:19])
        tags = tuple(sorted(_loads(row[19]) or ()))
        if (
            status == "running"
            and host == self._host
            and pid is not None
            and not _process_alive(int(pid), started)
        ):
            status, error = "incomplete", error or self._dead_message(pid)
        return RunRecord(
            id=rid,
            kind=kind,
            name=name,
            status=status,
            created=created,
            finished=finished,
            pid=pid,
            hostname=host,
            seed=None if seed is None else int(seed),
            recipe_hash=recipe,
            config=_loads(config) or {},
            environment_id=env_id,
            fingerprint=fingerprint,
            error=error,
            n_measurements=int(n_meas),
            n_metrics=int(n_metrics),
            load_start=load_start,
            load_end=load_end,
            tags=tags,
        )

    def list_runs(
        self, limit: int | None = None, kind: str | None = None, tag: str | None = None
    ) -> list[RunRecord]:
        """Runs, newest first; at most ``limit`` of them, only of ``kind`` and only those
        tagged ``tag`` if given."""
        sql = f"SELECT {self._RUN_COLUMNS} {self._RUN_FROM}"
        params: list[Any] = []
        where = []
        if kind is not None:
            where.append("r.kind = ?")
            params.append(kind)
        if tag is not None:
            where.append("EXISTS (SELECT 1 FROM run_tags t WHERE t.run_id = r.id AND t.tag = ?)")
            params.append(tag)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY r.created DESC, r.rowid DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        return [self._run_record(r) for r in self._conn.execute(sql, params)]

    def get_run(self, run_id: str) -> RunRecord:
        """The run whose id is ``run_id`` or uniquely starts with it.

        :raises UsageError: naming the id when no run or several runs match.
        """
        prefix = str(run_id).strip()
        if not prefix:
            raise UsageError("a run id is needed; 'd5 results list' shows the runs")
        base = f"SELECT {self._RUN_COLUMNS} {self._RUN_FROM}"
        row = self._conn.execute(base + " WHERE r.id = ?", (prefix,)).fetchone()
        if row is not None:
            return self._run_record(row)
        rows = self._conn.execute(
            base + " WHERE substr(r.id, 1, ?) = ? ORDER BY r.created LIMIT 6",
            (len(prefix), prefix),
        ).fetchall()
        if not rows:
            raise UsageError(f"no run {prefix!r} in {self._path}; 'd5 results list' shows the runs")
        if len(rows) > 1:
            shown = ", ".join(r[0] for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
            raise UsageError(
                f"run id {prefix!r} is ambiguous: it starts {shown}; give more characters"
            )
        return self._run_record(rows[0])

    def environment(self, run_id: str) -> dict[str, Any]:
        """The full environment a run recorded (shared part and per-run keys)."""
        run = self.get_run(run_id)
        row = self._conn.execute(
            "SELECT e.data, r.context FROM runs r LEFT JOIN environments e "
            "ON e.id = r.environment_id WHERE r.id = ?",
            (run.id,),
        ).fetchone()
        return _joined_environment(row[0], row[1])

    def measurements(self, run_id: str) -> list[MeasurementRecord]:
        """The measurements of a run, in the order they were stored."""
        run = self.get_run(run_id)
        rows = self._conn.execute(
            f"SELECT {_MEASUREMENT_COLUMNS} FROM measurements WHERE run_id = ? ORDER BY id",
            (run.id,),
        )
        return [_measurement_record(row) for row in rows]

    def samples(self, measurement_id: int) -> list[float]:
        """The raw samples of a measurement, in the order they were taken (NaN kept)."""
        rows = self._conn.execute(
            "SELECT value FROM samples WHERE measurement_id = ? ORDER BY idx",
            (int(measurement_id),),
        )
        return [math.nan if v is None else float(v) for (v,) in rows]

    def samples_by_process(self, measurement_id: int) -> dict[int | None, list[float]]:
        """The raw samples of a measurement grouped by the worker process that took them,
        in process order (``None``: not recorded, one process took them all)."""
        rows = self._conn.execute(
            "SELECT process, value FROM samples WHERE measurement_id = ? ORDER BY idx",
            (int(measurement_id),),
        )
        groups: dict[int | None, list[float]] = {}
        for process, v in rows:
            key = None if process is None else int(process)
            groups.setdefault(key, []).append(math.nan if v is None else float(v))
        return dict(sorted(groups.items(), key=lambda kv: -1 if kv[0] is None else kv[0]))

    def metrics(self, run_id: str) -> list[MetricRecord]:
        """The scalar metrics of a run, in the order they were stored."""
        run = self.get_run(run_id)
        rows = self._conn.execute(
            f"SELECT {_METRIC_COLUMNS} FROM run_metrics WHERE run_id = ? ORDER BY id",
            (run.id,),
        )
        return [_metric_record(row) for row in rows]

    def run_document(self, run_id: str, *, samples: bool = True) -> dict[str, Any]:
        """Everything stored about a run as one JSON-ready dict (what ``export`` writes).

        Keys: ``run``, ``environment``, ``measurements`` (each with its ``samples``
        when asked; NaN samples become ``None``) and ``metrics``.
        """
        run = self.get_run(run_id)
        measurements = []
        for m in self.measurements(run.id):
            item = m.to_json()
            if samples:
                item["samples"] = [None if math.isnan(v) else v for v in self.samples(m.id)]
            measurements.append(item)
        return {
            "run": run.to_json(),
            "environment": self.environment(run.id),
            "measurements": measurements,
            "metrics": [k.to_json() for k in self.metrics(run.id)],
        }

    def add_tags(self, run_id: str, tags: Sequence[str]) -> None:
        """Tag a stored run (finished or not): tags name runs, they change no result.

        :raises UsageError: for an unknown run or an invalid tag.
        """
        run = self.get_run(run_id)
        new = check_tags(tags)

        def write(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT OR IGNORE INTO run_tags (run_id, tag) VALUES (?, ?)",
                [(run.id, tag) for tag in new],
            )

        self._write(write)

    def tag_names(self) -> dict[str, int]:
        """Every tag in the database with how many runs carry it, by name."""
        rows = self._conn.execute("SELECT tag, count(*) FROM run_tags GROUP BY tag ORDER BY tag")
        return {str(tag): int(n) for tag, n in rows}

    def read_runs(self, run_ids: Sequence[str]) -> list[StoredRun]:
        """Everything stored about each run of ``run_ids`` (full ids, as
        :meth:`list_runs` gives them), read in a handful of queries however many runs
        there are: what reports draw from. Unknown ids are left out.

        Samples are in the order they were taken, NaN kept; each measurement's
        ``processes`` lists the worker process of each sample (``None``: not recorded).
        """
        ids = list(dict.fromkeys(str(r) for r in run_ids))
        if not ids:
            return []
        self._conn.execute("BEGIN")  # one snapshot for every query below
        try:
            self._conn.execute("CREATE TEMP TABLE IF NOT EXISTS _wanted (id TEXT PRIMARY KEY)")
            self._conn.execute("DELETE FROM _wanted")
            self._conn.executemany(
                "INSERT OR IGNORE INTO _wanted (id) VALUES (?)", [(i,) for i in ids]
            )
            runs = {
                rec.id: rec
                for rec in (
                    self._run_record(row)
                    for row in self._conn.execute(
                        f"SELECT {self._RUN_COLUMNS} {self._RUN_FROM} "
                        "WHERE r.id IN (SELECT id FROM _wanted)"
                    )
                )
            }
            envs: dict[str, dict[str, Any]] = {
                rid: _joined_environment(shared, own)
                for rid, shared, own in self._conn.execute(
                    "SELECT r.id, e.data, r.context FROM runs r LEFT JOIN environments e "
                    "ON e.id = r.environment_id WHERE r.id IN (SELECT id FROM _wanted)"
                )
            }
            measurements: dict[str, list[MeasurementRecord]] = {}
            by_id: dict[int, MeasurementRecord] = {}
            for row in self._conn.execute(
                f"SELECT {_MEASUREMENT_COLUMNS} FROM measurements "
                "WHERE run_id IN (SELECT id FROM _wanted) ORDER BY id"
            ):
                record = _measurement_record(row)
                measurements.setdefault(record.run_id, []).append(record)
                by_id[record.id] = record
            values: dict[int, list[float]] = {}
            processes: dict[int, list[int | None]] = {}
            for mid, value, process in self._conn.execute(
                "SELECT s.measurement_id, s.value, s.process FROM samples s "
                "JOIN measurements m ON m.id = s.measurement_id "
                "WHERE m.run_id IN (SELECT id FROM _wanted) ORDER BY s.measurement_id, s.idx"
            ):
                values.setdefault(mid, []).append(math.nan if value is None else float(value))
                processes.setdefault(mid, []).append(None if process is None else int(process))
            metrics: dict[str, list[MetricRecord]] = {}
            for row in self._conn.execute(
                f"SELECT {_METRIC_COLUMNS} FROM run_metrics "
                "WHERE run_id IN (SELECT id FROM _wanted) ORDER BY id"
            ):
                metric = _metric_record(row)
                metrics.setdefault(metric.run_id, []).append(metric)
        finally:
            self._conn.execute("COMMIT")
        return [
            StoredRun(
                run=runs[rid],
                environment=envs.get(rid, {}),
                measurements=tuple(
                    StoredMeasurement(
                        record=m,
                        samples=tuple(values.get(m.id, ())),
                        processes=tuple(processes.get(m.id, ())),
                    )
                    for m in measurements.get(rid, ())
                ),
                metrics=tuple(metrics.get(rid, ())),
            )
            for rid in ids
            if rid in runs
        ]

    # -- added for runs streamed while they go (d5 run) ---------------------------

    def require_writable(self) -> None:
        """Raise a one-line :class:`UsageError` unless runs can be written here.

        For a command to check before a long run starts, so that a read-only database
        is found at once, not when the results are ready. Nothing is written.
        """
        conn = self._conn

        def probe() -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("UPDATE runs SET status = status WHERE 0")
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

    def append_samples(
        self,
        run_id: str,
        samples: Mapping[int, Sequence[float]],
        *,
        summaries: Mapping[int, Summary | Mapping[str, Any] | None] | None = None,
        processes: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        """Append samples to measurements of a ``running`` run, all in one transaction.

        For a run stored while it goes: each measurement (an id from
        :meth:`add_measurement` of ``run_id``) gets ``samples[id]`` after the ones it
        has; its ``n`` follows, and its summary becomes ``summaries[id]`` when given,
        else one of all its samples. ``processes[id]``, when given, names the worker
        process of each appended sample (see :meth:`add_measurement`).
        """
        given = dict(summaries or {})
        owners = {
            int(mid): _process_column((processes or {}).get(mid), len(values), f"#{mid}")
            for mid, values in samples.items()
        }

        def write(conn: sqlite3.Connection) -> None:
            self._require_running(conn, run_id)
            for mid, values in samples.items():
                row = conn.execute(
                    "SELECT n FROM measurements WHERE id = ? AND run_id = ?", (int(mid), run_id)
                ).fetchone()
                if row is None:
                    raise UsageError(f"run {run_id} has no measurement {mid}")
                start = int(row[0])
                conn.executemany(
                    "INSERT INTO samples (measurement_id, idx, value, process) VALUES (?, ?, ?, ?)",
                    (
                        (int(mid), start + i, _float_or_none(v), owner)
                        for i, (v, owner) in enumerate(zip(values, owners[int(mid)], strict=True))
                    ),
                )
                if mid in given:
                    summary = _summary_json(given[mid])
                else:
                    stored = conn.execute(
                        "SELECT value FROM samples WHERE measurement_id = ? ORDER BY idx",
                        (int(mid),),
                    )
                    summary = _summarize([math.nan if v is None else v for (v,) in stored])
                conn.execute(
                    "UPDATE measurements SET n = ?, summary = ? WHERE id = ?",
                    (
                        start + len(values),
                        None if summary is None else _dumps(summary, canonical=False),
                        int(mid),
                    ),
                )

        self._write(write)

    def update_config(self, run_id: str, updates: Mapping[str, Any]) -> None:
        """Add keys known only at the end (why it stopped, ...) to a ``running`` run's
        config, in one transaction; existing keys of ``updates`` are replaced."""

        def write(conn: sqlite3.Connection) -> None:
            self._require_running(conn, run_id)
            row = conn.execute("SELECT config FROM runs WHERE id = ?", (run_id,)).fetchone()
            config = {**(_loads(row[0]) or {}), **dict(updates)}
            conn.execute(
                "UPDATE runs SET config = ? WHERE id = ?",
                (_dumps(config, canonical=False), run_id),
            )

        self._write(write)


def _is_notadb(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return (code & 0xFF) == 26  # SQLITE_NOTADB
    return "not a database" in str(exc).lower()


def read_store(path: str | os.PathLike[str] | None = None) -> ResultsStore:
    """The existing store at ``path`` (the default store when ``None``) opened for the
    commands that only read it (``d5 results``, ``d5 report``): a missing file is an
    error, never created."""
    return ResultsStore.open(path, create=False)
