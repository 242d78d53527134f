"""AlgoPerf's scoring of training algorithms: workload times, performance profiles, scores.

Everything here is a pure function of trial records (:class:`~.trials.TrialRecord`) or
of plain numbers; nothing reads a store or draws.

The definitions follow MLCommons AlgoPerf (``DOCUMENTATION.md`` of
mlcommons/algorithmic-efficiency; the scoring code now lives in
mlcommons/submissions_algorithms, ``scoring/performance_profile.py`` and
``scoring/score_submissions.py``, which d5 was checked against):

- **Study time** (``get_best_trial_index``): within one study, the earliest time at which
  any trial reached the target, i.e. the minimum over the study's trials of their time
  to target; ``inf`` when no trial reached it.
- **Workload time** (``get_workloads_time_to_target``): the median over studies of the
  study times, as ``np.median`` computes it: the middle one for an odd number of
  studies, the mean of the two middle ones for an even number (so ``inf`` when either
  is ``inf``). A workload whose time is ``inf`` is a miss.
- **Performance ratio** (``compute_performance_profiles``): ``r = t / min over entries
  of t`` for each workload (``inf`` for a miss, and for everyone on a workload that every
  entry missed). AlgoPerf also sets ``t`` to ``inf`` beyond 4 times the best; for ρ on
  ``[1, 4]`` that changes nothing, so d5 keeps the true ratio.
- **Performance profile**: ρ(τ) = (number of workloads with ``r ≤ τ``) / (number of
  workloads of the suite), a step function of τ; a workload an entry has no trial for
  counts as a miss (the denominator is the suite's workload count, as AlgoPerf's
  ``num_base_workloads``).
- **Score** (``score_results``: ``compute_performance_profiles(min_tau=1.0,
  max_tau=4.0)`` then ``compute_leaderboard_score(normalize=True)``): the integral of ρ
  from 1 to ``r_max`` = 4 divided by ``r_max - 1``.

Where d5 differs:

- The score is the exact integral of the step function, ``(1 / (W (r_max − 1))) ·
  Σ_w max(0, r_max − max(1, r_w))`` over the workloads with ``r_w ≤ r_max``; AlgoPerf
  integrates with the trapezoid rule over 100 evenly spaced τ (``np.linspace(1, 4,
  100)``), which moves each workload's share by up to half a grid step: at most
  1/198 of 1/W.
- AlgoPerf's held-out workload variants (a base workload counts only when its randomly
  drawn variant also reached its target) are not modelled: a suite has no variants.
- An earlier AlgoPerf version counted a workload only when at least 3 of its trials
  reached the target; the current one, which d5 follows, needs one.
- The geometric-mean speed-up: AlgoPerf's ``scoring/compute_speedups.py`` takes the
  geometric mean over all workloads of (runtime / baseline runtime), a miss replaced by
  the budget plus one second; d5 reports ``baseline time / time`` (above 1: faster)
  over the workloads both reached only, with how many those are, so that a made-up
  runtime never enters the mean.
- Added by d5: each workload time's study-to-study spread: the minimum and maximum study
  time and, when there are enough studies for the distribution-free interval to reach
  its nominal coverage (six at 95 %), the confidence interval of the median from order
  statistics (:func:`d5core.measure.stats.median_ci`, docs/measurement.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from d5core.errors import UsageError
from d5core.lv2.algorithms.trials import TrialRecord

__all__ = [
    "R_MAX",
    "Scoreboard",
    "Speedup",
    "StudyInterval",
    "WorkloadTime",
    "entry_score",
    "geometric_speedup",
    "median_time",
    "performance_ratios",
    "profile_steps",
    "resolve_entry",
    "rho",
    "score_trials",
    "study_interval",
    "study_time",
    "workload_times",
]

#: The largest performance ratio the profile integrates to (AlgoPerf's τ_max).
R_MAX = 4.0


# -- one workload's time --------------------------------------------------------------


def study_time(times: Iterable[float]) -> float:
    """A study's time: the fastest of its trials' times to target (``inf`` = missed);
    ``inf`` for a study without trials. NaN counts as a miss."""
    finite = [float(t) for t in times if not math.isnan(float(t))]
    return min(finite, default=math.inf)


def median_time(study_times: Sequence[float]) -> float:
    """The median over studies as ``np.median`` takes it: the middle value, or the mean
    of the two middle values for an even count (``inf`` when either is ``inf``).

    :raises ValueError: for no study at all.
    """
    ordered = sorted(math.inf if math.isnan(float(t)) else float(t) for t in study_times)
    n = len(ordered)
    if n == 0:
        raise ValueError("a workload time needs at least one study")
    mid = n // 2
    if n % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2.0


@dataclass(frozen=True)
class StudyInterval:
    """How a workload time varies from study to study."""

    #: The fastest and slowest study time (``inf`` for a study that missed).
    low: float
    high: float
    #: The distribution-free confidence interval of the median (order statistics), at
    #: ``confidence``; ``None`` when too few studies give it its nominal coverage.
    ci: tuple[float, float] | None
    confidence: float
    #: The exact coverage of the order-statistic interval for this number of studies.
    coverage: float

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types; ``inf`` stays a float (the envelope writes it as null)."""
        return {
            "low": self.low,
            "high": self.high,
            "ci_low": None if self.ci is None else self.ci[0],
            "ci_high": None if self.ci is None else self.ci[1],
            "confidence": self.confidence,
            "coverage": self.coverage,
        }


