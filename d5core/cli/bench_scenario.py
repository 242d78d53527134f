"""``d5 bench net MODEL --scenario S``: a network under MLPerf LoadGen, executor by executor.

Each executor runs the scenario in a fresh worker process
(:func:`d5core.inference.loadgen.run_scenario`); all of them are stored in one run of
kind ``inference`` (:func:`d5core.inference.store.store_scenario`) and shown side by side
in one table: VALID or INVALID with LoadGen's failed checks, the scenario's metric, the
latency percentiles, QPS with and without LoadGen's overhead, the early-stopping estimate
and the threads. ``--find-peak`` adds the highest VALID server QPS
(:func:`d5core.inference.peak.find_peak`), ``--accuracy`` an AccuracyOnly run whose
logged outputs are checked against the reference executor
(:func:`d5core.inference.accuracy.check_accuracy`).

Every setting is checked before anything runs or is stored: a bad one is a one-line
:class:`~d5core.errors.UsageError` (exit 2). The command exits 1 when an executor's run
is INVALID, misses a bound, finds no VALID server QPS, or fails its accuracy check.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from d5core.errors import CheckFailed, D5Error, UsageError

if TYPE_CHECKING:
    from d5core.inference.loadgen import ScenarioResult
    from d5core.inference.settings import ScenarioSettings

__all__ = [
    "SCENARIO_FLAGS",
    "TIMING_OPTIONS",
    "ExecutorOutcome",
    "ScenarioRequest",
    "check_no_scenario_options",
    "failures",
    "outcome_row",
    "outcome_table",
    "run_command",
    "run_inference_command",
    "run_request",
    "scenario_command",
    "scenario_options",
    "scenario_request",
    "scenario_settings",
]

#: The options that only mean something with ``--scenario``: parameter name -> flag.
SCENARIO_FLAGS: dict[str, str] = {
    "target_qps": "--target-qps",
    "latency_bound": "--latency-bound",
    "samples_per_query": "--samples-per-query",
    "expected_qps": "--expected-qps",
    "min_duration": "--min-duration",
    "min_query_count": "--min-query-count",
    "threads": "--threads",
    "find_peak": "--find-peak",
    "accuracy": "--accuracy",
}

#: The options of ``d5 bench net``'s timing that a LoadGen scenario does not use: given
#: with ``--scenario`` they are refused rather than ignored.
TIMING_OPTIONS: dict[str, str] = {
    "breakdown": "--breakdown",
    "processes": "--processes",
    "cpus": "--cpus",
    "min_samples": "--min-samples",
    "max_samples": "--max-samples",
    "time_budget": "--time-budget",
    "rel_ci": "--rel-ci",
    "warmup": "--warmup",
}


def check_no_scenario_options(values: Mapping[str, Any]) -> None:
    """Refuse scenario options given without ``--scenario``.

    :param values: the command's parameters by name (``None`` or ``False``: not given).
    :raises UsageError: naming the first such option.
    """
    given = [flag for name, flag in SCENARIO_FLAGS.items() if values.get(name) not in (None, False)]
    if given:
        raise UsageError(
            f"{given[0]} is a setting of a LoadGen scenario; add --scenario "
            "single-stream|multi-stream|server|offline, or leave it out"
        )


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
    from d5core.inference.settings import DEFAULT_SERVER_MIN_QUERY_COUNT, ScenarioSettings

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
    from d5core.runners.networks import executor_by_name, load_model

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
    #: :class:`~d5core.inference.peak.PeakResult` with ``--find-peak``.
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
    request: ScenarioRequest, executor: str, logs: Path, *, quiet: bool
) -> ExecutorOutcome:
    """Run ``executor``'s performance run, then its peak search and accuracy run."""
    from d5core.inference.loadgen import run_scenario

    def say(line: str) -> None:
        if not quiet:
            click.echo(f"d5: {line}", err=True)

    settings = request.settings
    say(f"{executor}: {settings.scenario} scenario under LoadGen")
    result = run_scenario(
        request.model, executor, settings, logs / executor / "performance", batch=request.batch
    )
    outcome = ExecutorOutcome(executor, result)
    if request.find_peak:
        from d5core.inference.peak import find_peak

        say(f"{executor}: searching the peak server QPS")
        outcome.peak = find_peak(
            request.model, executor, settings, logs / executor / "peak", batch=request.batch
        )
    if request.accuracy:
        from d5core.inference.accuracy import check_accuracy

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
    :func:`~d5core.inference.store.store_scenario`; the peak (metric ``peak_server_qps``)
    and the accuracy check (metric ``accuracy_passed``) here, their LoadGen logs kept
    under ``peak/`` and ``accuracy/`` of the executor's artifacts, their facts under the
    config keys ``peak`` and ``accuracy_check``."""
    from d5core.inference.store import artifacts_dir, copy_logs, store_scenario

    labels = {"executor": outcome.executor, "scenario": request.settings.scenario}
    facts = store_scenario(store, run_id, outcome.result, request.model)
    outcome.kept_logs = str(facts.get("log_dir", outcome.result.log_dir))
    kept = artifacts_dir(store.path, run_id) / outcome.executor
    extra: dict[str, Any] = {}
    if outcome.peak is not None:
        peak = outcome.peak
        if peak.qps is not None:
            store.add_metric(
                run_id, "peak_server_qps", float(peak.qps), labels=labels, unit="queries/s",
                better="higher",
            )  # fmt: skip
        searched = _peak_json(peak)
        kept_dirs = []
        for tried in searched.get("log_dirs", []):
            target = kept / "peak" / Path(tried).name
            copy_logs(tried, target)
            kept_dirs.append(str(target))
        searched["log_dirs"] = kept_dirs
        outcome.peak_json = searched
        extra["peak"] = {outcome.executor: searched}
    if outcome.accuracy is not None and outcome.accuracy_result is not None:
        passed = bool(outcome.accuracy.get("passed"))
        store.add_metric(
            run_id, "accuracy_passed", 1.0 if passed else 0.0, labels=labels, better="higher"
        )
        copy_logs(outcome.accuracy_result.log_dir, kept / "accuracy")
        extra["accuracy_check"] = {
            outcome.executor: {**outcome.accuracy, "log_dir": str(kept / "accuracy")}
        }
    if extra:
        current = store.get_run(run_id).config
        store.update_config(
            run_id, {key: {**(current.get(key) or {}), **value} for key, value in extra.items()}
        )


def _peak_json(peak: Any) -> dict[str, Any]:
    """The peak search as JSON: :meth:`~d5core.inference.peak.PeakResult.to_json`."""
    found: dict[str, Any] = peak.to_json()
    return found


def run_request(
    request: ScenarioRequest,
    *,
    db: Path | None = None,
    tags: Sequence[str] = (),
    quiet: bool = False,
    on_executor: Any = None,
    extra_config: Mapping[str, Any] | None = None,
    recipe_hash: str | None = None,
) -> tuple[str, list[ExecutorOutcome]]:
    """Run every executor of ``request`` and store them in one ``inference`` run.

    The database is checked writable before anything runs. An executor that fails in
    its worker stops the run (stored ``failed`` with what it had): the error is raised.

    :param on_executor: called with the store, the run id and each
        :class:`ExecutorOutcome` once it is stored, while the run is still open.
    :param extra_config: joins the run's config (an inference recipe's sections).
    :param recipe_hash: stored with the run (an inference recipe's hash).
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
                "inference", name, config={**request.config(), **(extra_config or {})},
                seed=request.settings.seed, recipe_hash=recipe_hash, tags=tags,
            ) as run_id,
        ):  # fmt: skip
            for executor in request.executors:
                try:
                    outcome = _run_one(request, executor, Path(tmp), quiet=quiet)
                except D5Error as exc:  # the run ends failed, what came before kept
                    from d5core.inference.store import record_failure

                    scenario = request.settings.scenario
                    record_failure(store, run_id, request.model, scenario, executor, str(exc))
                    raise
                _store(store, run_id, request, outcome)
                outcomes.append(outcome)
                if on_executor is not None:
                    on_executor(store, run_id, outcome)
    return str(run_id), outcomes


