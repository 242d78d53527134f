"""A run as it moves between stores: format ``d5-run/1``.

:meth:`d5core.results.ResultsStore.export_run` writes a run as one JSON object
holding everything stored about it and no local ids (measurement ids, environment
ids), so that it can be written into any store::

    {"format": "d5-run/1",
     "run": {"run_id", "kind", "name", "status", "created", "finished", "pid",
             "hostname", "proc_started", "seed", "recipe_hash", "config", "error",
             "load_start", "load_end", "tags", "fingerprint"},
     "environment": {...},
     "measurements": [{"metric", "labels", "unit", "n", "summary", "blocked",
                       "block_size", "warmup_runs", "stopped_by", "details", "better",
                       "samples", "processes"}],
     "metrics": [{"name", "labels", "value", "unit", "better"}],
     "artifacts": [{"name", "sha256", "data_base64"}]}

NaN samples and metric values are ``null``. :meth:`~d5core.results.ResultsStore.import_run`
writes a :class:`CheckedRun` back: a document checked field by field by
:func:`d5core.teamstore.documents.check_run_document` (the team store's internal
plugin reads and writes these documents).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from d5core.errors import UsageError

__all__ = [
    "RUN_FORMAT",
    "CheckedArtifact",
    "CheckedMeasurement",
    "CheckedMetric",
    "CheckedRun",
    "check_artifact_name",
]

#: The ``format`` of the documents this d5core writes and reads.
RUN_FORMAT = "d5-run/1"


@dataclass(frozen=True)
class CheckedMeasurement:
    """One measurement of a checked document, ready to store."""

    metric: str
    labels: dict[str, Any]
    unit: str
    n: int
    summary: dict[str, Any] | None
    blocked: bool | None
    block_size: int | None
    warmup_runs: int | None
    stopped_by: str | None
    details: dict[str, Any]
    better: str | None
    #: ``None`` stands for NaN, as in the document and the database.
    samples: tuple[float | None, ...]
    processes: tuple[int | None, ...]


@dataclass(frozen=True)
class CheckedMetric:
    """One scalar metric of a checked document (``value`` ``None``: NaN)."""

    name: str
    labels: dict[str, Any]
    value: float | None
    unit: str
    better: str | None


@dataclass(frozen=True)
class CheckedArtifact:
    """One artifact of a checked document, its bytes decoded and their hash verified."""

    name: str
    sha256: str
    data: bytes


@dataclass(frozen=True)
class CheckedRun:
    """A whole checked document."""

    run: dict[str, Any]
    tags: tuple[str, ...]
    environment: dict[str, Any]
    measurements: tuple[CheckedMeasurement, ...]
    metrics: tuple[CheckedMetric, ...]
    artifacts: tuple[CheckedArtifact, ...]


def check_artifact_name(name: object) -> str:
    """``name`` if it can name an artifact: a relative path of plain names joined by
    ``/`` (``numpy/peak/run-01/mlperf_log_summary.txt``), at most 1024 characters;
    no part empty, ``.`` or ``..``, and no ``\\``, NUL or line break anywhere. Such a
    name can be written under any folder without leaving it.

    :raises UsageError: naming what is wrong.
    """
    if not isinstance(name, str) or not name:
        raise UsageError(f"an artifact needs a file name, got {name!r}")
    parts = name.split("/")
    if (
        len(name) > 1024
        or any(c in name for c in "\\\0\n\r")
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise UsageError(
            f"artifact name {name[:60]!r} must be a relative path of plain names joined by "
            "'/' (no empty, '.' or '..' part, no '\\', NUL or line break, at most 1024 "
            "characters)"
        )
    return name
