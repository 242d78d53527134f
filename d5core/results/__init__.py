"""The results store: runs, raw samples, summaries and environments in one SQLite file.

Open it with :meth:`ResultsStore.open`; the default file is described in
:mod:`d5core.results.paths` and ``docs/results.md``.
"""

from __future__ import annotations

from d5core.results.paths import DB_ENV_VAR, default_db_path, resolve_db_path
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
)

__all__ = [
    "BUSY_TIMEOUT_S",
    "DB_ENV_VAR",
    "FINAL_STATUSES",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "MeasurementRecord",
    "MetricRecord",
    "ResultsStore",
    "RunRecord",
    "StoredMeasurement",
    "StoredRun",
    "default_db_path",
    "resolve_db_path",
]
