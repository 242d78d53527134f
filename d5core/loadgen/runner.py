"""The scenario runner: every executor of a request under MLPerf LoadGen, stored as one run.

What ``d5 bench net --scenario`` and an inference recipe (:mod:`d5core.loadgen.recipe`)
both run. :func:`scenario_settings` and :func:`scenario_request` check the input before
anything runs; :func:`run_request` runs each executor in a fresh worker process
(:func:`d5core.loadgen.loadgen.run_scenario`), with its peak search and accuracy run when
asked, and owns the store transaction: one run of kind ``inference``, each executor's
figures stored by :func:`d5core.loadgen.store.store_scenario` and its LoadGen logs kept
as the run's artifacts. :func:`failures` and :func:`outcome_row` say what the outcomes
mean, for the command and the recipe to show.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5core.errors import D5Error, UsageError

if TYPE_CHECKING:
    from d5core.loadgen.loadgen import ScenarioResult
    from d5core.loadgen.settings import ScenarioSettings

__all__ = [
    "ExecutorOutcome",
    "ScenarioRequest",
    "failures",
    "not_satisfied",
    "outcome_row",
    "peak_json",
    "run_request",
    "scenario_request",
    "scenario_settings",
]


def scenario_settings(
    scenario: str,
    *,
    mode: str = "performance",
    target_qps: float | None = None,
    latency_bound_ms: float | None = None,
    samples_per_query: int | None = None,
    expected_qps: float | None = None,
    min_duration_s: float | None = None,
    min_query_count: int | None = None,
    seed: int = 0,
    threads: int | None = None,
    performance_sample_count: int | None = None,
) -> ScenarioSettings:
    """Checked settings of one scenario; a setting left ``None`` keeps its default.

    :raises UsageError: one line naming the bad setting (a negative QPS, a latency bound
        of 0, an unknown scenario, ...).
    """
    from d5core.loadgen.settings import DEFAULT_SERVER_MIN_QUERY_COUNT, ScenarioSettings

    given: dict[str, Any] = {
        "target_qps": target_qps,
        "latency_bound_ms": latency_bound_ms,
        "samples_per_query": samples_per_query,
        "expected_qps": expected_qps,
        "min_duration_s": min_duration_s,
        "min_query_count": min_query_count,
        "threads": threads,
        "performance_sample_count": performance_sample_count,
    }
    kwargs = {k: v for k, v in given.items() if v is not None}
    if scenario == "server" and min_query_count is None:
        kwargs["min_query_count"] = DEFAULT_SERVER_MIN_QUERY_COUNT
    settings = ScenarioSettings(scenario=scenario, mode=mode, seed=seed, **kwargs)
    settings.check()
    return settings


@dataclass(frozen=True)
class ScenarioRequest:
    """What one ``d5 bench net --scenario`` invocation (or inference recipe) runs."""

    model: str
    executors: tuple[str, ...]
    settings: ScenarioSettings
    batch: int | None = None
    find_peak: bool = False
    accuracy: bool = False

    def config(self) -> dict[str, Any]:
        """What the stored run's config records of the request."""
        return {
            "model": self.model,
            "executors": list(self.executors),
            "batch": self.batch,
            "scenario": self.settings.scenario,
            "settings": self.settings.to_json(),
            "find_peak": self.find_peak,
            "accuracy": self.accuracy,
        }


def scenario_request(
    model: str,
    executors: Sequence[str],
    settings: ScenarioSettings,
    *,
    batch: int | None = None,
    find_peak: bool = False,
    accuracy: bool = False,
) -> ScenarioRequest:
    """A checked request: the model loads, every executor exists, and ``--find-peak``
    asks for the server scenario under a latency bound.

    :raises UsageError: for anything that would make the run fail before it starts.
    """
    from d5core.lv1.runner import executor_by_name, load_model

    if not executors:
        raise UsageError("give at least one executor, e.g. --executors numpy,torch")
    if len(set(executors)) != len(executors):
        raise UsageError(f"--executors names an executor twice: {','.join(executors)}")
    if batch is not None and batch < 1:
        raise UsageError(f"--batch must be a positive number of samples, got {batch}")
    if find_peak and settings.scenario != "server":
        raise UsageError(
            f"--find-peak searches the server scenario's QPS, not {settings.scenario}'s; "
            "use --scenario server"
        )
    if find_peak and settings.latency_bound_ms is None:
        raise UsageError(
            "--find-peak needs the latency bound a VALID run must meet; add --latency-bound MS"
        )
    network = load_model(model)
    for name in executors:
        executor_by_name(name, network)
    return ScenarioRequest(
        model=model,
        executors=tuple(executors),
        settings=settings,
        batch=batch,
        find_peak=find_peak,
        accuracy=accuracy,
    )


