"""The level-1 runner of ``d5 conformance``: run onnx's node tests on an executor, check
or record the baseline, and store the outcome as one ``conformance`` run.

The command (:mod:`d5core.lv1.conformance_cmd`) reads the options and shows the
:class:`ConformanceOutcome`; the cases themselves run in :mod:`d5core.lv1.conformance`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5core.errors import UsageError

if TYPE_CHECKING:
    from d5core.lv1.conformance import BaselineCheck, ConformanceReport

__all__ = ["CONFORMANCE_KIND", "ConformanceOutcome", "run_and_store", "store_conformance"]

#: The kind of the runs ``d5 conformance`` stores; each is named ``conformance EXECUTOR``.
CONFORMANCE_KIND = "conformance"

#: The metrics a conformance run stores: the report's count key and which way is better.
_COUNTS = (
    ("passed", "passed", "higher"),
    ("failed", "failed", "lower"),
    ("errors", "error", "lower"),
    ("unsupported", "unsupported", "lower"),
)


@dataclass(frozen=True)
class ConformanceOutcome:
    """What one conformance run gave: the report, the baseline check (``None`` without
    one) and ``data``, the report's JSON with the baseline and the stored ``run_id``."""

    report: ConformanceReport
    check: BaselineCheck | None
    data: dict[str, Any]

    @property
    def run_id(self) -> str:
        """The id of the stored run."""
        return str(self.data["run_id"])


def store_conformance(
    store: Any,
    report: Any,
    *,
    tags: Sequence[str] = (),
    settings: Mapping[str, Any] | None = None,
    baseline: Mapping[str, Any] | None = None,
) -> str:
    """Store ``report`` (a :class:`~d5core.lv1.conformance.ConformanceReport`) as a
    complete ``conformance`` run named ``conformance EXECUTOR``, tagged ``tags``; its id.

    Metrics: ``passed``, ``failed``, ``errors``, ``unsupported`` and ``total`` (case
    counts). The config holds the selection, the versions the outcome depends on, the
    names of the failing cases (``failing``: failed or error, sorted), how many passes ran
    some node on a fallback engine (``passed_with_fallback``), ``settings`` and the
    baseline check when there was one.
    """
    config: dict[str, Any] = {
        "executor": report.executor,
        "onnx": report.onnx_version,
        "versions": dict(report.versions),
        "pattern": report.pattern,
        "limit": report.limit,
        "complete": report.complete,
        "seconds": round(report.seconds, 3),
        "failing": sorted(r.name for r in report.failures),
        # the passes that ran some node on a fallback engine, not the executor's code
        "passed_with_fallback": report.passed_with_fallback,
        **dict(settings or {}),
    }
    if baseline is not None:
        config["baseline"] = dict(baseline)
    counts = report.counts
    name = f"conformance {report.executor}"
    with store.run(CONFORMANCE_KIND, name, config=config, tags=tags) as run_id:
        for metric, key, better in _COUNTS:
            store.add_metric(run_id, metric, float(counts[key]), unit="cases", better=better)
        store.add_metric(run_id, "total", float(report.total), unit="cases")
    return str(run_id)


def run_and_store(
    executor: str,
    *,
    pattern: str | None,
    limit: int | None,
    timeout_s: float | None,
    data_dir: Path | None,
    baseline: Path | None,
    update_baseline: bool,
    db: str | Path | None,
    tags: Sequence[str] = (),
) -> ConformanceOutcome:
    """Run the node tests on ``executor``, check them against ``baseline`` (or record
    them in it with ``update_baseline``), and store the outcome as one run.

    The store is checked writable before the first case runs.

    :param timeout_s: seconds per case (``None``: no limit).
    :raises UsageError: a store that cannot be written, a baseline that cannot be read,
        an unknown executor.
    """
    from d5core.lv1.conformance import (
        check_baseline,
        check_baseline_writable,
        check_settings,
        load_baseline,
        run_conformance,
    )
    from d5core.lv1.conformance import update_baseline as write_baseline
    from d5core.results.store import ResultsStore

    check_settings(limit=limit, timeout_s=timeout_s)  # before the store is opened
    if update_baseline and baseline is not None:
        check_baseline_writable(baseline)
    recorded = load_baseline(baseline) if baseline is not None and not update_baseline else None
    with ResultsStore.open(db) as store:
        store.require_writable()  # a database that cannot be written fails before the run
        report = run_conformance(
            executor, pattern=pattern, limit=limit, timeout_s=timeout_s, data_dir=data_dir
        )
        data: dict[str, Any] = report.to_json()
        check = check_baseline(report, recorded) if recorded is not None else None
        if check is not None:
            data["baseline"] = {
                "file": str(baseline),
                "expected": check.expected,
                "ok": check.ok,
                "newly_failing": check.newly_failing,
                "newly_passing": check.newly_passing,
                "version_changes": check.version_changes,
            }
        unwritten: UsageError | None = None
        if update_baseline and baseline is not None:
            try:
                write_baseline(baseline, report)
                data["baseline"] = {"file": str(baseline), "updated": True}
            except UsageError as exc:  # a full device: keep the run, then say so
                unwritten = exc
        settings = {"timeout_s": timeout_s,
                    "data_dir": None if data_dir is None else str(data_dir)}  # fmt: skip
        data["run_id"] = store_conformance(
            store, report, tags=tags, settings=settings, baseline=data.get("baseline")
        )
    if unwritten is not None:
        raise UsageError(f"{unwritten} (the run is stored as {data['run_id']})")
    return ConformanceOutcome(report, check, data)
