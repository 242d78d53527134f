"""Compare two stored runs: measurement by measurement, and scalar metric by metric.

:func:`compare_runs` pairs the measurements of a baseline and a candidate run by metric
and labels and judges each pair between worker processes (:mod:`d5core.measure.nested`):
the ratio of the medians of process medians with its interval, Welch's t-test on the log
process medians and a verdict (better, worse or same) by the direction each quantity
declares, called only above the noise floor of the runs' machines. Scalar metrics (one
value per run) are set side by side with an untested verdict. The environments, the
machine's load and the thread count each backend ran with are compared too. ``d5 results
compare`` renders the result; its ``--json`` prints :meth:`Comparison.to_json`
(``docs/json.md``).

The judgement of one measurement (:func:`compare_measurements`, on samples pooled by
:func:`pool_measurements`), of one scalar metric (:func:`compare_metric_values`) and the
noise floor (:func:`noise_floor_for`) are public, so that other views of stored runs,
such as the report's history figures (:mod:`d5core.report.history`), decide as
``d5 results compare`` does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from d5core.results.load import load_difference, run_load_warnings, was_busy
from d5core.results.store import MetricRecord, ResultsStore, RunRecord
from d5core.trace.marks import trace_level

if TYPE_CHECKING:
    from d5core.measure.fitness import ThreadCount
    from d5core.measure.nested import NestedSummary

__all__ = [
    "Comparison",
    "DescribedMeasurement",
    "MeasurementSamples",
    "compare_measurements",
    "compare_metric_values",
    "compare_runs",
    "measurement_key",
    "noise_floor_for",
    "pool_measurements",
]


class DescribedMeasurement(Protocol):
    """What names a measurement: a stored
    :class:`~d5core.results.store.MeasurementRecord`, or a report's
    :class:`~d5core.levels.report.ReportMeasurement`."""

    @property
    def metric(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, Any]: ...
    @property
    def unit(self) -> str: ...
    @property
    def better(self) -> str | None: ...


@dataclass(frozen=True)
class MeasurementSamples:
    """The samples of one (metric, labels) in one run, by worker process (``None``: not
    recorded), as :func:`compare_measurements` judges them.

    ``first`` is the measurement that named them (its metric, labels, unit and direction
    label the comparison); ``directions`` holds every direction the pooled measurements
    declared.
    """

    first: DescribedMeasurement
    per_process: Mapping[int | None, Sequence[float]]
    directions: frozenset[str | None]


#: A measurement being pooled: the first that named it, its samples by process, and
#: every direction declared.
_Pooling = tuple[DescribedMeasurement, dict[int | None, list[float]], set[str | None]]


def measurement_key(metric: str, labels: Mapping[str, Any]) -> tuple[str, str]:
    """The key that pairs measurements of two runs: the metric and its labels as JSON."""
    return (metric, json.dumps(labels, sort_keys=True))


def pool_measurements(
    measurements: Iterable[tuple[DescribedMeasurement, Mapping[int | None, Sequence[float]]]],
) -> dict[tuple[str, str], MeasurementSamples]:
    """Pool one run's measurements by :func:`measurement_key`: measurements repeated in
    a run are joined, process by process (samples of no recorded process form one
    process), in the order given.

    :param measurements: each measurement with its samples by process.
    """
    groups: dict[tuple[str, str], _Pooling] = {}
    for m, by_process in measurements:
        key = measurement_key(m.metric, m.labels)
        first, per_process, directions = groups.get(key, (m, {}, set()))
        for process, values in by_process.items():
            per_process.setdefault(process, []).extend(values)
        groups[key] = (first, per_process, directions | {m.better})
    return {
        key: MeasurementSamples(first, per_process, frozenset(directions))
        for key, (first, per_process, directions) in groups.items()
    }


def _grouped(store: ResultsStore, run_id: str) -> dict[tuple[str, str], MeasurementSamples]:
    """Samples per (metric, labels) and process (:func:`pool_measurements`)."""
    return pool_measurements(
        (m, store.samples_by_process(m.id)) for m in store.measurements(run_id)
    )


def _brief(run: RunRecord) -> dict[str, Any]:
    return {
        "run_id": run.id,
        "kind": run.kind,
        "name": run.name,
        "status": run.status,
        "created": run.created,
        "fingerprint": run.fingerprint,
    }


def _lower_is_better(better: str | None) -> bool | None:
    return None if better is None else better == "lower"


def _side(summary: NestedSummary) -> dict[str, Any]:
    """One side's figures: the median of process medians and its interval (between
    processes when there are two or more, else the one process's own)."""
    between = summary.between_known
    return {
        "n": summary.n_samples,
        "processes": summary.n_processes,
        "median": summary.median,
        "ci_low": summary.ci_low if between else summary.within_ci_low,
        "ci_high": summary.ci_high if between else summary.within_ci_high,
        "ci": "between processes" if between else "within one process",
        "between_share": summary.between_share,
        "process_medians": summary.process_medians,
    }