@dataclass
class ExecutorOutcome:
    """Everything one executor's part of a request gave."""

    executor: str
    result: ScenarioResult
    #: :class:`~d5core.loadgen.peak.PeakResult` with ``--find-peak``.
    peak: Any = None
    #: The AccuracyOnly run with ``--accuracy``, and its check.
    accuracy_result: ScenarioResult | None = None
    accuracy: dict[str, Any] | None = None
    #: Where the performance run's LoadGen logs are kept (the run's artifacts), once
    #: stored.
    kept_logs: str | None = None
    #: The peak search as stored (its logs' kept directories), once stored.
    peak_json: dict[str, Any] | None = None


def _run_one(
    request: ScenarioRequest,
    executor: str,
    logs: Path,
    *,
    progress: Callable[[str], None] | None,
) -> ExecutorOutcome:
    """Run ``executor``'s performance run, then its peak search and accuracy run."""
    from d5core.loadgen.loadgen import run_scenario

    def say(line: str) -> None:
        if progress is not None:
            progress(line)

    settings = request.settings
    say(f"{executor}: {settings.scenario} scenario under LoadGen")
    result = run_scenario(
        request.model, executor, settings, logs / executor / "performance", batch=request.batch
    )
    outcome = ExecutorOutcome(executor, result)
    if request.find_peak:
        from d5core.loadgen.peak import find_peak

        say(f"{executor}: searching the peak server QPS")
        outcome.peak = find_peak(
            request.model, executor, settings, logs / executor / "peak", batch=request.batch
        )
    if request.accuracy:
        from d5core.loadgen.accuracy import check_accuracy

        say(f"{executor}: accuracy run")
        wanted = dataclasses.replace(settings, mode="accuracy")
        checked = run_scenario(
            request.model, executor, wanted, logs / executor / "accuracy", batch=request.batch
        )
        outcome.accuracy_result = checked
        outcome.accuracy = check_accuracy(request.model, checked)
    return outcome


def _store(store: Any, run_id: str, request: ScenarioRequest, outcome: ExecutorOutcome) -> None:
    """Store one executor's results in the run ``run_id``: the performance run by
    :func:`~d5core.loadgen.store.store_scenario`; the peak (metric ``peak_server_qps``)
    and the accuracy check (metric ``accuracy_passed``) here, their LoadGen logs kept
    under ``peak/`` and ``accuracy/`` of the executor's artifacts, their facts under the
    config keys ``peak`` and ``accuracy_check``."""
    from d5core.loadgen.store import keep_logs, store_scenario

    labels = {"executor": outcome.executor, "scenario": request.settings.scenario}
    facts = store_scenario(store, run_id, outcome.result, request.model)
    outcome.kept_logs = str(facts["artifacts"])
    kept = outcome.kept_logs
    extra: dict[str, Any] = {}
    if outcome.peak is not None:
        peak = outcome.peak
        if peak.qps is not None:
            store.add_metric(
                run_id, "peak_server_qps", float(peak.qps), labels=labels, unit="queries/s",
                better="higher",
            )  # fmt: skip
        searched = peak_json(peak)
        kept_dirs = []
        for tried in searched.get("log_dirs", []):
            target = f"{kept}peak/{Path(tried).name}/"
            keep_logs(store, run_id, tried, target)
            kept_dirs.append(target)
        searched["log_dirs"] = kept_dirs
        outcome.peak_json = searched
        extra["peak"] = {outcome.executor: searched}
    if outcome.accuracy is not None and outcome.accuracy_result is not None:
        passed = bool(outcome.accuracy.get("passed"))
        store.add_metric(
            run_id, "accuracy_passed", 1.0 if passed else 0.0, labels=labels, better="higher"
        )
        keep_logs(store, run_id, outcome.accuracy_result.log_dir, f"{kept}accuracy/")
        extra["accuracy_check"] = {
            outcome.executor: {**outcome.accuracy, "artifacts": f"{kept}accuracy/"}
        }
    if extra:
        current = store.get_run(run_id).config
        store.update_config(
            run_id, {key: {**(current.get(key) or {}), **value} for key, value in extra.items()}
        )


def peak_json(peak: Any) -> dict[str, Any]:
    """The peak search as JSON (:meth:`~d5core.loadgen.peak.PeakResult.to_json`)."""
    found: dict[str, Any] = peak.to_json()
    return found


