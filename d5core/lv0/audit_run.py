"""The runner of ``d5 audit op`` and ``d5 audit net``: MLPerf-style audit tests of the
callables d5 times, stored as one run of kind ``audit``.

For each backend (or executor) one set of worker processes runs, in a random order in
each process, five jobs:

- ``base``: the job ``d5 bench`` times, on the seeded inputs;
- ``seed+1``, ``seed+2``: the same on inputs of two other seeds;
- ``fresh``, ``same``: the callable timed call by call, prepared before each call on
  fresh inputs, or on the same input arrays every time (:mod:`d5core.lv0.audit_jobs`).

Every job keeps the outputs of a few randomly chosen timed calls and checks them
against the untimed outputs on the same inputs. Three checks follow, one line each:

- **accuracy while timed** (MLPerf TEST01): every sampled output of every job equals the
  untimed one; a job whose timed callable returns nothing fails it;
- **no caching** (TEST04): repeated inputs may be at most 10% faster than fresh ones
  (or the noise floor, when larger); a larger, significant speed-up (paired t-test on
  the process medians, as ``d5 results compare`` uses) is flagged;
- **seed variation** (TEST05): the medians on other input seeds, in processes whose job
  order is drawn from the order seed, stay within the noise floor of the base one (a
  change is called as ``d5 results compare`` calls one, at a Bonferroni-corrected
  level for the two seeds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5core.errors import UsageError

if TYPE_CHECKING:
    from d5core.measure.invocations import Invocations, Job, JobResult
    from d5core.measure.nested import NestedComparison

__all__ = [
    "AUDIT_PROCESSES",
    "CACHE_LIMIT",
    "CHECKS",
    "ROLES",
    "AuditCheck",
    "AuditOutcome",
    "audit_options",
    "run_audit",
]

#: The jobs of one subject, in the order they are listed.
ROLES = ("base", "seed+1", "seed+2", "fresh", "same")
#: The checks, in the order they are reported.
CHECKS = ("accuracy while timed", "no caching", "seed variation")
#: Repeated inputs may be at most this much faster than fresh ones.
CACHE_LIMIT = 0.10
#: Worker processes by default: the paired test needs 3 (``MIN_PROCESSES``); 5 gives it
#: power on a noisy machine.
AUDIT_PROCESSES = 5
_ACCURACY = "CheckFailed: accuracy while timed failed: "


@dataclass
class AuditCheck:
    """One check of one subject: whether it passed, and one line saying why."""

    subject: str
    check: str
    passed: bool
    line: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "subject": self.subject,
            "check": self.check,
            "passed": self.passed,
            "line": self.line,
            "data": dict(self.data),
        }


@dataclass
class AuditOutcome:
    """What ``d5 audit`` ran and found."""

    run_id: str
    what: str
    checks: list[AuditCheck]
    outcome: Invocations
    noise_floor: float

    @property
    def passed(self) -> bool:
        """Whether every check of every subject passed."""
        return all(c.passed for c in self.checks)


def audit_options(min_samples: int, time_budget: float, warmup: int) -> Any:
    """The engine's options for an audit: every call timed on its own (so that the
    caching check can prepare each call's callable in between), bounded by
    ``min_samples`` and ``time_budget`` per job and process.

    :raises UsageError: for values the engine refuses.
    """
    from d5core.measure.engine import MeasureOptions

    try:
        return MeasureOptions(
            warmup=warmup,
            min_samples=min_samples,
            max_samples=max(min_samples, 2000),
            time_budget_s=time_budget,
            rel_ci=0.0,
            single_event_factor=1e-9,
        )
    except ValueError as exc:
        raise UsageError(f"bad measurement options: {exc}") from None


def _accuracy(subject: str, results: Mapping[str, JobResult]) -> AuditCheck:
    checked = 0
    notes: list[str] = []
    unreadable: list[str] = []
    for role, result in results.items():
        if result.error is not None:
            error = result.error
            if error.startswith(_ACCURACY):
                line = f"{role} job: {error[len(_ACCURACY) :]}"
            else:
                line = f"{role} job failed, nothing to check: {error}"
            return AuditCheck(subject, CHECKS[0], False, line, {"role": role})
        for run in result.runs:
            found = run.measurement.details.get("timed_accuracy") or {}
            checked += int(found.get("checked") or 0)
            if found.get("status") == "unchecked" and found.get("detail"):
                detail = str(found["detail"])
                (notes if "random" in detail else unreadable).append(f"{role} job: {detail}")
    if unreadable:  # an audit that cannot look fails: d5 cannot confirm the outputs
        return AuditCheck(subject, CHECKS[0], False, f"not checked: {unreadable[0]}")
    if notes and not checked:
        return AuditCheck(subject, CHECKS[0], True, f"not checked: {notes[0]}", {"checked": 0})
    line = f"{checked} sampled timed calls in {len(results)} jobs match the untimed outputs"
    return AuditCheck(subject, CHECKS[0], True, line, {"checked": checked})


def _compare(base: JobResult, other: JobResult, **kwargs: Any) -> NestedComparison | None:
    from d5core.measure.nested import compare_nested

    if base.summary is None or other.summary is None:
        return None
    paired = len(base.runs) == len(other.runs) and {r.round for r in base.runs} == {
        r.round for r in other.runs
    }
    return compare_nested(base.summary, other.summary, paired=paired, **kwargs)


def _caching(subject: str, results: Mapping[str, JobResult], floor: float) -> AuditCheck:
    limit = max(CACHE_LIMIT, floor)
    found = _compare(results["fresh"], results["same"], min_effect=limit, lower_is_better=True)
    if found is None:
        failed = [r for r in ("fresh", "same") if results[r].error is not None]
        return AuditCheck(
            subject, CHECKS[1], False, f"not measured: the {' and '.join(failed)} job failed"
        )
    faster = 1.0 - found.ratio
    data = {
        "ratio": found.ratio,
        "ratio_ci_low": found.ratio_ci_low,
        "ratio_ci_high": found.ratio_ci_high,
        "p_value": found.p_value,
        "limit": limit,
    }
    ci = ""
    if found.ratio_ci_low is not None and found.ratio_ci_high is not None:
        ci = f" [{found.ratio_ci_low:.3f}, {found.ratio_ci_high:.3f}]"
    what = f"same/fresh inputs = {found.ratio:.3f}{ci} over {found.n_candidate} processes"
    if found.verdict == "better":
        line = (f"repeated inputs ran {100 * faster:.0f}% faster than fresh ones ({what}; "
                f"limit {100 * limit:.0f}%): the backend caches results")  # fmt: skip
        return AuditCheck(subject, CHECKS[1], False, line, data)
    return AuditCheck(subject, CHECKS[1], True, f"{what}: within {100 * limit:.0f}%", data)


def _seeds(subject: str, results: Mapping[str, JobResult], floor: float) -> AuditCheck:
    from d5core.measure.nested import DEFAULT_NESTED_ALPHA

    worst: tuple[float, str] = (0.0, "")
    data: dict[str, Any] = {}
    roles = ("seed+1", "seed+2")
    alpha = DEFAULT_NESTED_ALPHA / len(roles)  # Bonferroni: two comparisons, one verdict
    for role in roles:
        found = _compare(
            results["base"], results[role], min_effect=floor, lower_is_better=None, alpha=alpha
        )
        if found is None:
            return AuditCheck(subject, CHECKS[2], False, f"not measured: the {role} job failed")
        data[f"{role} ratio"] = found.ratio
        if found.verdict != "same":
            line = (f"inputs of {role} ran at {found.ratio:.3f} times the base seed's median, "
                    f"beyond the noise floor of {100 * floor:.1f}% ({found.reason})")  # fmt: skip
            return AuditCheck(subject, CHECKS[2], False, line, data)
        worst = max(worst, (abs(found.ratio - 1.0), f"{role}: {found.ratio:.3f}"))
    line = f"other seeds within the noise floor of {100 * floor:.1f}% (worst {worst[1]})"
    return AuditCheck(subject, CHECKS[2], True, line, data)


def run_audit(
    what: str,
    jobs: Mapping[str, Mapping[str, Job]],
    *,
    config: Mapping[str, Any],
    processes: int = AUDIT_PROCESSES,
    options: Any = None,
    seed: int = 0,
    cpus: list[int] | None = None,
    db: str | Path | None = None,
    tags: Sequence[str] = (),
    timeout: float | None = None,
    on_process: Callable[[Any], None] | None = None,
) -> AuditOutcome:
    """Run the audit ``jobs`` (subject -> role -> job, the roles of :data:`ROLES`) in
    fresh worker processes and store the checks as one run of kind ``audit``.

    :param what: the run's title, e.g. ``"audit op Relu"``.
    :param seed: seeds the job order within each process.
    :raises UsageError: for bad input, before any worker starts.
    """
    from d5core.lv0.bench_common import noise_floor
    from d5core.measure.invocations import run_invocations
    from d5core.measure.nested import MIN_PROCESSES
    from d5core.results.store import ResultsStore

    if processes < MIN_PROCESSES:
        raise UsageError(
            f"--processes must be at least {MIN_PROCESSES} for the audit's paired tests, "
            f"got {processes}"
        )
    options = options if options is not None else audit_options(20, 0.3, 3)
    flat: list[Job] = []
    index: dict[tuple[str, str], int] = {}
    for subject, roles in jobs.items():
        for role in ROLES:
            index[(subject, role)] = len(flat)
            flat.append(roles[role])
    with ResultsStore.open(db) as store:
        found_floor = noise_floor(store, cpus)
        floor = found_floor.machine_floor if found_floor is not None else 0.05
        full = {**config, "processes": processes, "measure": options.to_json(),
                "noise_floor": floor, "cache_limit": CACHE_LIMIT}  # fmt: skip
        with store.run("audit", what, config=full, seed=seed, tags=tuple(tags)) as run_id:
            outcome = run_invocations(
                flat, processes=processes, options=options, seed=seed,
                min_processes=processes, cpus=cpus, on_process=on_process, timeout_s=timeout,
            )  # fmt: skip
            checks: list[AuditCheck] = []
            for subject in jobs:
                results = {role: outcome.jobs[index[(subject, role)]] for role in ROLES}
                checks += [
                    _accuracy(subject, results),
                    _caching(subject, results, floor),
                    _seeds(subject, results, floor),
                ]
                for role, result in results.items():
                    if result.summary is not None:
                        store.add_metric(
                            run_id, "audit_time", result.summary.median,
                            labels={"subject": subject, "role": role}, unit="s",
                        )  # fmt: skip
            for c in checks:
                store.add_metric(
                    run_id, "audit_passed", 1.0 if c.passed else 0.0,
                    labels={"subject": c.subject, "check": c.check}, better="higher",
                )  # fmt: skip
            store.update_config(
                run_id,
                {"checks": [c.to_json() for c in checks], "order_seed": outcome.seed,
                 "rounds": [r.to_json() for r in outcome.rounds],
                 "stopped_by": outcome.stopped_by},
            )  # fmt: skip
    return AuditOutcome(run_id, what, checks, outcome, floor)