def _compare_one(
    first: DescribedMeasurement,
    base: Mapping[int | None, Sequence[float]],
    cand: Mapping[int | None, Sequence[float]],
    alpha: float,
    floor: float,
) -> dict[str, Any]:
    """The verdict from the processes (:func:`compare_nested`); the within-run
    Mann–Whitney test of the pooled samples rides along as information."""
    from d5core.measure.compare import within_run_test
    from d5core.measure.nested import compare_nested, summarize_nested

    lower = _lower_is_better(first.better)
    row: dict[str, Any] = {
        "metric": first.metric,
        "labels": dict(first.labels),
        "unit": first.unit,
        "better": first.better,
        "lower_is_better": lower,
    }
    try:
        sb = summarize_nested([list(v) for v in base.values()])
        sc = summarize_nested([list(v) for v in cand.values()])
        result = compare_nested(sb, sc, alpha=alpha, min_effect=floor, lower_is_better=lower)
    except ValueError as exc:
        row["error"] = " ".join(str(exc).split())
        return row
    p_within, delta = within_run_test(
        [x for v in base.values() for x in v], [x for v in cand.values() for x in v]
    )
    row["baseline"], row["candidate"] = _side(sb), _side(sc)
    row.update(result.to_json())
    row["processes"] = {"baseline": sb.n_processes, "candidate": sc.n_processes}
    row["noise_floor"] = floor
    row["effect_size"] = delta
    row["within_run"] = {
        "test": "mann-whitney",
        "p_value": p_within,
        "effect_size": delta,
        "note": "samples of one process are not independent runs: information only",
    }
    return row


def compare_measurements(
    baseline: MeasurementSamples, candidate: MeasurementSamples, *, alpha: float, noise_floor: float
) -> dict[str, Any]:
    """Judge one measurement of two runs as ``d5 results compare`` does: between worker
    processes (:func:`d5core.measure.nested.compare_nested`) at significance ``alpha``,
    calling only changes above ``noise_floor``.

    :returns: the row ``d5 results compare --json`` prints under ``comparisons``
        (``docs/json.md``): ``verdict``, ``ratio``, ``p_value``, both sides' medians and
        intervals, ...; or a row with ``error`` when the two cannot be compared (units
        or directions differ, a sample is not a positive finite number).
    """
    first, other = baseline.first, candidate.first
    directions = baseline.directions | candidate.directions
    problem = None
    if first.unit != other.unit:
        problem = f"units differ: {first.unit!r} vs {other.unit!r}"
    elif len(directions) > 1:
        shown = " vs ".join(sorted(str(d) for d in directions))
        problem = f"the runs disagree on which direction is better: {shown}"
    if problem is not None:
        return {"metric": first.metric, "labels": first.labels, "unit": first.unit,
                "error": problem}  # fmt: skip
    return _compare_one(first, baseline.per_process, candidate.per_process, alpha, noise_floor)


def _measurement_rows(
    ga: Mapping[tuple[str, str], MeasurementSamples],
    gb: Mapping[tuple[str, str], MeasurementSamples],
    alpha: float,
    floor: float,
) -> list[dict[str, Any]]:
    return [
        compare_measurements(samples, gb[key], alpha=alpha, noise_floor=floor)
        for key, samples in ga.items()
        if key in gb
    ]


def _run_machine(store: ResultsStore, run: RunRecord) -> str | None:
    """The fingerprint of the machine ``run`` was measured on (``None`` if unknown)."""
    from d5core.measure.noise import machine_fingerprint, machine_identity_of

    stored = run.config.get("machine_fingerprint")
    if isinstance(stored, str) and stored:
        return stored
    identity = machine_identity_of(store.environment(run.id))
    return None if identity is None else machine_fingerprint(identity)