def run_request(
    request: ScenarioRequest,
    *,
    db: str | Path | None = None,
    tags: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
    on_executor: Callable[[Any, str, ExecutorOutcome], None] | None = None,
    extra_config: Mapping[str, Any] | None = None,
    recipe_hash: str | None = None,
    trace: str | None = None,
) -> tuple[str, list[ExecutorOutcome]]:
    """Run every executor of ``request`` and store them in one ``inference`` run.

    The database is checked writable before anything runs. An executor that fails in
    its worker stops the run (stored ``failed`` with what it had): the error is raised.

    :param progress: called with a line as each executor's part starts (``None``: quiet).
    :param on_executor: called with the store, the run id and each
        :class:`ExecutorOutcome` once it is stored, while the run is still open.
    :param extra_config: joins the run's config (an inference recipe's sections).
    :param recipe_hash: stored with the run (an inference recipe's hash).
    :param trace: a trace level: after the LoadGen runs, each executor's inference is
        traced in extra, untimed steps in this process (at ``full`` with LoadGen's own
        query events of the performance run), and the trace kept with the run.
    :returns: the run id and each executor's outcome, in the order of ``request``.
    """
    from d5core.results.store import ResultsStore

    name = f"inference {request.model} {request.settings.scenario}"
    outcomes: list[ExecutorOutcome] = []
    with ResultsStore.open(db) as store:
        store.require_writable()
        with (
            tempfile.TemporaryDirectory(prefix="d5-loadgen-") as tmp,
            store.run(
                "inference", name,
                config={**request.config(), **(extra_config or {}),
                        **({"trace": trace} if trace else {})},
                seed=request.settings.seed, recipe_hash=recipe_hash, tags=tags,
            ) as run_id,
        ):  # fmt: skip
            for executor in request.executors:
                try:
                    outcome = _run_one(request, executor, Path(tmp), progress=progress)
                except D5Error as exc:  # the run ends failed, what came before kept
                    from d5core.loadgen.store import record_failure

                    scenario = request.settings.scenario
                    record_failure(store, run_id, request.model, scenario, executor, str(exc))
                    raise
                _store(store, run_id, request, outcome)
                outcomes.append(outcome)
                if on_executor is not None:
                    on_executor(store, run_id, outcome)
            if trace is not None:
                from d5core.loadgen.traced import trace_scenario

                trace_scenario(store, str(run_id), trace, request, outcomes)
    return str(run_id), outcomes


def not_satisfied(checks: Sequence[str]) -> str:
    """LoadGen's failed checks (named ``Min duration satisfied``) as what went wrong,
    joined by ``; ``: ``Min duration not satisfied``."""
    return "; ".join(c.replace(" satisfied", " not satisfied", 1) for c in checks)


def failures(outcomes: Sequence[ExecutorOutcome]) -> list[str]:
    """What failed, one line per failing executor: INVALID, no peak found, or a failed
    accuracy check (an empty list: every executor passed)."""
    found = []
    for o in outcomes:
        why = []
        if o.result.valid is not True or o.result.failed_checks:
            checks = not_satisfied(o.result.failed_checks)
            why.append("INVALID" + (f" ({checks})" if checks else ""))
        if o.peak is not None and not o.peak.qps:
            why.append("no VALID server QPS found under the latency bound")
        if o.accuracy is not None and not o.accuracy.get("passed"):
            why.append(f"accuracy check failed ({o.accuracy.get('message', '')})")
        if why:
            found.append(f"{o.executor}: {', '.join(why)}")
    return found


def outcome_row(run_id: str, model: str, outcome: ExecutorOutcome) -> dict[str, Any]:
    """One executor as ``d5 bench net --scenario --json`` prints it (``docs/json.md``,
    ``d5 bench net scenario``)."""
    r = outcome.result
    return {
        "run_id": run_id,
        "model": model,
        "executor": outcome.executor,
        "scenario": r.scenario,
        "mode": r.mode,
        "valid": r.valid,
        "failed_checks": list(r.failed_checks),
        "metric": r.metric_name,
        "metric_value": r.metric_value,
        "percentiles_s": dict(r.percentiles_s),
        "qps_with_overhead": r.qps_with_overhead,
        "qps_without_overhead": r.qps_without_overhead,
        "early_stopping": dict(r.early_stopping),
        "samples_issued": r.samples_issued,
        "threads": dict(r.threads),
        "settings": r.settings.to_json(),
        "log_dir": str(r.log_dir),
        "peak": None if outcome.peak is None else outcome.peak_json or peak_json(outcome.peak),
        "accuracy": outcome.accuracy,
    }
