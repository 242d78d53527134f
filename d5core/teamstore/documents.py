"""Checking a ``d5-run/1`` document (:mod:`d5core.results.run_documents`) before it is
written: a malformed one is a one-line :class:`~d5core.errors.UsageError` naming the
field, and nothing is stored."""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from d5core.errors import UsageError
from d5core.results.run_documents import (
    RUN_FORMAT,
    CheckedArtifact,
    CheckedMeasurement,
    CheckedMetric,
    CheckedRun,
    check_artifact_name,
)

if TYPE_CHECKING:
    from d5core.results.store import ResultsStore

__all__ = ["check_run_document", "import_document"]

_STATUSES = ("running", "complete", "failed", "diverged", "incomplete", "interrupted")
_MISSING = object()


def _bad(field: str, what: str) -> UsageError:
    return UsageError(f"malformed run document: {field} {what}")


def _field(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _get(obj: Mapping[str, Any], key: str, where: str) -> Any:
    value = obj.get(key, _MISSING)
    if value is _MISSING:
        raise _bad(_field(where, key), "is missing")
    return value


def _text(obj: Mapping[str, Any], key: str, where: str, *, optional: bool = False) -> str | None:
    value = _get(obj, key, where)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        kind = "a string or null" if optional else "a string"
        raise _bad(_field(where, key), f"must be {kind}, got {value!r:.60}")
    return value


def _integer(obj: Mapping[str, Any], key: str, where: str, *, optional: bool = True) -> int | None:
    value = _get(obj, key, where)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(_field(where, key), f"must be an integer or null, got {value!r:.60}")
    return value


def _number(value: Any, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(field, f"must be a number or null, got {value!r:.60}")
    number = float(value)
    return None if math.isnan(number) else number


def _object(obj: Mapping[str, Any], key: str, where: str, *, optional: bool = False) -> Any:
    value = _get(obj, key, where)
    if value is None and optional:
        return None
    if not isinstance(value, dict):
        raise _bad(_field(where, key), f"must be an object, got {value!r:.60}")
    return value


def _better(obj: Mapping[str, Any], where: str) -> str | None:
    value = obj.get("better")
    if value not in (None, "lower", "higher"):
        raise _bad(f"{where}.better", f"must be 'lower', 'higher' or null, got {value!r:.60}")
    return value


def _list(obj: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = _get(obj, key, where)
    if not isinstance(value, list):
        raise _bad(_field(where, key), f"must be a list, got {value!r:.60}")
    return value


def _measurement(item: Any, where: str) -> CheckedMeasurement:
    if not isinstance(item, dict):
        raise _bad(where, "must be an object")
    samples = _list(item, "samples", where)
    values = tuple(_number(v, f"{where}.samples[{i}]") for i, v in enumerate(samples))
    owners = _list(item, "processes", where)
    if len(owners) != len(values):
        raise _bad(
            f"{where}.processes",
            f"must give one entry per sample ({len(values)}), not {len(owners)}",
        )
    for i, p in enumerate(owners):
        if p is not None and (isinstance(p, bool) or not isinstance(p, int) or p < 0):
            raise _bad(
                f"{where}.processes[{i}]", f"must be a non-negative integer or null, got {p!r:.60}"
            )
    n = _integer(item, "n", where, optional=False)
    if n != len(values):
        raise _bad(f"{where}.n", f"is {n}, but the measurement has {len(values)} samples")
    blocked = _get(item, "blocked", where)
    if blocked is not None and not isinstance(blocked, bool):
        raise _bad(f"{where}.blocked", f"must be true, false or null, got {blocked!r:.60}")
    return CheckedMeasurement(
        metric=str(_text(item, "metric", where)),
        labels=_object(item, "labels", where),
        unit=str(_text(item, "unit", where)),
        n=n,
        summary=_object(item, "summary", where, optional=True),
        blocked=blocked,
        block_size=_integer(item, "block_size", where),
        warmup_runs=_integer(item, "warmup_runs", where),
        stopped_by=_text(item, "stopped_by", where, optional=True),
        details=_object(item, "details", where),
        better=_better(item, where),
        samples=values,
        processes=tuple(owners),
    )


def _metric(item: Any, where: str) -> CheckedMetric:
    if not isinstance(item, dict):
        raise _bad(where, "must be an object")
    return CheckedMetric(
        name=str(_text(item, "name", where)),
        labels=_object(item, "labels", where),
        value=_number(_get(item, "value", where), f"{where}.value"),
        unit=str(_text(item, "unit", where)),
        better=_better(item, where),
    )


def _artifact(item: Any, where: str) -> CheckedArtifact:
    if not isinstance(item, dict):
        raise _bad(where, "must be an object")
    try:
        name = check_artifact_name(_get(item, "name", where))
    except UsageError as exc:
        raise _bad(f"{where}.name", f"is not a file name ({exc})") from None
    digest = str(_text(item, "sha256", where))
    encoded = str(_text(item, "data_base64", where))
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(f"{where}.data_base64", "is not base64") from None
    if hashlib.sha256(data).hexdigest() != digest.lower():
        raise _bad(f"{where}.sha256", "does not match the artifact's data")
    return CheckedArtifact(name=name, sha256=digest.lower(), data=data)


def check_run_document(document: Any) -> CheckedRun:
    """The document, checked field by field, with its parts ready to store.

    :raises UsageError: for a document of another format or version, or naming the
        first malformed field.
    """
    if not isinstance(document, dict):
        raise UsageError(
            f"malformed run document: expected a JSON object, got {type(document).__name__}"
        )
    fmt = document.get("format")
    if fmt != RUN_FORMAT:
        if isinstance(fmt, str) and fmt.startswith("d5-run/"):
            raise UsageError(
                f"run document of format {fmt!r}: this d5core reads {RUN_FORMAT!r}; "
                "upgrade d5core to import it"
            )
        raise _bad("format", f"must be {RUN_FORMAT!r}, got {fmt!r:.60}")
    run = _object(document, "run", "")
    run_id = _text(run, "run_id", "run")
    if not run_id or not run_id.strip() or len(run_id) > 200:
        raise _bad("run.run_id", "must be a non-empty id")
    status = _text(run, "status", "run")
    if status not in _STATUSES:
        raise _bad("run.status", f"must be one of {', '.join(_STATUSES)}, got {status!r:.60}")
    seed = _integer(run, "seed", "run")
    proc_started = _number(_get(run, "proc_started", "run"), "run.proc_started")
    tags = _list(run, "tags", "run")
    if not all(isinstance(t, str) and t for t in tags):
        raise _bad("run.tags", "must be a list of non-empty strings")
    for key in ("load_start", "load_end"):
        _object(run, key, "run", optional=True)
    checked_run = {
        "run_id": run_id,
        "kind": _text(run, "kind", "run"),
        "name": _text(run, "name", "run"),
        "status": status,
        "created": _text(run, "created", "run"),
        "finished": _text(run, "finished", "run", optional=True),
        "pid": _integer(run, "pid", "run"),
        "hostname": _text(run, "hostname", "run", optional=True),
        "proc_started": proc_started,
        "seed": seed,
        "recipe_hash": _text(run, "recipe_hash", "run", optional=True),
        "config": _object(run, "config", "run"),
        "error": _text(run, "error", "run", optional=True),
        "load_start": run.get("load_start"),
        "load_end": run.get("load_end"),
        "fingerprint": _text(run, "fingerprint", "run", optional=True),
    }
    environment = _object(document, "environment", "")
    measurements = tuple(
        _measurement(m, f"measurements[{i}]")
        for i, m in enumerate(_list(document, "measurements", ""))
    )
    metrics = tuple(
        _metric(k, f"metrics[{i}]") for i, k in enumerate(_list(document, "metrics", ""))
    )
    artifacts = tuple(
        _artifact(a, f"artifacts[{i}]") for i, a in enumerate(_list(document, "artifacts", ""))
    )
    names = [a.name for a in artifacts]
    if len(set(names)) != len(names):
        raise _bad("artifacts", "name the same file twice")
    return CheckedRun(
        run=checked_run,
        tags=tuple(sorted(set(tags))),
        environment=environment,
        measurements=measurements,
        metrics=metrics,
        artifacts=artifacts,
    )


def import_document(store: ResultsStore, document: Any) -> bool:
    """Check ``document`` and write its run into ``store``
    (:meth:`~d5core.results.ResultsStore.import_run`).

    :return: ``True`` when the run was written; ``False`` (nothing written) when the
        store already holds a run with its id.
    :raises UsageError: for a malformed document, naming the field; nothing is written.
    """
    return store.import_run(check_run_document(document))
