"""Trial records: one stored run per trial of ``d5 bench algorithms``.

A trial is one training of one workload by one algorithm (on one executor) with one
point of its search space, in one study of a campaign. Whatever happened to the training
(it reached the target, ran out of budget, diverged, crashed, was killed) the runner
stores one run of kind :data:`TRIAL_KIND`, named ``SUITE/WORKLOAD/ALGORITHM``, whose
config is :meth:`TrialRecord.to_config` and whose scalar metrics are ``eval_time`` (the
seconds spent evaluating) and, when the target was reached, ``time_to_target`` (the
training seconds to it, evaluation excluded). The run itself always finishes
``complete``: a missed target is a result, not a failure of the record; the outcome is
in the config.

What the scoring reads back is :func:`load_trials`; what the runner skips on a rerun is
:func:`finished` (a trial recorded for the campaign is never run again).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from d5core.errors import UsageError

if TYPE_CHECKING:
    from d5core.results.store import ResultsStore

__all__ = [
    "OUTCOMES",
    "RULESETS",
    "TRIAL_KIND",
    "TrialKey",
    "TrialRecord",
    "finished",
    "load_trials",
    "record_trial",
]

#: The kind of the runs that hold trial records.
TRIAL_KIND = "algorithm-trial"
#: What became of a trial: only ``reached`` counts as reaching the target.
OUTCOMES: tuple[str, ...] = ("reached", "missed", "diverged", "failed", "over_budget")
#: AlgoPerf's tuning rulesets: ``external`` (trials drawn from the search space) and
#: ``self`` (one trial at the space's defaults with 1.5 times the budget).
RULESETS: tuple[str, ...] = ("external", "self")

#: What identifies a trial within a campaign: (workload, algorithm, executor, study, trial).
TrialKey = tuple[str, str, str, int, int]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrialRecord:
    """One trial of a campaign, as the runner stores it and the scoring reads it."""

    #: The campaign's id: a hash of (suite hash, algorithms, ruleset, studies, trials, seed).
    campaign: str
    #: The suite's name and the hash of its content.
    suite: str
    suite_hash: str
    #: The workload's name within the suite.
    workload: str
    #: The algorithm's name (a ``d5.algorithms`` entry or a baseline optimizer).
    algorithm: str
    #: The executor the trial trained on (the recipe's when none was chosen); ``""``: unknown.
    executor: str
    #: ``external`` or ``self``.
    ruleset: str
    #: The study (from 0) and the trial within it (from 0).
    study: int
    trial: int
    #: The seed the training ran with.
    seed: int
    #: The point of the search space the trial used.
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    #: The training-time budget (seconds, evaluation excluded) and the target
    #: (``{"accuracy": 0.93}``, ``{"loss": 0.05}``, ...).
    budget_s: float = math.nan
    target: dict[str, Any] = field(default_factory=dict)
    #: The id of the stored training run (``None``: none was stored, as for a crash).
    training_run: str | None = None
    #: One of :data:`OUTCOMES`.
    outcome: str = "failed"
    #: Training seconds to the target, evaluation excluded; ``None`` unless reached.
    time_to_target_s: float | None = None
    #: Seconds spent evaluating.
    eval_s: float = 0.0
    #: What happened, in words (the error of a failed trial, why it stopped).
    message: str = ""
    #: The id of the stored trial run and when it was stored (set when read back).
    run_id: str | None = field(default=None, compare=False)
    created: str | None = field(default=None, compare=False)

    @property
    def key(self) -> TrialKey:
        """(workload, algorithm, executor, study, trial): the trial within its campaign."""
        return (self.workload, self.algorithm, self.executor, self.study, self.trial)

    @property
    def label(self) -> str:
        """The entry the trial scores for: ``ALGORITHM@EXECUTOR`` (the algorithm alone
        when the executor is unknown), so one algorithm on two frameworks is two entries."""
        return f"{self.algorithm}@{self.executor}" if self.executor else self.algorithm

    @property
    def reached(self) -> bool:
        """Whether the trial reached its target within its budget."""
        return self.outcome == "reached" and _finite(self.time_to_target_s)

    @property
    def time(self) -> float:
        """The time to target in seconds; ``math.inf`` for a trial that did not reach it."""
        t = self.time_to_target_s
        return float(t) if t is not None and self.reached else math.inf

    def to_config(self) -> dict[str, Any]:
        """The stored run's config (what :meth:`from_config` reads back)."""
        return {
            "campaign": self.campaign,
            "suite": self.suite,
            "suite_hash": self.suite_hash,
            "workload": self.workload,
            "algorithm": self.algorithm,
            "executor": self.executor,
            "ruleset": self.ruleset,
            "study": self.study,
            "trial": self.trial,
            "seed": self.seed,
            "hyperparameters": dict(self.hyperparameters),
            "budget_s": self.budget_s,
            "target": dict(self.target),
            "training_run": self.training_run,
            "outcome": self.outcome,
            "time_to_target_s": self.time_to_target_s,
            "eval_s": self.eval_s,
            "message": self.message,
        }

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any], *, run_id: str | None = None, created: str | None = None
    ) -> TrialRecord:
        """The record a stored run's config holds.

        :raises UsageError: naming the first missing or ill-typed key.
        """
        try:
            ttt = config.get("time_to_target_s")
            return cls(
                campaign=str(config["campaign"]),
                suite=str(config["suite"]),
                suite_hash=str(config.get("suite_hash") or ""),
                workload=str(config["workload"]),
                algorithm=str(config["algorithm"]),
                executor=str(config.get("executor") or ""),
                ruleset=str(config.get("ruleset") or "external"),
                study=int(config["study"]),
                trial=int(config["trial"]),
                seed=int(config.get("seed") or 0),
                hyperparameters=dict(config.get("hyperparameters") or {}),
                budget_s=_number(config.get("budget_s")),
                target=dict(config.get("target") or {}),
                training_run=config.get("training_run") or None,
                outcome=str(config.get("outcome") or "failed"),
                time_to_target_s=None if ttt is None else float(ttt),
                eval_s=_number(config.get("eval_s"), 0.0),
                message=str(config.get("message") or ""),
                run_id=run_id,
                created=created,
            )
        except KeyError as exc:
            what = f"lacks the key {exc.args[0]!r}"
        except (TypeError, ValueError) as exc:
            what = f"has an ill-typed value: {exc}"
        raise UsageError(f"trial record {run_id or '?'} {what}")


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(float(value))