# -- what the command shows -------------------------------------------------------------


def _time(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _number(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:,.1f}" if value >= 100 else f"{value:.3g}"


def _failed(checks: Sequence[str]) -> str:
    """LoadGen's failed checks (named ``Min duration satisfied``) as what went wrong:
    ``Min duration not satisfied``."""
    return "; ".join(c.replace(" satisfied", " not satisfied", 1) for c in checks)


def _verdict(outcome: ExecutorOutcome) -> str:
    result = outcome.result
    text = "-" if result.valid is None else "VALID" if result.valid else "INVALID"
    if result.failed_checks:
        text += ": " + _failed(result.failed_checks)
    return text


def _early_stopping(early: Mapping[str, Any]) -> str:
    """LoadGen's early-stopping estimates (``p90 1.2 ms``: the latency it vouches the
    90th percentile stays within), or whether early stopping was met."""
    estimates = early.get("estimates_s")
    parts = []
    if isinstance(estimates, Mapping):
        for pct, value in estimates.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                parts.append(f"p{pct} {_time(float(value))}")
    met = early.get("met")
    if met is False:
        parts.append("not met")
    if parts:
        return ", ".join(parts)
    return "met" if met else "-"


def _threads(threads: Mapping[str, Any]) -> str:
    """The threads the executor ran on, as the worker described them."""
    described = threads.get("describe")
    if isinstance(described, str) and described:
        return described
    count = threads.get("count")
    return "?" if count is None else str(count)


def failures(outcomes: Sequence[ExecutorOutcome]) -> list[str]:
    """Why the command exits 1, one line per failing executor (none: it exits 0)."""
    found = []
    for o in outcomes:
        why = []
        if o.result.valid is not True or o.result.failed_checks:
            checks = _failed(o.result.failed_checks)
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
        "log_dir": outcome.kept_logs or str(r.log_dir),
        "peak": None if outcome.peak is None else outcome.peak_json or _peak_json(outcome.peak),
        "accuracy": outcome.accuracy,
    }


