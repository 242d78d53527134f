"""``d5 bench`` in fresh worker processes: the jobs, and their results gathered back.

Each (backend, problem, direction) of ``d5 bench op`` and each executor of ``d5 bench
net`` becomes a :class:`~d5core.measure.invocations.Job` of kind ``"op"`` or ``"net"``,
whose JSON arguments name what to build. In the worker, :func:`op_job` and
:func:`net_job` build exactly the callable the in-process path times
(:func:`d5core.lv0.bench_run.bench_operators`, :func:`d5core.lv1.bench_run.bench_networks`):
the same seeded inputs, the same operator or executor, the same preparation, and the same
device synchronisation.

Back in the parent, :func:`gather` turns a job's runs in several processes into one
:class:`~d5core.measure.engine.Measurement` whose headline (median and CI) is the nested
one, so that :class:`~d5core.lv0.runner.OperatorTiming` and
:class:`~d5core.lv1.runner.NetworkTiming` report GFLOP/s and throughput from the
median of process medians, and :func:`stored_summary` gives the summary to store.
:func:`thread_counts` reads, from what the workers reported, the thread count each
backend or executor ran with.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from d5core.measure.engine import Measurement
from d5core.measure.fitness import ThreadCount, framework_of, thread_count
from d5core.measure.invocations import Invocations, JobResult, ProcessRun
from d5core.measure.nested import NestedSummary, summarize_nested
from d5core.measure.stats import Summary, summarize

__all__ = [
    "STARTUP_DETAILS",
    "STARTUP_METRICS",
    "Gathered",
    "by_process",
    "gather",
    "headline",
    "nested_fields",
    "rate_headline",
    "startup_fields",
    "store_nested",
    "store_startup",
    "stored_summary",
    "thread_counts",
    "within_noise",
]


# -- results (in the parent) ------------------------------------------------------------------


@dataclass
class Gathered:
    """A job's runs in every process, as one measurement with a nested headline.

    ``measurement`` holds every sample (process after process) and a summary whose
    ``median``/``ci_low``/``ci_high`` are the nested ones (see :func:`gather`);
    ``processes`` names the process (round) of each sample; ``nested`` is the full
    nested summary.
    """

    measurement: Measurement
    processes: list[int]
    nested: NestedSummary

    @property
    def between_known(self) -> bool:
        """Whether the spread between processes is known (two processes or more)."""
        return self.nested.between_known


def _common(values: Sequence[str]) -> str:
    return Counter(values).most_common(1)[0][0]


def headline(
    per_process: Sequence[Sequence[float]], confidence: float
) -> tuple[Summary, NestedSummary]:
    """The summary of samples taken in several processes, with the nested headline.

    ``median``/``ci_low``/``ci_high`` are the median of the process medians and its
    between-process interval; with a single process that interval is unknown and the
    within-process one stands in for it (labelled "between-run variance unknown"). The
    other fields (quartiles, stability, ...) describe all samples pooled. The second
    value is the whole nested summary.
    """
    nested = summarize_nested(per_process, confidence)
    pooled = summarize([v for values in per_process for v in values], confidence)
    low = nested.ci_low if nested.ci_low is not None else nested.within_ci_low
    high = nested.ci_high if nested.ci_high is not None else nested.within_ci_high
    return dataclasses.replace(pooled, median=nested.median, ci_low=low, ci_high=high), nested


def gather(result: JobResult) -> Gathered:
    """One :class:`Measurement` of ``result``'s runs (it must have at least one), with
    the :func:`headline` summary of every sample."""
    runs = result.runs
    if not runs:
        raise ValueError(f"job {result.job.label!r} has no measured process")
    first = runs[0].measurement
    summary, nested = headline([r.samples for r in runs], first.options.confidence)
    measurement = dataclasses.replace(
        first,
        samples=[v for r in runs for v in r.samples],
        summary=summary,
        warmup_runs=sum(r.measurement.warmup_runs for r in runs),
        blocked=any(r.measurement.blocked for r in runs),
        block_size=max(r.measurement.block_size for r in runs),
        stopped_by=_common([r.measurement.stopped_by for r in runs]),
        calibration_runs=sum(r.measurement.calibration_runs for r in runs),
        elapsed_s=sum(r.measurement.elapsed_s for r in runs),
    )
    measurement.first_call_s = _median_of([r.measurement.first_call_s for r in runs])
    for key in STARTUP_DETAILS:  # one value per process: their median
        found = _median_of([getattr(r.measurement, key) for r in runs])
        measurement.details = {k: v for k, v in measurement.details.items() if k != key}
        if found is not None:
            measurement.details[key] = found
    processes = [r.round for r in runs for _ in r.samples]
    return Gathered(measurement, processes, nested)


#: The start-up costs a job's details may carry: the preparation's time (``prepare_s``,
#: from the job) and a compile time the measured code reports (``compile_s``).
STARTUP_DETAILS = ("prepare_s", "compile_s")
#: The metric each start-up cost is stored as, in seconds, beside the run's ``time``.
STARTUP_METRICS = {
    "prepare_s": "prepare_time",
    "first_call_s": "first_call_time",
    "compile_s": "compile_time",
}


def _median_of(values: Sequence[float | None]) -> float | None:
    """The median of the values known (``None`` where none is)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def startup_fields(measurement: Measurement) -> dict[str, float | None]:
    """What preparing the timed callable and its first call cost, in seconds (the median
    over the worker processes once gathered): ``prepare_s``, ``first_call_s`` and
    ``compile_s`` (``None`` where not known). None of them is in the samples."""
    return {key: getattr(measurement, key) for key in STARTUP_METRICS}


