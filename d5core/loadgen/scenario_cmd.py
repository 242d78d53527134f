"""``d5 bench net MODEL --scenario S``: a network under MLPerf LoadGen, executor by executor.

This module reads the options and shows the outcome; the runner
(:func:`d5core.loadgen.runner.run_request`) runs each executor in a fresh worker
process and stores all of them in one run of kind ``inference``. They are shown side
by side in one table: VALID or INVALID with LoadGen's failed checks, the scenario's
metric, the latency percentiles, QPS with and without LoadGen's overhead, the
early-stopping estimate and the threads. ``--find-peak`` adds the highest VALID server
QPS (:func:`d5core.loadgen.peak.find_peak`), ``--accuracy`` an AccuracyOnly run whose
logged outputs are checked against the reference executor
(:func:`d5core.loadgen.accuracy.check_accuracy`).

Every setting is checked before anything runs or is stored: a bad one is a one-line
:class:`~d5core.errors.UsageError` (exit 2). The command exits 1 when an executor's run
is INVALID, misses a bound, finds no VALID server QPS, or fails its accuracy check.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from d5core.errors import CheckFailed, UsageError
from d5core.loadgen.runner import (
    ExecutorOutcome,
    ScenarioRequest,
    failures,
    not_satisfied,
    outcome_row,
    run_request,
    scenario_request,
    scenario_settings,
)

__all__ = [
    "SCENARIO_FLAGS",
    "TIMING_OPTIONS",
    "check_no_scenario_options",
    "outcome_table",
    "run_command",
    "run_inference_command",
    "scenario_command",
    "scenario_options",
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
    "timeout": "--timeout",
}


def check_no_scenario_options(values: Mapping[str, Any]) -> None:
    """Refuse scenario options given without ``--scenario``.

    :param values: the command's parameters by name (``None`` or ``False``: not given).
    :raises UsageError: naming the first such option.
    """
    given = [  # by identity: a 0 was given, though 0 == False
        flag
        for name, flag in SCENARIO_FLAGS.items()
        if values.get(name) is not None and values.get(name) is not False
    ]
    if given:
        raise UsageError(
            f"{given[0]} is a setting of a LoadGen scenario; add --scenario "
            "single-stream|multi-stream|server|offline, or leave it out"
        )


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


def _verdict(outcome: ExecutorOutcome) -> str:
    result = outcome.result
    text = "-" if result.valid is None else "VALID" if result.valid else "INVALID"
    if result.failed_checks:
        text += ": " + not_satisfied(result.failed_checks)
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


def _say(line: str) -> None:
    """Show a progress line of the runner on stderr."""
    click.echo(f"d5: {line}", err=True)


def run_command(
    request: ScenarioRequest,
    *,
    db: str | Path | None,
    tags: Sequence[str],
    as_json: bool,
    trace: str | None = None,
) -> None:
    """``d5 bench net --scenario``: run, store, print; raise :class:`CheckFailed` (exit 1)
    when an executor failed (:func:`failures`)."""
    from d5core.cli.output import console, print_json

    run_id, outcomes = run_request(request, db=db, tags=tags, trace=trace,
                                   progress=None if as_json else _say)  # fmt: skip
    if as_json:
        rows = [outcome_row(run_id, request.model, o) for o in outcomes]
        print_json(rows, command="bench net scenario")
    else:
        console().print(outcome_table(request.model, request.settings.scenario, run_id, outcomes))
        if trace is not None:
            from d5core.trace.capture import traced_line

            click.echo(traced_line(run_id, trace))
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
    db: str | Path | None,
    tags: Sequence[str],
    options: Mapping[str, Any],
    trace: str | None = None,
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
    _check_fits(model, settings, batch)
    run_command(request, db=db, tags=tags, as_json=as_json, trace=trace)


def _check_fits(model: str, settings: Any, batch: int | None) -> None:
    """The model's inputs can be sampled and batched, and the run fits in memory
    (:func:`~d5core.loadgen.loadgen.check_fits`), before anything is stored."""
    from d5core.loadgen.loadgen import check_fits
    from d5core.lv1.runner import load_model

    check_fits(load_model(model), settings, batch)


# -- d5 run on an inference recipe --------------------------------------------------------


def run_inference_command(
    recipe: Path,
    *,
    sets: Sequence[str],
    seed: int | None,
    repeat: int,
    as_json: bool,
    db: str | Path | None,
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
    from d5core.loadgen.recipe import first_failure, run_inference_recipe

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
        recipe, sets, seed, repeat=repeat, db=db, tags=tags, progress=None if as_json else _say,
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