def _calibrated_floor(store: ResultsStore, runs: Sequence[RunRecord]) -> dict[str, Any]:
    """The noise floor of the runs' machines from their stored calibrations: the larger
    where the runs come from two machines; the default where one has none."""
    from d5core.measure.compare import DEFAULT_MIN_EFFECT
    from d5core.measure.noise import DEFAULT_MAX_AGE_DAYS, NOISE_FLOOR_ENV, noise_floor

    machines = list(dict.fromkeys(_run_machine(store, run) for run in runs))
    found, missing, notes = [], [], []
    for fingerprint in machines:
        stored = None if fingerprint is None else noise_floor(store, fingerprint, None)
        if stored is None:
            missing.append(fingerprint or "unknown")
            continue
        found.append(stored)
        if stored.age_days > DEFAULT_MAX_AGE_DAYS:
            notes.append(
                f"the calibration of machine {stored.fingerprint} is "
                f"{stored.age_days:.0f} days old (run 'd5 calibrate' to measure it again)"
            )
    calibrations = [
        {"fingerprint": f.fingerprint, "run_id": f.run_id, "machine_floor": f.machine_floor,
         "age_days": f.age_days, "processes": f.processes}
        for f in found
    ]  # fmt: skip
    if missing:
        notes.append(
            f"no calibration taken on a quiet machine is stored for machine "
            f"{', '.join(missing)}: using d5's default "
            f"noise floor of {DEFAULT_MIN_EFFECT:.1%} (run 'd5 calibrate' to measure it, "
            f"or set {NOISE_FLOOR_ENV})"
        )
        value, source = DEFAULT_MIN_EFFECT, "default"
    else:
        value, source = max(f.machine_floor for f in found), "calibration"
    return {"value": value, "source": source, "calibrations": calibrations, "notes": notes}


def noise_floor_for(
    store: ResultsStore, runs: Sequence[RunRecord], min_effect: float | None = None
) -> dict[str, Any]:
    """The floor a comparison of ``runs`` calls changes above, and where it came from:
    ``min_effect`` (``--min-effect``), then ``$D5_NOISE_FLOOR``, then the calibrations
    of the runs' machines stored in ``store`` (the larger), then d5's default.

    :returns: ``value``, ``source``, ``calibrations`` and ``notes`` (as
        ``d5 results compare --json`` prints them under ``noise_floor``).
    """
    from d5core.measure.noise import NOISE_FLOOR_ENV, noise_floor_override

    if min_effect is not None:
        return {"value": min_effect, "source": "--min-effect", "calibrations": [], "notes": []}
    override = noise_floor_override()
    if override is not None:
        return {"value": override, "source": NOISE_FLOOR_ENV, "calibrations": [], "notes": []}
    return _calibrated_floor(store, runs)


def _scalar_change(baseline: float, candidate: float, min_effect: float) -> str | None:
    """``higher``, ``lower`` or ``none`` (within ``min_effect``); ``None`` for NaN."""
    if not (math.isfinite(baseline) and math.isfinite(candidate)):
        return None
    if candidate == baseline or (baseline != 0.0 and abs(candidate / baseline - 1.0) <= min_effect):
        return "none"
    return "higher" if candidate > baseline else "lower"


def compare_metric_values(
    baseline: MetricRecord, candidate: MetricRecord, min_effect: float
) -> dict[str, Any]:
    """Set one scalar metric of two runs side by side as ``d5 results compare`` does:
    their ratio and an untested verdict, a change being a relative difference above
    ``min_effect`` (one value per run is not a sample: no significance test is possible).

    :returns: the row ``d5 results compare --json`` prints under ``metrics``.
    """
    from d5core.measure.compare import judge

    va, vb = baseline.value, candidate.value
    ratio = vb / va if va not in (0.0,) and math.isfinite(va) and math.isfinite(vb) else None
    better = baseline.better if baseline.better == candidate.better else None
    change = _scalar_change(va, vb, min_effect)
    return {
        "name": baseline.name,
        "labels": baseline.labels,
        "unit": baseline.unit,
        "better": better,
        "baseline": None if math.isnan(va) else va,
        "candidate": None if math.isnan(vb) else vb,
        "ratio": ratio,
        "change": change,
        "verdict": None if change is None else judge(change, _lower_is_better(better)),
        "tested": False,
    }