def _metric_cell(name: str, value: float | None) -> str:
    """``90th percentile latency = 659 µs`` or ``Samples per second = 2,433``."""
    if "latency" in name.lower():
        label = name.replace(" (s)", "").replace(".0th", "th")
        return f"{label} = {_time(value)}"
    return f"{name} = {_number(value)}"


def _accuracy_cell(check: Mapping[str, Any] | None) -> str:
    """``passed (128 samples)`` or ``FAILED (3 of 128 differ)``."""
    if check is None:
        return "-"
    checked, failed = check.get("checked"), check.get("failed")
    if check.get("passed"):
        return f"passed ({checked} samples)" if checked is not None else "passed"
    if failed is not None and checked is not None:
        return f"FAILED ({failed} of {checked} differ)"
    return "FAILED"


def outcome_table(
    model: str, scenario: str, run_id: str, outcomes: Sequence[ExecutorOutcome]
) -> Table:
    """The side-by-side table of the executors of one run."""
    table = Table(
        title=f"{model}, {scenario} scenario under LoadGen, run {run_id}",
        title_justify="left",
        caption="p50 ... p99.9: LoadGen's latency percentiles over every query; QPS: with "
        "LoadGen's overhead, then without it; early stopping: LoadGen's estimate of the "
        "percentile it guarantees",
        caption_justify="left",
    )
    peak = any(o.peak is not None for o in outcomes)
    accuracy = any(o.accuracy is not None for o in outcomes)
    columns = ["executor", "result", "metric", "p50", "p90", "p99", "p99.9", "QPS",
               "QPS w/o overhead", "early stopping", "threads"]  # fmt: skip
    columns += ["peak QPS"] if peak else []
    columns += ["accuracy"] if accuracy else []
    for column in columns:
        left = column in ("executor", "result", "metric", "early stopping", "threads", "accuracy")
        table.add_column(column, justify="left" if left else "right", overflow="fold")
    for o in outcomes:
        r = o.result
        pct = r.percentiles_s
        cells = [
            o.executor, _verdict(o), _metric_cell(r.metric_name, r.metric_value),
            *(_time(pct.get(k)) for k in ("50", "90", "99", "99.9")),
            _number(r.qps_with_overhead), _number(r.qps_without_overhead),
            _early_stopping(r.early_stopping), _threads(r.threads),
        ]  # fmt: skip
        if peak:
            cells.append("-" if o.peak is None else _number(o.peak.qps))
        if accuracy:
            cells.append(_accuracy_cell(o.accuracy))
        table.add_row(*cells)
    return table


def run_command(
    request: ScenarioRequest,
    *,
    db: Path | None,
    tags: Sequence[str],
    as_json: bool,
) -> None:
    """``d5 bench net --scenario``: run, store, print; raise :class:`CheckFailed` (exit 1)
    when an executor failed (:func:`failures`)."""
    from d5core.cli.output import console, print_json

    run_id, outcomes = run_request(request, db=db, tags=tags, quiet=as_json)
    if as_json:
        rows = [outcome_row(run_id, request.model, o) for o in outcomes]
        print_json(rows, command="bench net scenario")
    else:
        console().print(outcome_table(request.model, request.settings.scenario, run_id, outcomes))
    failed = failures(outcomes)
    if failed:
        raise CheckFailed(f"run {run_id}: " + " | ".join(failed))


# -- the options of ``d5 bench net`` ------------------------------------------------------