def store_startup(
    store: Any, run_id: str, measurement: Measurement, labels: Mapping[str, Any]
) -> None:
    """Store :func:`startup_fields` as the run's scalar metrics ``prepare_time``,
    ``first_call_time`` and ``compile_time`` (seconds), with ``labels`` (those of the
    ``time`` they belong to); an unknown one is left out."""
    for key, value in startup_fields(measurement).items():
        if value is not None:
            store.add_metric(run_id, STARTUP_METRICS[key], value, labels=labels, unit="s")


def rate_headline(
    gathered: Gathered, numerator: float, rates: Sequence[float]
) -> tuple[Summary, NestedSummary]:
    """The headline of ``rates`` derived one to one from ``gathered``'s times
    (``numerator / t``: samples per second, GFLOP/s), as :func:`headline` returns it.

    Its median and intervals are the times' own, inverted, so that a stored rate and the
    time it came from always tell the same story: a median computed over the rates would
    be the mean of the two middle rates when their count is even, which is not
    ``numerator / median time`` and, for samples in two modes, can be several times
    larger. The other fields (percentiles, mean, stability) describe the rates.
    """
    times, nested = gathered.measurement.summary, gathered.nested

    def inverted(value: float | None) -> float | None:
        return None if value is None or value <= 0 else numerator / value

    pooled = summarize(list(rates), nested.confidence)
    rate_nested = dataclasses.replace(
        nested,
        process_medians=[numerator / m for m in nested.process_medians],
        median=numerator / nested.median,
        ci_low=inverted(nested.ci_high),
        ci_high=inverted(nested.ci_low),
        within_ci_low=numerator / nested.within_ci_high,
        within_ci_high=numerator / nested.within_ci_low,
    )
    summary = dataclasses.replace(
        pooled,
        median=numerator / times.median,
        ci_low=numerator / times.ci_high,
        ci_high=numerator / times.ci_low,
    )
    return summary, rate_nested


def by_process(values: Sequence[float], processes: Sequence[int]) -> list[list[float]]:
    """``values`` grouped by their process, in process order (derived samples: rates)."""
    groups: dict[int, list[float]] = {}
    for value, process in zip(values, processes, strict=True):
        groups.setdefault(process, []).append(value)
    return [groups[k] for k in sorted(groups)]


def nested_fields(nested: NestedSummary) -> dict[str, Any]:
    """The nested figures reported beside the headline, flat (for tables and JSON rows)."""
    return {
        "processes": nested.n_processes,
        "between_known": nested.between_known,
        "between_label": nested.label,
        "between_ci_low": nested.ci_low,
        "between_ci_high": nested.ci_high,
        "within_ci_low": nested.within_ci_low,
        "within_ci_high": nested.within_ci_high,
        "between_share": nested.between_share,
    }


def stored_summary(summary: Summary, nested: NestedSummary) -> dict[str, Any]:
    """The summary to store: ``summary``'s fields (its ``median``, ``ci_low`` and
    ``ci_high`` the nested headline, as existing readers expect), the flat
    :func:`nested_fields`, and the whole nested summary under ``"nested"``."""
    return {**summary.to_json(), **nested_fields(nested), "nested": nested.to_json()}


def within_noise(medians: Mapping[str, float], floor: float | None) -> dict[str, list[str]]:
    """For each name, the other names whose median differs from its own by less than
    the noise ``floor`` (a fraction of the smaller of the two); none when the floor is
    unknown."""
    if floor is None:
        return {name: [] for name in medians}
    return {
        name: [
            other
            for other, value in medians.items()
            if other != name and max(value, median) / min(value, median) - 1.0 < floor
        ]
        for name, median in medians.items()
    }


def thread_counts(outcome: Invocations, group: str, argument: str) -> dict[str, ThreadCount]:
    """The thread count (:class:`~d5core.measure.fitness.ThreadCount`) each backend or
    executor ran with, by name, from the settings its worker processes reported.

    :param group: the entry-point group the names belong to (``d5.operators`` for
        ``d5 bench op``, ``d5.frameworks`` for ``d5 bench net``).
    :param argument: the job argument that names the backend (``backend``, ``executor``).

    A process that measured several jobs of one backend counts once, with the settings
    it reported after the last of them.
    """
    cores = {r.index: None if r.cpus is None else len(r.cpus) for r in outcome.rounds}
    latest: dict[str, dict[int, ProcessRun]] = {}
    for result in outcome.jobs:
        by_round = latest.setdefault(str(result.job.args[argument]), {})
        for run in result.runs:
            seen = by_round.get(run.round)
            if seen is None or run.position > seen.position:
                by_round[run.round] = run
    return {
        name: thread_count(
            name,
            framework_of(group, name),
            [(run.threads, cores.get(index)) for index, run in sorted(by_round.items())],
        )
        for name, by_round in latest.items()
    }


def store_nested(
    store: Any,
    run_id: str,
    metric: str,
    values: Any,
    gathered: Gathered,
    labels: dict[str, Any],
    unit: str,
    rate_of: float | None = None,
) -> None:
    """Store ``values`` (the gathered measurement, or rates derived one to one from its
    samples as ``rate_of / t``) with the process of each sample and its nested summary
    (for rates, the times' own median and intervals, inverted: :func:`rate_headline`)."""
    samples = values.samples if hasattr(values, "samples") else list(values)
    if rate_of is not None:
        summary, nested = rate_headline(gathered, rate_of, samples)
    else:
        confidence = gathered.nested.confidence
        summary, nested = headline(by_process(samples, gathered.processes), confidence)
    store.add_measurement(
        run_id, metric, values, labels=labels, unit=unit,
        summary=stored_summary(summary, nested), processes=gathered.processes,
    )  # fmt: skip