def _metric_rows(
    store: ResultsStore, a: RunRecord, b: RunRecord, min_effect: float
) -> tuple[list[dict[str, Any]], set[str]]:
    """Scalar metrics found in both runs, side by side (:func:`compare_metric_values`)."""

    def by_key(run: RunRecord) -> dict[tuple[str, str], MetricRecord]:
        return {(k.name, json.dumps(k.labels, sort_keys=True)): k for k in store.metrics(run.id)}

    ma, mb = by_key(a), by_key(b)
    rows = [compare_metric_values(ka, mb[key], min_effect) for key, ka in ma.items() if key in mb]
    unmatched = {k[0] for k in set(ma) ^ set(mb)}
    return rows, unmatched


def _load_report(a: RunRecord, b: RunRecord) -> dict[str, Any]:
    """Both runs' load averages and a warning for each busy run and for differing loads."""
    warnings = [
        f"{label} {run.id}: {w}"
        for label, run in (("baseline", a), ("candidate", b))
        for w in run_load_warnings(run.load_start, run.load_end)
    ]
    differed = load_difference((a.load_start, a.load_end), (b.load_start, b.load_end))
    if differed:
        warnings.append(differed)
    levels = [trace_level(run.config) for run in (a, b)]
    if levels[0] != levels[1]:
        warnings.append(
            f"one run was traced and the other not, or at another level ({levels[0] or 'off'}"
            f" against {levels[1] or 'off'}): a traced d5 run's times include the tracing"
        )

    def loads(run: RunRecord) -> dict[str, Any]:
        return {
            "start": None if run.load_start is None else run.load_start.to_json(),
            "end": None if run.load_end is None else run.load_end.to_json(),
            "busy": was_busy(run.load_start, run.load_end),
        }

    return {"baseline": loads(a), "candidate": loads(b), "warnings": warnings}


def _thread_counts(run: RunRecord) -> dict[str, ThreadCount]:
    """The thread count of each backend or executor of ``run``, as ``d5 bench`` stored
    it (none for runs of other commands, or stored by an older d5)."""
    from d5core.measure.fitness import ThreadCount

    fitness = run.config.get("fitness")
    stored = fitness.get("thread_counts") if isinstance(fitness, Mapping) else None
    if not isinstance(stored, Mapping):
        return _inference_thread_counts(run)
    counts = {}
    for name, data in stored.items():
        try:
            counts[str(name)] = ThreadCount.from_json(data)
        except (KeyError, TypeError, ValueError):
            continue  # not a count this d5 can read: nothing to compare
    return counts


def _inference_thread_counts(run: RunRecord) -> dict[str, ThreadCount]:
    """The thread count of each executor of an inference run (``d5 bench net
    --scenario``), as its worker reported it (:mod:`d5core.loadgen.store`)."""
    from d5core.measure.fitness import ThreadCount

    inference = run.config.get("inference")
    executors = inference.get("executors") if isinstance(inference, Mapping) else None
    counts = {}
    for name, facts in (executors or {}).items() if isinstance(executors, Mapping) else ():
        threads = facts.get("threads") if isinstance(facts, Mapping) else None
        if not isinstance(threads, Mapping) or not isinstance(threads.get("setting"), str):
            continue
        count = threads.get("count")
        known = isinstance(count, int) and not isinstance(count, bool)
        counts[str(name)] = ThreadCount(
            backend=str(name), framework=None, setting=threads["setting"],
            reported=(str(count) if known else None,), per_process=(count if known else None,),
        )  # fmt: skip
    return counts


#: The LoadGen settings that set the load an inference run measured under; runs of an
#: executor under other values are not comparable (threads are compared on their own).
_LOAD_SETTINGS = (
    "scenario", "target_qps", "latency_bound_ms", "samples_per_query", "expected_qps",
    "min_duration_s", "min_query_count", "performance_sample_count",
)  # fmt: skip