def _number(value: Any, default: float = math.nan) -> float:
    return default if value is None else float(value)


def _check(record: TrialRecord) -> None:
    """One-line errors for a record the scoring could not read back as meant."""
    if record.outcome not in OUTCOMES:
        raise UsageError(f"trial outcome {record.outcome!r} is not one of {', '.join(OUTCOMES)}")
    if record.ruleset not in RULESETS:
        raise UsageError(f"trial ruleset {record.ruleset!r} is not one of {', '.join(RULESETS)}")
    if record.study < 0 or record.trial < 0:
        raise UsageError(f"trial study {record.study} and trial {record.trial} must be 0 or more")
    if not record.campaign or not record.suite or not record.workload or not record.algorithm:
        raise UsageError("a trial record needs its campaign, suite, workload and algorithm")
    if record.outcome == "reached" and not (
        _finite(record.time_to_target_s) and float(record.time_to_target_s or 0.0) >= 0.0
    ):
        raise UsageError(
            f"trial {record.key} reached its target but has no time to target "
            f"({record.time_to_target_s!r}); give the training seconds to the target"
        )


def record_trial(
    store: ResultsStore,
    record: TrialRecord,
    *,
    environment: Mapping[str, Any] | None = None,
    tags: Sequence[str] = (),
) -> str:
    """Store ``record`` as a finished run of kind :data:`TRIAL_KIND`; return its id.

    The run is named ``SUITE/WORKLOAD/ALGORITHM`` and carries the trial's seed; its
    metrics are ``eval_time`` (s) and, for a reached target, ``time_to_target`` (s,
    evaluation excluded). ``environment`` is the one to store (captured now when
    ``None``, as :meth:`ResultsStore.begin_run` does).

    :raises UsageError: for an unknown outcome or ruleset, a negative study or trial, or
        a reached target without a finite time.
    """
    _check(record)
    run_id = store.begin_run(
        TRIAL_KIND,
        f"{record.suite}/{record.workload}/{record.algorithm}",
        config=record.to_config(),
        environment=environment,
        seed=record.seed,
        tags=tags,
    )
    try:
        if record.reached:
            store.add_metric(
                run_id, "time_to_target", record.time, unit="s", better="lower",
                labels={"workload": record.workload},
            )  # fmt: skip
        store.add_metric(
            run_id, "eval_time", float(record.eval_s), unit="s", better="lower",
            labels={"workload": record.workload},
        )  # fmt: skip
    except BaseException as exc:
        store.finish_run(run_id, "failed", f"trial record not written: {exc}")
        raise
    store.finish_run(run_id, "complete")
    return run_id


def load_trials(
    store: ResultsStore, *, campaign: str | None = None, suite: str | None = None
) -> list[TrialRecord]:
    """The trial records in ``store``, oldest first; only those of ``campaign`` and
    ``suite`` when given.

    Only runs that finished ``complete`` count (a record whose writer died half-way is
    not a trial). A trial recorded twice for one campaign (two runners at once) counts
    once: the first record. A run of the kind whose config is not a trial record is left
    out with a warning.
    """
    found: list[TrialRecord] = []
    seen: set[tuple[str, TrialKey]] = set()
    for run in reversed(store.list_runs(kind=TRIAL_KIND)):
        if run.status != "complete":
            continue
        config = run.config
        if campaign is not None and config.get("campaign") != campaign:
            continue
        if suite is not None and config.get("suite") != suite:
            continue
        try:
            record = TrialRecord.from_config(config, run_id=run.id, created=run.created)
        except UsageError as exc:
            _log.warning("skipped run %s: %s", run.id, exc)
            continue
        if (record.campaign, record.key) in seen:
            continue
        seen.add((record.campaign, record.key))
        found.append(record)
    return found


def finished(store: ResultsStore, campaign: str) -> set[TrialKey]:
    """The trials of ``campaign`` already recorded, as
    ``(workload, algorithm, executor, study, trial)``: what a resumed campaign skips."""
    return {record.key for record in load_trials(store, campaign=campaign)}