def study_interval(study_times: Sequence[float], confidence: float = 0.95) -> StudyInterval:
    """The study-to-study spread of a workload time: min and max over studies, and the
    median's order-statistic interval (:func:`d5core.measure.stats.median_ci`) when its
    exact coverage (:func:`~d5core.measure.stats.median_ci_coverage`) reaches
    ``confidence``: from six studies on at 95 %.

    :raises ValueError: for no study at all.
    """
    from d5core.measure.stats import median_ci, median_ci_coverage

    values = [math.inf if math.isnan(float(t)) else float(t) for t in study_times]
    if not values:
        raise ValueError("a study interval needs at least one study")
    coverage = median_ci_coverage(len(values), confidence)
    ci = median_ci(values, confidence) if coverage >= confidence else None
    return StudyInterval(min(values), max(values), ci, float(confidence), float(coverage))


@dataclass(frozen=True)
class WorkloadTime:
    """One entry's time on one workload, from its trials."""

    entry: str
    workload: str
    #: The studies (their numbers) and each one's time, in study order.
    studies: tuple[int, ...]
    study_times: tuple[float, ...]
    #: The median over studies; ``inf``: missed.
    time: float
    interval: StudyInterval
    #: How many trials there were, and how many reached the target.
    trials: int
    trials_reached: int

    @property
    def reached(self) -> bool:
        """Whether the workload time is finite (the median study reached the target)."""
        return math.isfinite(self.time)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types."""
        return {
            "entry": self.entry,
            "workload": self.workload,
            "reached": self.reached,
            "time_s": self.time,
            "study_numbers": list(self.studies),
            "study_times_s": list(self.study_times),
            "interval": self.interval.to_json(),
            "trials": self.trials,
            "trials_reached": self.trials_reached,
        }


def workload_times(
    trials: Iterable[TrialRecord], confidence: float = 0.95
) -> dict[tuple[str, str], WorkloadTime]:
    """Each entry's time on each workload it has trials for, keyed ``(entry, workload)``
    (the entry is :attr:`TrialRecord.label`: ``ALGORITHM@EXECUTOR``)."""
    grouped: dict[tuple[str, str], dict[int, list[TrialRecord]]] = {}
    for record in trials:
        by_study = grouped.setdefault((record.label, record.workload), {})
        by_study.setdefault(record.study, []).append(record)
    result: dict[tuple[str, str], WorkloadTime] = {}
    for (entry, workload), by_study in grouped.items():
        studies = tuple(sorted(by_study))
        times = tuple(study_time(r.time for r in by_study[s]) for s in studies)
        records = [r for s in studies for r in by_study[s]]
        result[(entry, workload)] = WorkloadTime(
            entry=entry,
            workload=workload,
            studies=studies,
            study_times=times,
            time=median_time(times),
            interval=study_interval(times, confidence),
            trials=len(records),
            trials_reached=sum(r.reached for r in records),
        )
    return result


# -- profiles and scores ---------------------------------------------------------------


def performance_ratios(
    times: Mapping[str, Mapping[str, float]], workloads: Sequence[str] | None = None
) -> dict[str, dict[str, float]]:
    """``r = t / best t`` per entry and workload, from ``{entry: {workload: time}}``.

    ``workloads`` defaults to every workload any entry has; an entry without a time for
    one is a miss there. A miss (``inf`` or NaN) has ``r = inf``, and so does everyone on
    a workload nobody reached. A best time of 0 gives 1 to the entries with time 0 and
    ``inf`` to the rest.
    """
    names = list(workloads) if workloads is not None else _workloads_of(times)

    def time_of(entry: str, workload: str) -> float:
        t = float(times[entry].get(workload, math.inf))
        return math.inf if math.isnan(t) else t

    ratios: dict[str, dict[str, float]] = {entry: {} for entry in times}
    for workload in names:
        best = min((time_of(e, workload) for e in times), default=math.inf)
        for entry in times:
            t = time_of(entry, workload)
            if not math.isfinite(t) or not math.isfinite(best):
                r = math.inf
            elif best == 0.0:
                r = 1.0 if t == 0.0 else math.inf
            else:
                r = t / best
            ratios[entry][workload] = r
    return ratios


def _workloads_of(times: Mapping[str, Mapping[str, float]]) -> list[str]:
    return sorted({w for per in times.values() for w in per})


def rho(ratios: Iterable[float], tau: float, n_workloads: int | None = None) -> float:
    """ρ(τ): the fraction of workloads whose ratio is at most ``tau``. ``n_workloads``
    is the denominator (default: how many ratios there are)."""
    values = list(ratios)
    n = len(values) if n_workloads is None else n_workloads
    if n <= 0:
        return 0.0
    return sum(1 for r in values if r <= tau) / n


def entry_score(
    ratios: Iterable[float], r_max: float = R_MAX, n_workloads: int | None = None
) -> float:
    """The normalised integral of ρ from 1 to ``r_max``, exactly: ρ is a step function,
    so each workload with ratio ``r ≤ r_max`` adds ``(r_max − max(1, r)) / (r_max − 1)``
    over the number of workloads.

    :raises ValueError: for ``r_max <= 1``.
    """
    if not r_max > 1.0:
        raise ValueError(f"r_max must be above 1, got {r_max!r}")
    values = list(ratios)
    n = len(values) if n_workloads is None else n_workloads
    if n <= 0:
        return 0.0
    area = sum(r_max - max(1.0, r) for r in values if r <= r_max)
    return area / (n * (r_max - 1.0))


def profile_steps(
    ratios: Iterable[float], r_max: float = R_MAX, n_workloads: int | None = None
) -> list[tuple[float, float]]:
    """ρ as the corners of its step plot on ``[1, r_max]``: ``(τ, ρ(τ))`` at τ = 1, at each
    ratio inside, and at ``r_max``; ρ holds its value until the next corner."""
    values = list(ratios)
    n = len(values) if n_workloads is None else n_workloads
    taus = sorted({1.0, r_max, *(r for r in values if 1.0 < r < r_max)})
    return [(tau, rho(values, tau, n)) for tau in taus]


@dataclass(frozen=True)
class Speedup:
    """The geometric-mean speed-up of an entry over the baseline (> 1: faster)."""

    baseline: str
    #: ``None`` when the two share no reached workload.
    value: float | None
    #: How many workloads both reached, of how many in the suite.
    workloads: int
    of: int

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types."""
        return {
            "baseline": self.baseline,
            "value": self.value,
            "workloads": self.workloads,
            "of": self.of,
        }


