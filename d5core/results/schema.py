"""The results database's tables and the ordered migrations that build them.

SQLite: the schema version lives in ``PRAGMA user_version``; the file is marked as a
d5 database by ``PRAGMA application_id``. A migration is a list of single statements
(not a script: ``executescript`` would commit the surrounding transaction), applied in
order inside the one ``BEGIN IMMEDIATE`` transaction that also sets ``user_version``,
so a failed or interrupted upgrade leaves the file at its old version.

Another database (PostgreSQL, :mod:`d5core.teamstore.postgres_schema`) versions the
same tables with migrations of the same numbers, written in its own dialect: a change
here is made there too, under the same version.

Append migrations; never edit one that has been released.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from d5core.errors import UsageError

__all__ = [
    "APPLICATION_ID",
    "APPLICATION_MARKER",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Migration",
    "apply_migrations",
    "check_version",
    "latest_version",
    "pending_migrations",
]

#: ``PRAGMA application_id`` of a d5 results database: the bytes ``b"d5rs"``.
APPLICATION_ID = int.from_bytes(b"d5rs", "big")
#: How a d5 results database names itself where there is no ``application_id``
#: (PostgreSQL's ``d5_schema.application``).
APPLICATION_MARKER = "d5rs"


@dataclass(frozen=True)
class Migration:
    """One step of the schema: the statements that take version ``version - 1`` to it."""

    version: int
    description: str
    statements: tuple[str, ...]


_STATUSES = "('running', 'complete', 'failed', 'diverged', 'incomplete')"
#: Since version 3: a run ended early by SIGINT or SIGTERM is ``interrupted``.
_STATUSES_V3 = "('running', 'complete', 'failed', 'diverged', 'incomplete', 'interrupted')"
_RUN_COLUMNS = (
    "id, kind, name, status, created, finished, pid, hostname, proc_started, seed, "
    "recipe_hash, config, environment_id, context, error, load_start, load_end"
)

#: Every migration, oldest first; the last one's version is :data:`SCHEMA_VERSION`.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "environments, runs, measurements, samples and scalar run metrics",
        (
            # One row per distinct environment; runs point at it.
            """CREATE TABLE environments (
                id          INTEGER PRIMARY KEY,
                hash        TEXT NOT NULL UNIQUE,
                fingerprint TEXT NOT NULL,
                data        TEXT NOT NULL
            )""",
            """CREATE TABLE runs (
                id             TEXT PRIMARY KEY,
                kind           TEXT NOT NULL,
                name           TEXT NOT NULL,
                status         TEXT NOT NULL CHECK (status IN """
            + _STATUSES
            + """),
                created        TEXT NOT NULL,
                finished       TEXT,
                pid            INTEGER,
                hostname       TEXT,
                proc_started   REAL,
                seed           TEXT,
                recipe_hash    TEXT,
                config         TEXT NOT NULL DEFAULT '{}',
                environment_id INTEGER REFERENCES environments (id),
                context        TEXT NOT NULL DEFAULT '{}',
                error          TEXT
            )""",
            "CREATE INDEX runs_by_created ON runs (created)",
            "CREATE INDEX runs_by_status ON runs (status)",
            """CREATE TABLE measurements (
                id          INTEGER PRIMARY KEY,
                run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
                metric      TEXT NOT NULL,
                labels      TEXT NOT NULL DEFAULT '{}',
                unit        TEXT NOT NULL,
                n           INTEGER NOT NULL,
                summary     TEXT,
                blocked     INTEGER,
                block_size  INTEGER,
                warmup_runs INTEGER,
                stopped_by  TEXT,
                details     TEXT NOT NULL DEFAULT '{}'
            )""",
            "CREATE INDEX measurements_by_run ON measurements (run_id)",
            # NULL stands for NaN, which SQLite cannot store as a REAL.
            """CREATE TABLE samples (
                measurement_id INTEGER NOT NULL REFERENCES measurements (id) ON DELETE CASCADE,
                idx            INTEGER NOT NULL,
                value          REAL,
                PRIMARY KEY (measurement_id, idx)
            ) WITHOUT ROWID""",
            """CREATE TABLE run_metrics (
                id     INTEGER PRIMARY KEY,
                run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
                name   TEXT NOT NULL,
                labels TEXT NOT NULL DEFAULT '{}',
                value  REAL,
                unit   TEXT NOT NULL DEFAULT ''
            )""",
            "CREATE INDEX run_metrics_by_run ON run_metrics (run_id)",
        ),
    ),
    Migration(
        2,
        "which direction is better for each measurement and metric; the load average "
        "when a run begins and ends",
        (
            # NULL: not recorded (older runs) or no better direction; readers then judge
            # by the name and unit (d5core.metrics.directions.better_of).
            "ALTER TABLE measurements ADD COLUMN better TEXT CHECK (better IN ('lower', 'higher'))",
            "ALTER TABLE run_metrics ADD COLUMN better TEXT CHECK (better IN ('lower', 'higher'))",
            # JSON of d5core.results.load.LoadAverage; NULL where it was not recorded.
            "ALTER TABLE runs ADD COLUMN load_start TEXT",
            "ALTER TABLE runs ADD COLUMN load_end TEXT",
        ),
    ),
    Migration(
        3,
        "a run's status may be 'interrupted'",
        (
            # SQLite cannot change a CHECK constraint in place: the table is rebuilt (the
            # store turns foreign keys off around migrations, so dropping the old table
            # does not cascade to the measurements that point at it).
            """CREATE TABLE runs_v3 (
                id             TEXT PRIMARY KEY,
                kind           TEXT NOT NULL,
                name           TEXT NOT NULL,
                status         TEXT NOT NULL CHECK (status IN """
            + _STATUSES_V3
            + """),
                created        TEXT NOT NULL,
                finished       TEXT,
                pid            INTEGER,
                hostname       TEXT,
                proc_started   REAL,
                seed           TEXT,
                recipe_hash    TEXT,
                config         TEXT NOT NULL DEFAULT '{}',
                environment_id INTEGER REFERENCES environments (id),
                context        TEXT NOT NULL DEFAULT '{}',
                error          TEXT,
                load_start     TEXT,
                load_end       TEXT
            )""",
            f"INSERT INTO runs_v3 ({_RUN_COLUMNS}) SELECT {_RUN_COLUMNS} FROM runs",
            "DROP TABLE runs",
            "ALTER TABLE runs_v3 RENAME TO runs",
            "CREATE INDEX runs_by_created ON runs (created)",
            "CREATE INDEX runs_by_status ON runs (status)",
        ),
    ),
    Migration(
        4,
        "which worker process took each sample",
        (
            # The round (0, 1, ...) of the fresh worker process that took the sample, the
            # unit of independence; NULL where one process took them all or it is unknown.
            "ALTER TABLE samples ADD COLUMN process INTEGER",
        ),
    ),
    Migration(
        5,
        "tags on runs",
        (
            # A run's tags (``d5 bench --tag NAME``, ``d5 run --tag NAME``), which
            # ``d5 report --tag NAME`` and ``d5 results list --tag NAME`` select by.
            """CREATE TABLE run_tags (
                run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
                tag    TEXT NOT NULL,
                PRIMARY KEY (run_id, tag)
            ) WITHOUT ROWID""",
            "CREATE INDEX run_tags_by_tag ON run_tags (tag)",
        ),
    ),
    Migration(
        6,
        "artifacts: files kept with a run, in the database",
        (
            # A file a run keeps (LoadGen's logs, ...), named within its run; its bytes
            # in ``data`` and their SHA-256 in hex, so that copies can be checked.
            """CREATE TABLE artifacts (
                run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
                name   TEXT NOT NULL,
                sha256 TEXT NOT NULL,
                data   BLOB NOT NULL,
                PRIMARY KEY (run_id, name)
            ) WITHOUT ROWID""",
        ),
    ),
)


def latest_version(migrations: Sequence[Migration] | None = None) -> int:
    """The version a database has once every migration in ``migrations`` is applied."""
    steps = MIGRATIONS if migrations is None else migrations
    return steps[-1].version if steps else 0


#: The schema version this d5core writes.
SCHEMA_VERSION = latest_version()


def check_version(found: int, path: str, migrations: Sequence[Migration] | None = None) -> None:
    """Refuse a database whose schema is newer than this code knows.

    :raises UsageError: naming both versions, so the user knows to upgrade d5core.
    """
    latest = latest_version(migrations)
    if found > latest:
        from d5core._version import __version__

        raise UsageError(
            f"{path} has results schema version {found}, but d5core {__version__} reads "
            f"versions up to {latest}; upgrade d5core to read it"
        )


def pending_migrations(
    found: int, migrations: Sequence[Migration] | None = None
) -> list[Migration]:
    """The migrations still to apply to a database at version ``found``, in order."""
    steps = MIGRATIONS if migrations is None else migrations
    return [m for m in steps if m.version > found]


def apply_migrations(conn: sqlite3.Connection, steps: Sequence[Migration]) -> None:
    """Run ``steps`` and record the new version; the caller holds the transaction."""
    for step in steps:
        for statement in step.statements:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {int(step.version)}")
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
