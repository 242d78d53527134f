"""The results store: every run, its raw samples, summaries and environment.

Two databases hold a store, behind one interface (:class:`ResultsStore`):

- SQLite, the default: one file that several processes (ranks, parallel benchmark
  sessions, runs from different virtualenvs) write at once, that survives a killed
  process, and that any tool can read (:mod:`d5core.results.sqlite_backend`);
- PostgreSQL, for teams and clusters: ``--db postgresql://user@host:port/dbname``
  (:mod:`d5core.teamstore.postgres_backend`, opened through the ``d5_results_backend`` hook).

Both hold the same schema (:mod:`d5core.results.schema`); the SQL here is the one both
accept, and what differs lives in the backend (:mod:`d5core.results.backend`).

Durability: beginning a run, adding a measurement (with all its samples), adding a
metric and finishing a run are each one committed transaction. Killing the process at
any moment loses at most the write in progress, never a finished run, and never leaves
half a measurement. A run left ``running`` by a process that no longer exists on this
host reads back as ``incomplete`` (and is marked so when a store is opened); on
PostgreSQL, so does a run of another host whose writer no longer holds its lock.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import os
import socket
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
from d5core.results.backend import StoreBackend
from d5core.results.load import LoadAverage, current_load
from d5core.results.paths import redact_url, resolve_db
from d5core.results.run_documents import RUN_FORMAT, CheckedRun, check_artifact_name
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


def _url_backend(
    url: str, *, create: bool, manager: PluginManager | None, timeout_s: float
) -> StoreBackend:
    """The backend the plugins open for a database URL (``d5_results_backend``)."""
    if manager is None:
        from d5core.plugins import get_plugin_manager

        manager = get_plugin_manager()
    backend = manager.hook.d5_results_backend(url=url, create=create, timeout_s=timeout_s)
    if backend is None:
        scheme = url.split("://", 1)[0]
        raise UsageError(
            f"unsupported database URL {redact_url(url)!r}: d5 stores results in SQLite "
            f"files and PostgreSQL databases (postgresql://user@host:port/dbname), and no "
            f"installed plugin opens {scheme!r} URLs"
        )
    if not isinstance(backend, StoreBackend):
        raise UsageError(
            f"the plugin that opened {redact_url(url)!r} returned "
            f"{type(backend).__name__}, not a StoreBackend; report it to that plugin"
        )
    return backend


# -- the store -----------------------------------------------------------------


class ResultsStore:
    """A handle on one results database; open it with :meth:`open`.

    Use it as a context manager, or call :meth:`close`. A handle belongs to the thread
    that opened it; processes each open their own.
    """

    def __init__(
        self,
        db: StoreBackend,
        *,
        manager: PluginManager | None = None,
        timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        self._db = db
        #: The connection the SQL runs on (``?`` placeholders on both backends).
        self._conn: Any = db.conn
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

        :param path: the database file, or a PostgreSQL URL
            ``postgresql://user@host:port/dbname``; see
            :func:`d5core.results.paths.resolve_db` for the default.
        :param create: create the file (and its directories) when it does not exist;
            with ``False`` a missing file is a :class:`UsageError`. A PostgreSQL
            database must exist; an empty one gets the schema, or with ``False`` is a
            :class:`UsageError` too.
        :param manager: the plugin manager whose ``d5_result_stored`` hooks are called
            and whose environment hooks fill environments captured by :meth:`begin_run`;
            the process-wide one by default.
        :param timeout_s: how long to wait for another writer's lock.
        :raises UsageError: when the file or database is not a d5 results database (it
            is left untouched), was written by a newer d5, or cannot be opened (a bad
            URL, an unreachable server, failed authentication).
        """
        target = resolve_db(path)
        backend: StoreBackend
        if isinstance(target, str):
            backend = _url_backend(target, create=create, manager=manager, timeout_s=timeout_s)
        else:
            from d5core.results.sqlite_backend import SqliteBackend

            backend = SqliteBackend.open(target, create=create, timeout_s=timeout_s)
        store = cls(backend, manager=manager, timeout_s=timeout_s)
        try:
            store._prepare()
        except BaseException:
            backend.close()
            raise
        return store

    @property
    def path(self) -> Path:
        """The database file of an SQLite store; messages use :attr:`location`.

        :raises UsageError: for a PostgreSQL store, which has no file.
        """
        path = self._db.path
        if path is None:
            raise UsageError(f"the results database {self.location} is not a file")
        return path

    @property
    def location(self) -> str:
        """Where the store is, as messages name it: the file path, or the URL with any
        password replaced by ``***``."""
        return self._db.location

    @property
    def backend(self) -> str:
        """The database behind the store: ``"sqlite"`` or ``"postgresql"``."""
        return self._db.name

    def close(self) -> None:
        """Close the connection; finished writes are already stored."""
        self._db.close()

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

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """Read in one transaction, so that every query sees one state of the store."""
        conn = self._conn
        if conn.in_transaction:
            yield
            return
        conn.execute(self._db.begin_read)
        try:
            yield
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    def _write(self, body: Callable[[Any], _T]) -> _T:
        """Run ``body(conn)`` in one write transaction of the backend and commit it;
        retried whole while the database asks to, and rolled back on any error."""
        return self._db.write(body)

    def _prepare(self) -> None:
        self._db.prepare()
        self._mark_dead_runs_incomplete()

    def _writer_gone(self, run_id: str, host: str | None, pid: int | None, started: Any) -> bool:
        """Whether the process writing a ``running`` run is known to have ended: by its
        pid and start time for a run of this host; by the backend (PostgreSQL's
        advisory lock) for a run of another host."""
        if host == self._host:
            return pid is not None and not _process_alive(int(pid), started)
        return self._db.writer_gone_elsewhere(run_id)

    def _mark_dead_runs_incomplete(self) -> None:
        """Persist ``incomplete`` for runs whose writing process has ended."""
        rows = self._conn.execute(
            "SELECT id, pid, proc_started, hostname FROM runs WHERE status = 'running'"
        ).fetchall()
        dead = [
            (run_id, pid, host)
            for run_id, pid, started, host in rows
            if self._writer_gone(run_id, host, pid, started)
        ]
        if not dead:
            return

        def mark(c: Any) -> None:
            for run_id, pid, host in dead:
                c.execute(
                    "UPDATE runs SET status = 'incomplete', error = ? "
                    "WHERE id = ? AND status = 'running'",
                    (self._dead_message(pid, host), run_id),
                )

        try:
            self._write(mark)
        except UsageError as exc:
            _log.debug("could not mark dead runs incomplete: %s", exc)
        except Exception as exc:
            if not self._db.is_transient(exc):
                raise
            # A read-only or busy database: reads still report these runs as incomplete.
            _log.debug("could not mark dead runs incomplete: %s", exc)

    def _dead_message(self, pid: int | None, host: str | None = None) -> str:
        where = self._host if host is None else host
        return f"its process (pid {pid} on {where}) ended before the run was finished"

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

        held: list[str] = []

        def write(conn: Any) -> str:
            conn.execute(
                "INSERT INTO environments (hash, fingerprint, data) VALUES (?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (env_hash, fingerprint, env_data),
            )
            env_id = conn.execute(
                "SELECT id FROM environments WHERE hash = ?", (env_hash,)
            ).fetchone()[0]
            while True:
                run_id = uuid.uuid4().hex[:_ID_LENGTH]
                # Held before the row is visible: a reader never sees the run running
                # without its writer's mark (PostgreSQL's advisory lock).
                if not self._db.hold_run(run_id):
                    continue  # another live process writes a run of this id
                held.append(run_id)
                added = conn.execute(
                    "INSERT INTO runs (id, kind, name, status, created, pid, hostname, "
                    "proc_started, seed, recipe_hash, config, context, load_start, "
                    "environment_id) "
                    "VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT DO NOTHING RETURNING id",
                    (run_id, *row, env_id),
                ).fetchone()
                if added is None:
                    continue  # an id already taken: draw another
                conn.executemany(
                    "INSERT INTO run_tags (run_id, tag) VALUES (?, ?)",
                    [(run_id, tag) for tag in run_tags],
                )
                return run_id

        try:
            run_id = self._write(write)
        except BaseException:
            for unused in held:
                self._release(unused)
            raise
        for unused in held:
            if unused != run_id:
                self._release(unused)
        return run_id

    def _release(self, run_id: str) -> None:
        """Drop this process's mark on ``run_id`` (best effort: the mark goes with the
        process anyway)."""
        try:
            self._db.release_run(run_id)
        except Exception as exc:
            _log.debug("could not release run %s: %s", run_id, exc)

    def _require_running(self, conn: Any, run_id: str) -> None:
        found = conn.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
        if found is None:
            raise UsageError(f"no run {run_id!r} in {self.location}")
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

        def write(conn: Any) -> int:
            self._require_running(conn, run_id)
            (mid,) = conn.execute(
                "INSERT INTO measurements (run_id, metric, labels, unit, n, summary, blocked, "
                "block_size, warmup_runs, stopped_by, details, better) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (
                    run_id,
                    metric,
                    labels_json,
                    unit,
                    len(values),
                    summary_text,
                    None if blocked is None else int(blocked),
                    block_size,
                    warmup,
                    stopped_by,
                    details_text,
                    direction,
                ),
            ).fetchone()
            mid = int(mid)
            self._db.insert_samples(conn, mid, 0, [_float_or_none(v) for v in values], owners)
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

        def write(conn: Any) -> int:
            self._require_running(conn, run_id)
            (kid,) = conn.execute(
                "INSERT INTO run_metrics (run_id, name, labels, value, unit, better) "
                "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                (run_id, name, labels_json, _float_or_none(number), unit, direction),
            ).fetchone()
            return int(kid)

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

        def write(conn: Any) -> None:
            self._require_running(conn, run_id)
            conn.execute(
                "UPDATE runs SET status = ?, finished = ?, error = ?, load_end = ? WHERE id = ?",
                (status, _now(), error, load_end, run_id),
            )

        self._write(write)
        self._release(run_id)
        self._notify_stored(run_id)

    def _notify_stored(self, run_id: str) -> None:
        manager = self._manager
        if manager is None:
            from d5core.plugins import get_plugin_manager

            manager = get_plugin_manager()
        # a plugin that raises is left out and warned about by the manager
        manager.hook.d5_result_stored(run_id=run_id, database=self.location)

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

    @property
    def _RUN_COLUMNS(self) -> str:
        return (
            "r.id, r.kind, r.name, r.status, r.created, r.finished, r.pid, r.hostname, "
            "r.proc_started, r.seed, r.recipe_hash, r.config, r.environment_id, "
            "e.fingerprint, r.error, "
            "(SELECT count(*) FROM measurements m WHERE m.run_id = r.id), "
            "(SELECT count(*) FROM run_metrics k WHERE k.run_id = r.id), "
            "r.load_start, r.load_end, " + self._db.tags_array
        )

    _RUN_FROM = "FROM runs r LEFT JOIN environments e ON e.id = r.environment_id"

    def _run_record(self, row: Sequence[Any]) -> RunRecord:
        rid, kind, name, status, created, finished, pid, host, started = row[:9]
        seed, recipe, config, env_id, fingerprint, error, n_meas, n_metrics = row[9:17]
        load_start, load_end = (LoadAverage.from_json(_loads(text)) for text in row[17:19])
        tags = tuple(sorted(_loads(row[19]) or ()))
        if status == "running" and self._writer_gone(rid, host, pid, started):
            status, error = "incomplete", error or self._dead_message(pid, host)
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
        sql += f" ORDER BY r.created DESC, {self._db.insertion_order} DESC"
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
            base + " WHERE substr(r.id, 1, CAST(? AS INTEGER)) = ? ORDER BY r.created LIMIT 6",
            (len(prefix), prefix),
        ).fetchall()
        if not rows:
            raise UsageError(
                f"no run {prefix!r} in {self.location}; 'd5 results list' shows the runs"
            )
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

        def write(conn: Any) -> None:
            conn.executemany(
                "INSERT INTO run_tags (run_id, tag) VALUES (?, ?) ON CONFLICT DO NOTHING",
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
        self._conn.execute(self._db.begin_read)  # one snapshot for every query below
        try:
            self._conn.execute("CREATE TEMP TABLE IF NOT EXISTS _wanted (id TEXT PRIMARY KEY)")
            self._conn.execute("DELETE FROM _wanted")
            self._conn.executemany(
                "INSERT INTO _wanted (id) VALUES (?) ON CONFLICT DO NOTHING", [(i,) for i in ids]
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
        self._db.require_writable()

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

        def write(conn: Any) -> None:
            self._require_running(conn, run_id)
            for mid, values in samples.items():
                row = conn.execute(
                    "SELECT n FROM measurements WHERE id = ? AND run_id = ?", (int(mid), run_id)
                ).fetchone()
                if row is None:
                    raise UsageError(f"run {run_id} has no measurement {mid}")
                start = int(row[0])
                self._db.insert_samples(
                    conn, int(mid), start, [_float_or_none(v) for v in values], owners[int(mid)]
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

        def write(conn: Any) -> None:
            self._require_running(conn, run_id)
            row = conn.execute("SELECT config FROM runs WHERE id = ?", (run_id,)).fetchone()
            config = {**(_loads(row[0]) or {}), **dict(updates)}
            conn.execute(
                "UPDATE runs SET config = ? WHERE id = ?",
                (_dumps(config, canonical=False), run_id),
            )

        self._write(write)

    # -- artifacts -------------------------------------------------------------------

    def add_artifact(self, run_id: str, name: str, data: bytes) -> None:
        """Keep a file with a run (a log, a trace), in the database, in one transaction.

        :param run_id: the run's full id; the run may be running or finished (keeping a
            file changes none of its results).
        :param name: a file name, or a relative path with ``/``
            (``numpy/mlperf_log_summary.txt``), unique within the run
            (:func:`d5core.results.run_documents.check_artifact_name`).
        :raises UsageError: for an unknown run, a bad name, or a name the run already
            has (an artifact is never replaced).
        """
        check_artifact_name(name)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise UsageError(f"artifact {name!r} needs bytes, got {type(data).__name__}")
        content = bytes(data)
        digest = hashlib.sha256(content).hexdigest()

        def write(conn: Any) -> None:
            if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                raise UsageError(f"no run {run_id!r} in {self.location}")
            added = conn.execute(
                "INSERT INTO artifacts (run_id, name, sha256, data) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING RETURNING name",
                (run_id, name, digest, content),
            ).fetchone()
            if added is None:
                raise UsageError(
                    f"run {run_id} already keeps an artifact {name!r}; an artifact is never "
                    "replaced: give the new one another name"
                )

        self._write(write)

    def artifact_names(self, run_id: str) -> list[str]:
        """The names of the files kept with a run, sorted."""
        run = self.get_run(run_id)
        rows = self._conn.execute(
            "SELECT name FROM artifacts WHERE run_id = ? ORDER BY name", (run.id,)
        )
        return [str(name) for (name,) in rows]

    def read_artifact(self, run_id: str, name: str) -> bytes:
        """The bytes of the file ``name`` kept with a run.

        :raises UsageError: naming the run's artifacts when it keeps no such file.
        """
        run = self.get_run(run_id)
        row = self._conn.execute(
            "SELECT data FROM artifacts WHERE run_id = ? AND name = ?", (run.id, name)
        ).fetchone()
        if row is None:
            kept = self.artifact_names(run.id)
            shown = ", ".join(kept) if kept else "none"
            raise UsageError(f"run {run.id} keeps no artifact {name!r} (it keeps: {shown})")
        return bytes(row[0])

    # -- moving runs between stores ------------------------------------------------

    def export_run(self, run_id: str) -> dict[str, Any]:
        """One run as a self-contained transfer document (format ``d5-run/1``, see
        :mod:`d5core.results.run_documents`), read in one snapshot.

        :raises UsageError: for an unknown run.
        """
        with self._snapshot():
            run = self.get_run(run_id)
            raw = self._conn.execute(
                "SELECT proc_started, load_start, load_end FROM runs WHERE id = ?", (run.id,)
            ).fetchone()
            row = self._conn.execute(
                "SELECT e.data, r.context FROM runs r LEFT JOIN environments e "
                "ON e.id = r.environment_id WHERE r.id = ?",
                (run.id,),
            ).fetchone()
            environment = _joined_environment(row[0], row[1])
            measurements = [
                _measurement_record(m)
                for m in self._conn.execute(
                    f"SELECT {_MEASUREMENT_COLUMNS} FROM measurements WHERE run_id = ? ORDER BY id",
                    (run.id,),
                ).fetchall()
            ]
            samples: dict[int, list[tuple[float | None, int | None]]] = {}
            for mid, value, process in self._conn.execute(
                "SELECT s.measurement_id, s.value, s.process FROM samples s "
                "JOIN measurements m ON m.id = s.measurement_id WHERE m.run_id = ? "
                "ORDER BY s.measurement_id, s.idx",
                (run.id,),
            ):
                samples.setdefault(int(mid), []).append(
                    (
                        None if value is None or math.isnan(value) else float(value),
                        None if process is None else int(process),
                    )
                )
            metrics = [
                _metric_record(k)
                for k in self._conn.execute(
                    f"SELECT {_METRIC_COLUMNS} FROM run_metrics WHERE run_id = ? ORDER BY id",
                    (run.id,),
                ).fetchall()
            ]
            artifacts = [
                {
                    "name": str(name),
                    "sha256": str(digest),
                    "data_base64": base64.b64encode(bytes(data)).decode("ascii"),
                }
                for name, digest, data in self._conn.execute(
                    "SELECT name, sha256, data FROM artifacts WHERE run_id = ? ORDER BY name",
                    (run.id,),
                )
            ]
        run_json = {
            "run_id": run.id,
            "kind": run.kind,
            "name": run.name,
            "status": run.status,
            "created": run.created,
            "finished": run.finished,
            "pid": run.pid,
            "hostname": run.hostname,
            "proc_started": None if raw[0] is None else float(raw[0]),
            "seed": run.seed,
            "recipe_hash": run.recipe_hash,
            "config": run.config,
            "error": run.error,
            "load_start": _loads(raw[1]),
            "load_end": _loads(raw[2]),
            "tags": sorted(run.tags),
            "fingerprint": run.fingerprint,
        }
        return {
            "format": RUN_FORMAT,
            "run": run_json,
            "environment": environment,
            "measurements": [
                {
                    "metric": m.metric,
                    "labels": m.labels,
                    "unit": m.unit,
                    "n": m.n,
                    "summary": m.summary,
                    "blocked": m.blocked,
                    "block_size": m.block_size,
                    "warmup_runs": m.warmup_runs,
                    "stopped_by": m.stopped_by,
                    "details": m.details,
                    "better": m.better,
                    "samples": [v for v, _ in samples.get(m.id, [])],
                    "processes": [p for _, p in samples.get(m.id, [])],
                }
                for m in measurements
            ],
            "metrics": [
                {
                    "name": k.name,
                    "labels": k.labels,
                    "value": _float_or_none(k.value),
                    "unit": k.unit,
                    "better": k.better,
                }
                for k in metrics
            ],
            "artifacts": artifacts,
        }

    def import_run(self, doc: CheckedRun) -> bool:
        """Write a run exactly as another store held it (same id, status, times,
        environment, measurements, metrics, tags and artifacts), in one transaction. Its
        environment is stored once per distinct content, as :meth:`begin_run` does.

        :param doc: a document of :meth:`export_run`, checked field by field
            (:func:`d5core.teamstore.documents.check_run_document`, which
            :func:`~d5core.teamstore.documents.import_document` calls before this).
        :return: ``True`` when the run was written; ``False`` (and nothing written) when
            the store already holds a run with its id.
        """
        run = doc.run
        shared, own = _split_environment(doc.environment)
        env_data = _dumps(shared)
        env_hash = hashlib.sha256(env_data.encode()).hexdigest()
        keep_environment = bool(shared) or run["fingerprint"] is not None

        def write(conn: Any) -> bool:
            if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run["run_id"],)).fetchone():
                return False
            env_id = None
            if keep_environment:
                conn.execute(
                    "INSERT INTO environments (hash, fingerprint, data) VALUES (?, ?, ?) "
                    "ON CONFLICT DO NOTHING",
                    (env_hash, environment_fingerprint(shared), env_data),
                )
                env_id = conn.execute(
                    "SELECT id FROM environments WHERE hash = ?", (env_hash,)
                ).fetchone()[0]
            conn.execute(
                "INSERT INTO runs (id, kind, name, status, created, finished, pid, hostname, "
                "proc_started, seed, recipe_hash, config, environment_id, context, error, "
                "load_start, load_end) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run["run_id"],
                    run["kind"],
                    run["name"],
                    run["status"],
                    run["created"],
                    run["finished"],
                    run["pid"],
                    run["hostname"],
                    run["proc_started"],
                    None if run["seed"] is None else str(run["seed"]),
                    run["recipe_hash"],
                    _dumps(run["config"], canonical=False),
                    env_id,
                    _dumps(own),
                    run["error"],
                    None
                    if run["load_start"] is None
                    else _dumps(run["load_start"], canonical=False),
                    None if run["load_end"] is None else _dumps(run["load_end"], canonical=False),
                ),
            )
            for m in doc.measurements:
                mid = conn.execute(
                    "INSERT INTO measurements (run_id, metric, labels, unit, n, summary, "
                    "blocked, block_size, warmup_runs, stopped_by, details, better) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                    (
                        run["run_id"],
                        m.metric,
                        _dumps(m.labels),
                        m.unit,
                        m.n,
                        None if m.summary is None else _dumps(m.summary, canonical=False),
                        None if m.blocked is None else int(m.blocked),
                        m.block_size,
                        m.warmup_runs,
                        m.stopped_by,
                        _dumps(m.details, canonical=False),
                        m.better,
                    ),
                ).fetchone()[0]
                self._db.insert_samples(conn, int(mid), 0, m.samples, m.processes)
            conn.executemany(
                "INSERT INTO run_metrics (run_id, name, labels, value, unit, better) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (run["run_id"], k.name, _dumps(k.labels), k.value, k.unit, k.better)
                    for k in doc.metrics
                ],
            )
            conn.executemany(
                "INSERT INTO run_tags (run_id, tag) VALUES (?, ?)",
                [(run["run_id"], tag) for tag in doc.tags],
            )
            conn.executemany(
                "INSERT INTO artifacts (run_id, name, sha256, data) VALUES (?, ?, ?, ?)",
                [(run["run_id"], a.name, a.sha256, a.data) for a in doc.artifacts],
            )
            return True

        return bool(self._write(write))


def read_store(path: str | os.PathLike[str] | None = None) -> ResultsStore:
    """The existing store at ``path`` (a file or a PostgreSQL URL; the default store
    when ``None``) opened for the commands that only read it (``d5 results``,
    ``d5 report``): a missing file is an error, never created."""
    return ResultsStore.open(path, create=False)