def geometric_speedup(
    times: Mapping[str, float],
    baseline_times: Mapping[str, float],
    *,
    baseline: str = "baseline",
    workloads: Sequence[str] | None = None,
) -> Speedup:
    """The geometric mean over the workloads both reached (finite, positive times) of
    ``baseline time / time``: above 1 the entry is faster than the baseline."""
    names = list(workloads) if workloads is not None else sorted({*times, *baseline_times})
    logs = []
    for w in names:
        t, b = float(times.get(w, math.inf)), float(baseline_times.get(w, math.inf))
        if math.isfinite(t) and math.isfinite(b) and t > 0.0 and b > 0.0:
            logs.append(math.log(b / t))
    value = math.exp(sum(logs) / len(logs)) if logs else None
    return Speedup(baseline, value, len(logs), len(names))


# -- everything at once ----------------------------------------------------------------


@dataclass(frozen=True)
class EntryScore:
    """One entry's line of the score table."""

    entry: str
    algorithm: str
    executor: str
    score: float
    #: Workloads with a finite time, of the suite's.
    reached: int
    workloads: int
    speedup: Speedup | None
    #: ρ's corners on ``[1, r_max]`` (:func:`profile_steps`).
    profile: tuple[tuple[float, float], ...]

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types."""
        return {
            "entry": self.entry,
            "algorithm": self.algorithm,
            "executor": self.executor,
            "score": self.score,
            "workloads_reached": self.reached,
            "workloads": self.workloads,
            "speedup": None if self.speedup is None else self.speedup.to_json(),
            "profile": [{"tau": t, "rho": r} for t, r in self.profile],
        }


@dataclass(frozen=True)
class Scoreboard:
    """The scores of every entry of a set of trials, with what they came from."""

    workloads: tuple[str, ...]
    entries: tuple[EntryScore, ...]
    times: dict[tuple[str, str], WorkloadTime]
    ratios: dict[str, dict[str, float]]
    baseline: str | None
    r_max: float
    #: What makes the comparison uneven (missing studies or trials), one line each.
    warnings: tuple[str, ...] = field(default=())

    def time(self, entry: str, workload: str) -> WorkloadTime | None:
        """The entry's time on the workload; ``None`` when it has no trial there."""
        return self.times.get((entry, workload))

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types: ``r_max``, ``baseline``, ``workloads``, ``entries`` (best
        score first), ``times`` (one per entry and workload, ``null`` time for a miss,
        with its ratio) and ``warnings``."""
        times = []
        for e in self.entries:
            for w in self.workloads:
                found = self.time(e.entry, w)
                item: dict[str, Any] = (
                    found.to_json()
                    if found is not None
                    else {"entry": e.entry, "workload": w, "reached": False, "time_s": None,
                          "study_numbers": [], "study_times_s": [], "interval": None, "trials": 0,
                          "trials_reached": 0}
                )  # fmt: skip
                item["ratio"] = self.ratios[e.entry][w]
                times.append(item)
        return {
            "r_max": self.r_max,
            "baseline": self.baseline,
            "workloads": list(self.workloads),
            "entries": [e.to_json() for e in self.entries],
            "times": times,
            "warnings": list(self.warnings),
        }


def resolve_entry(name: str, entries: Sequence[str]) -> str:
    """The entry ``name`` means: an entry (``adam@torch``) or an algorithm with one entry
    (``adam``).

    :raises UsageError: naming the entries when none or several match.
    """
    if name in entries:
        return name
    matches = [e for e in entries if e.split("@", 1)[0] == name]
    if len(matches) == 1:
        return matches[0]
    shown = ", ".join(entries) or "none"
    if matches:
        raise UsageError(
            f"--baseline {name!r} is ambiguous: it ran on several executors "
            f"({', '.join(matches)}); give one as ALGORITHM@EXECUTOR"
        )
    raise UsageError(f"--baseline {name!r} is not among the scored algorithms ({shown})")


def _coverage_warnings(
    times: Mapping[tuple[str, str], WorkloadTime], entries: Sequence[str], workloads: Sequence[str]
) -> list[str]:
    """Lines for entries with fewer studies or trials than the most any entry has."""
    most_studies = max((len(t.studies) for t in times.values()), default=0)
    most_trials = max((t.trials for t in times.values()), default=0)
    lines = []
    for entry in entries:
        for w in workloads:
            found = times.get((entry, w))
            if found is None:
                lines.append(f"{entry} has no trial on {w}: counted as a miss")
            elif len(found.studies) < most_studies or found.trials < most_trials:
                lines.append(
                    f"{entry} on {w}: {len(found.studies)} of {most_studies} studies, "
                    f"{found.trials} of {most_trials} trials (campaign unfinished?)"
                )
    return lines


def score_trials(
    trials: Iterable[TrialRecord],
    *,
    baseline: str | None = None,
    r_max: float = R_MAX,
    confidence: float = 0.95,
    workloads: Sequence[str] | None = None,
) -> Scoreboard:
    """Score every entry (``ALGORITHM@EXECUTOR``) of ``trials``.

    :param baseline: the entry (or algorithm with one entry) the speed-ups are against.
    :param workloads: the suite's workloads (default: those the trials cover); an entry
        without trials on one counts it as a miss.
    :raises UsageError: for an unknown or ambiguous baseline, or no trial at all.
    """
    records = list(trials)
    if not records:
        raise UsageError("there are no trials to score; run 'd5 bench algorithms' first")
    times = workload_times(records, confidence)
    labels = {r.label: (r.algorithm, r.executor) for r in records}
    names = sorted(labels)
    suite = tuple(workloads) if workloads is not None else tuple(sorted({w for _, w in times}))
    per_entry = {e: {w: times[(e, w)].time for w in suite if (e, w) in times} for e in names}
    ratios = performance_ratios(per_entry, suite)
    base = None if baseline is None else resolve_entry(baseline, names)
    lines = []
    for entry in names:
        values = [ratios[entry][w] for w in suite]
        speedup = (
            None
            if base is None
            else geometric_speedup(per_entry[entry], per_entry[base], baseline=base,
                                   workloads=suite)
        )  # fmt: skip
        algorithm, executor = labels[entry]
        lines.append(
            EntryScore(
                entry=entry,
                algorithm=algorithm,
                executor=executor,
                score=entry_score(values, r_max, len(suite)),
                reached=sum(math.isfinite(per_entry[entry].get(w, math.inf)) for w in suite),
                workloads=len(suite),
                speedup=speedup,
                profile=tuple(profile_steps(values, r_max, len(suite))),
            )
        )
    lines.sort(key=lambda e: (-e.score, e.entry))
    return Scoreboard(
        workloads=suite,
        entries=tuple(lines),
        times=times,
        ratios=ratios,
        baseline=base,
        r_max=float(r_max),
        warnings=tuple(_coverage_warnings(times, names, suite)),
    )
