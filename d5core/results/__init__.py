"""The results store: runs, raw samples, summaries and environments, in an SQLite file
or a PostgreSQL database.

Open it with :meth:`ResultsStore.open`; the default file is described in
:mod:`d5core.results.paths` and ``docs/results.md``. A URL
``postgresql://user@host:port/dbname`` (``--db`` or ``D5_DB``) selects PostgreSQL.
"""

from __future__ import annotations

from d5core.results.paths import DB_ENV_VAR, default_db_path, resolve_db, resolve_db_path
from d5core.results.run_documents import RUN_FORMAT
from d5core.results.schema import SCHEMA_VERSION
from d5core.results.store import (
    BUSY_TIMEOUT_S,
    FINAL_STATUSES,
    RUN_STATUSES,
    MeasurementRecord,
    MetricRecord,
    ResultsStore,
    RunRecord,
    StoredMeasurement,
    StoredRun,
    read_store,
)

__all__ = [
    "BUSY_TIMEOUT_S",
    "DB_ENV_VAR",
    "FINAL_STATUSES",
    "RUN_FORMAT",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "MeasurementRecord",
    "MetricRecord",
    "ResultsStore",
    "RunRecord",
    "StoredMeasurement",
    "StoredRun",
    "default_db_path",
    "read_store",
    "resolve_db",
    "resolve_db_path",
]