def _inference_settings(run: RunRecord) -> dict[str, Mapping[str, Any]]:
    """The settings each executor of an inference run ran with, by executor."""
    inference = run.config.get("inference")
    executors = inference.get("executors") if isinstance(inference, Mapping) else None
    if not isinstance(executors, Mapping):
        return {}
    found = {}
    for name, facts in executors.items():
        settings = facts.get("settings") if isinstance(facts, Mapping) else None
        if isinstance(settings, Mapping):
            found[str(name)] = settings
    return found


def _settings_warnings(a: RunRecord, b: RunRecord) -> list[str]:
    """A line per executor of two inference runs whose LoadGen settings differ."""
    sa, sb = _inference_settings(a), _inference_settings(b)
    warnings = []
    for name in sorted(set(sa) & set(sb)):
        differ = [
            f"{key} {sa[name].get(key)!r} vs {sb[name].get(key)!r}"
            for key in _LOAD_SETTINGS
            if sa[name].get(key) != sb[name].get(key)
        ]
        if differ:
            warnings.append(
                f"{name} ran under other LoadGen settings in baseline {a.id} and candidate "
                f"{b.id} ({', '.join(differ)}): latencies and rates under another load "
                "are not comparable"
            )
    return warnings


def _thread_report(a: RunRecord, b: RunRecord) -> dict[str, Any]:
    """Both runs' thread counts by backend, and a warning for each backend that ran with
    a different count in the candidate than in the baseline."""
    ca, cb = _thread_counts(a), _thread_counts(b)
    warnings = []
    for name in sorted(set(ca) & set(cb)):
        base, cand = ca[name], cb[name]
        if not base.counts or not cand.counts or base.counts == cand.counts:
            continue
        how = base.source if base.source == cand.source else f"{base.source} vs {cand.source}"
        warnings.append(
            f"{name} ran with {base.amount} in baseline {a.id} and {cand.amount} in "
            f"candidate {b.id} ({how}): a change may come from the thread count"
        )
    return {
        "baseline": {name: count.to_json() for name, count in ca.items()},
        "candidate": {name: count.to_json() for name, count in cb.items()},
        "warnings": warnings,
    }


@dataclass
class Comparison:
    """The outcome of :func:`compare_runs`."""

    baseline: RunRecord
    candidate: RunRecord
    #: The significance level of the test between processes.
    alpha: float
    #: The smallest change the scalar metrics call (``--min-effect``, else d5's default).
    metrics_min_effect: float
    #: The noise floor the measurements are judged against: ``value``, ``source``,
    #: ``calibrations`` and ``notes``.
    noise_floor: dict[str, Any]
    same_environment: bool
    #: What differs between the runs' environments (empty when they are the same).
    environment_differences: list[str]
    #: Both runs' load averages and the warnings about them.
    load: dict[str, Any]
    #: Both runs' thread counts by backend (``d5 bench`` runs), and a warning for each
    #: backend whose count differs between them.
    threads: dict[str, Any]
    #: One row per measurement found in both runs.
    comparisons: list[dict[str, Any]]
    only_in_baseline: list[dict[str, Any]]
    only_in_candidate: list[dict[str, Any]]
    #: One row per scalar metric found in both runs.
    metrics: list[dict[str, Any]]
    #: Names of the scalar metrics found in only one of the runs.
    metrics_unmatched: set[str]
    #: Inference runs (``d5 bench net --scenario``): one line per executor that ran under
    #: other LoadGen settings (target QPS, latency bound, ...) in the two runs.
    settings_warnings: list[str] = field(default_factory=list)

    def worse(self) -> list[dict[str, Any]]:
        """The measurements of the candidate that are significantly worse."""
        return [r for r in self.comparisons if r.get("verdict") == "worse"]

    def warnings(self) -> list[str]:
        """What the reader should know before trusting the verdicts, one line each."""
        a, b = self.baseline, self.candidate
        found = [
            f"run {run.id} is {run.status}; comparing what it stored"
            for run in (a, b)
            if run.status != "complete"
        ]
        if not self.same_environment:
            differences = self.environment_differences
            shown = "; ".join(differences[:4]) + ("; ..." if len(differences) > 4 else "")
            found.append(
                f"runs {a.id} and {b.id} were measured in different environments "
                f"({shown or 'fingerprints differ'}); differences may come from the environment"
            )
        found += self.load["warnings"]
        found += self.threads["warnings"]
        found += self.settings_warnings
        if not self.comparisons and not self.metrics:
            found.append(f"runs {a.id} and {b.id} have no measurement or metric in common")
        return found

    def to_json(self) -> dict[str, Any]:
        """What ``d5 results compare --json`` prints (``docs/json.md``)."""
        from d5core.measure.nested import MIN_PROCESSES

        return {
            "baseline": _brief(self.baseline),
            "candidate": _brief(self.candidate),
            "alpha": self.alpha,
            "min_effect": self.noise_floor["value"],
            "metrics_min_effect": self.metrics_min_effect,
            "noise_floor": self.noise_floor,
            "method": "welch t-test on log process medians",
            "min_processes": MIN_PROCESSES,
            "same_environment": self.same_environment,
            "environment_differences": self.environment_differences,
            "load": self.load,
            "threads": self.threads,
            "comparisons": self.comparisons,
            "only_in_baseline": self.only_in_baseline,
            "only_in_candidate": self.only_in_candidate,
            "metrics": self.metrics,
            "settings_warnings": self.settings_warnings,
        }


