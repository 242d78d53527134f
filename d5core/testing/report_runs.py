"""Runs stored by hand for testing report figures, and the stored values to check them by.

A figure test stores runs in a temporary :class:`~d5core.results.ResultsStore` the way
d5's commands store them, reads them back as ``d5 report`` does, and compares what a
figure draws with what the store holds::

    run_id = store.begin_run("op", "bench Gemm")
    store_nested(store, run_id, "time", [[1e-3, 1.1e-3], [1.2e-3, 0.9e-3]], labels=labels)
    store.finish_run(run_id)
    (run,) = report_runs(store, [run_id])
    assert drawn_median == nested_headline(stored_measurement(store, run_id, "time").summary)[0]

Import this module in tests only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from d5core.levels.report import ReportRun
from d5core.lv0.bench_results import by_process, headline, stored_summary
from d5core.results.store import MeasurementRecord, MetricRecord, ResultsStore

__all__ = [
    "nested_headline",
    "report_runs",
    "store_nested",
    "stored_measurement",
    "stored_metric",
]


def store_nested(
    store: ResultsStore,
    run_id: str,
    metric: str,
    per_process: Sequence[Sequence[float]],
    *,
    labels: Mapping[str, Any] | None = None,
    unit: str = "s",
) -> int:
    """Store ``per_process`` (the samples each worker process took) as one measurement
    of ``metric``, as ``d5 bench`` stores one: every sample with its process, and the
    nested summary (median of the process medians, its between-process interval) made
    by the same functions. Returns the measurement's id."""
    samples = [v for values in per_process for v in values]
    processes = [i for i, values in enumerate(per_process) for _ in values]
    summary, nested = headline(by_process(samples, processes), 0.95)
    return store.add_measurement(
        run_id,
        metric,
        samples,
        labels=labels,
        unit=unit,
        summary=stored_summary(summary, nested),
        processes=processes,
    )


def report_runs(store: ResultsStore, run_ids: Sequence[str]) -> list[ReportRun]:
    """The runs ``run_ids`` read back as ``d5 report`` reads them (unknown ids left out)."""
    return [ReportRun.from_stored(stored) for stored in store.read_runs(list(run_ids))]


def _labelled(labels: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(labels.get(k) == v for k, v in wanted.items())


def stored_measurement(
    store: ResultsStore, run_id: str, metric: str, **labels: Any
) -> MeasurementRecord:
    """The one measurement of ``metric`` whose labels include ``labels``, read straight
    from the store; an AssertionError names what was found when there is not exactly one."""
    found = [
        m for m in store.measurements(run_id) if m.metric == metric and _labelled(m.labels, labels)
    ]
    assert len(found) == 1, (metric, labels, found)
    return found[0]


def stored_metric(store: ResultsStore, run_id: str, name: str, **labels: Any) -> MetricRecord:
    """The one scalar metric ``name`` whose labels include ``labels``, read straight from
    the store; an AssertionError names what was found when there is not exactly one."""
    found = [k for k in store.metrics(run_id) if k.name == name and _labelled(k.labels, labels)]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def nested_headline(summary: Mapping[str, Any] | None) -> tuple[float, float, float]:
    """``(median, ci_low, ci_high)`` of the nested summary stored in ``summary`` (what
    :func:`store_nested` stores): the headline a figure must draw."""
    assert summary is not None and "nested" in summary, summary
    nested = summary["nested"]
    return nested["median"], nested["ci_low"], nested["ci_high"]