def scenario_options(fn: Any) -> Any:
    """The options of ``d5 bench net`` that select and set a LoadGen scenario; the
    command receives them as keyword arguments named as in :data:`SCENARIO_FLAGS`, and
    ``scenario``."""
    for option in reversed(
        [
            click.option(
                "--scenario",
                default=None,
                metavar="NAME",
                help="Run under MLPerf LoadGen in this scenario: single-stream, "
                "multi-stream, server or offline (docs/inference.md).",
            ),
            click.option(
                "--target-qps", type=float, default=None,
                help="server: queries per second LoadGen issues (Poisson arrivals).",
            ),
            click.option(
                "--latency-bound", type=float, default=None, metavar="MS",
                help="server: the target latency (ms) a VALID run meets at p99; "
                "single-stream (p90) and multi-stream (p99): a bound d5 checks.",
            ),
            click.option(
                "--samples-per-query", type=int, default=None,
                help="multi-stream: samples in each query [default: 8].",
            ),
            click.option(
                "--expected-qps", type=float, default=None,
                help="offline: the throughput LoadGen sizes its one query by.",
            ),
            click.option(
                "--min-duration", type=float, default=None, metavar="S",
                help="Seconds the run lasts at least [default: 2].",
            ),
            click.option(
                "--min-query-count", type=int, default=None,
                help="Queries issued at least [default: 100; server: 800, the fewest "
                "with which LoadGen's early stopping can pass].",
            ),
            click.option(
                "--threads", type=int, default=None,
                help="BLAS/OpenMP and framework threads of the system under test "
                "(recorded) [default: the usable cores but one, left to LoadGen].",
            ),
            click.option(
                "--find-peak", is_flag=True,
                help="server: also search the highest QPS whose run is VALID under "
                "--latency-bound.",
            ),
            click.option(
                "--accuracy", is_flag=True,
                help="Also run LoadGen's AccuracyOnly mode and check the logged outputs "
                "against the reference executor.",
            ),
        ]
    ):  # fmt: skip
        fn = option(fn)
    return fn


def scenario_command(
    ctx: click.Context,
    *,
    model: str,
    executors: Sequence[str],
    batch: int | None,
    mode: str,
    seed: int,
    as_json: bool,
    db: Path | None,
    tags: Sequence[str],
    options: Mapping[str, Any],
) -> None:
    """The ``--scenario`` branch of ``d5 bench net``: check every setting (exit 2 before
    anything runs or is stored), then :func:`run_command`."""
    from click.core import ParameterSource

    given = [
        flag
        for name, flag in TIMING_OPTIONS.items()
        if ctx.get_parameter_source(name)
        in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    ]
    if given:
        raise UsageError(
            f"{given[0]} sets d5's own timing, which a LoadGen scenario does not use; "
            "leave it out with --scenario (LoadGen's settings: --min-duration, "
            "--min-query-count, ...)"
        )
    if mode != "inference":
        raise UsageError(
            f"a LoadGen scenario runs inference; leave out --mode {mode} with --scenario"
        )
    settings = scenario_settings(
        str(options["scenario"]),
        target_qps=options.get("target_qps"),
        latency_bound_ms=options.get("latency_bound"),
        samples_per_query=options.get("samples_per_query"),
        expected_qps=options.get("expected_qps"),
        min_duration_s=options.get("min_duration"),
        min_query_count=options.get("min_query_count"),
        seed=seed,
        threads=options.get("threads"),
    )
    request = scenario_request(
        model, executors, settings, batch=batch,
        find_peak=bool(options.get("find_peak")), accuracy=bool(options.get("accuracy")),
    )  # fmt: skip
    run_command(request, db=db, tags=tags, as_json=as_json)


# -- d5 run on an inference recipe --------------------------------------------------------


def run_inference_command(
    recipe: Path,
    *,
    sets: Sequence[str],
    seed: int | None,
    repeat: int,
    as_json: bool,
    db: Path | None,
    tags: Sequence[str],
    refused: Mapping[str, bool],
) -> None:
    """``d5 run RECIPE`` for a recipe with ``kind = "inference"``: run it ``repeat``
    times, print each run's table (or the JSON of ``d5 run inference``), and raise
    :class:`CheckFailed` (exit 1) for the first run that is INVALID, misses a bound or
    fails a threshold.

    :param refused: ``d5 run``'s training-only options by flag, true where given.
    """
    from d5core.cli.output import console, print_json
    from d5core.runners.inference_recipe import first_failure, run_inference_recipe

    given = [flag for flag, on in refused.items() if on]
    if given:
        raise UsageError(
            f"{given[0]} applies to training recipes; an inference recipe runs one executor "
            "under LoadGen (docs/inference.md)"
        )

    def show(run: Any) -> None:
        model = str(run.recipe.values()["model"])
        scenario = run.outcome.result.scenario
        console().print(outcome_table(model, scenario, run.run_id, [run.outcome]))
        for c in run.checks:
            side = "min" if "min" in c else "max"
            mark = "ok  " if c["passed"] else "FAIL"
            click.echo(f"  {mark} {c['metric']} = {c['value']} ({side} {c[side]})")

    runs = run_inference_recipe(
        recipe, sets, seed, repeat=repeat, db=db, tags=tags, quiet=as_json,
        on_run=None if as_json else show,
    )  # fmt: skip
    if as_json:
        print_json(
            {"passed": all(r.passed for r in runs), "runs": [r.to_json() for r in runs]},
            command="run inference",
        )
    failure = first_failure(runs)
    if failure is not None:
        raise failure