#: Parts of an environment key that name a fact which moves timings, most telling first:
#: numpy and its BLAS and the thread variables, then the frameworks' versions.
_TIMING_FACTS = (
    (".numpy", "blas", "threads."),
    ("torch", "tensorflow", "mxnet", "onnxruntime"),
)


def _timing_facts_first(differences: list[str]) -> list[str]:
    """``differences`` with the lines about :data:`_TIMING_FACTS` first, in its order
    (each group keeps its own order): a warning that shows the first few shows those
    (runs from MXNet's environment and from torch's differ in dozens of lines)."""

    def rank(line: str) -> int:
        key = line.split(": ")[0].lower()  # "frameworks.d5-plugin-numpy:numpy.blas.name"
        for i, parts in enumerate(_TIMING_FACTS):
            if any(part in key for part in parts):
                return i
        return len(_TIMING_FACTS)

    return sorted(differences, key=rank)


def compare_runs(
    store: ResultsStore,
    baseline: str,
    candidate: str,
    *,
    alpha: float | None = None,
    min_effect: float | None = None,
) -> Comparison:
    """Compare run ``candidate`` with run ``baseline`` (ids or unique prefixes).

    ``alpha`` is the significance level (default: d5's); ``min_effect`` the smallest
    relative change called, instead of the noise floor (``$D5_NOISE_FLOOR``, else the
    machines' calibrations, else d5's default).

    :raises UsageError: for a run id that matches no run, or several.
    """
    from d5core.environment import environment_differences, environment_fingerprint
    from d5core.measure.compare import DEFAULT_MIN_EFFECT
    from d5core.measure.nested import DEFAULT_NESTED_ALPHA

    level = DEFAULT_NESTED_ALPHA if alpha is None else alpha
    effect = DEFAULT_MIN_EFFECT if min_effect is None else min_effect
    a, b = store.get_run(baseline), store.get_run(candidate)
    floor = noise_floor_for(store, (a, b), min_effect)
    env_a, env_b = store.environment(a.id), store.environment(b.id)
    ga, gb = _grouped(store, a.id), _grouped(store, b.id)
    metric_rows, metrics_unmatched = _metric_rows(store, a, b, effect)
    # Recomputed from the stored environments, so runs stored by an older d5 compare
    # by today's rules.
    same_env = environment_fingerprint(env_a) == environment_fingerprint(env_b)
    return Comparison(
        baseline=a,
        candidate=b,
        alpha=level,
        metrics_min_effect=effect,
        noise_floor=floor,
        same_environment=same_env,
        environment_differences=[]
        if same_env
        else _timing_facts_first(environment_differences(env_a, env_b)),
        load=_load_report(a, b),
        threads=_thread_report(a, b),
        comparisons=_measurement_rows(ga, gb, level, floor["value"]),
        only_in_baseline=[{"metric": k[0], "labels": json.loads(k[1])} for k in ga if k not in gb],
        only_in_candidate=[{"metric": k[0], "labels": json.loads(k[1])} for k in gb if k not in ga],
        metrics=metric_rows,
        metrics_unmatched=metrics_unmatched,
        settings_warnings=_settings_warnings(a, b),
    )
