"""Level 0's internal plugin: ``d5 bench op``, ``d5 validate op``, ``d5 op``, the
operator shape suites, the ``op`` measurement job and the operators' report figures."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from d5core.hookspecs import hookimpl

__all__ = [
    "d5_cli_commands",
    "d5_operator_shape_suites",
    "d5_report_figures",
    "d5_results_tables",
    "d5_worker_jobs",
]


@hookimpl(tryfirst=True)
def d5_cli_commands() -> list[Any]:
    from d5core.cli.lazy import LazyCommand, LazyGroup

    bench = LazyGroup("bench")
    bench.add_command(
        LazyCommand(
            "op", "d5core.lv0.bench_op_cmd:bench_op", "Benchmark an operator across backends."
        )
    )
    validate = LazyGroup("validate")
    validate.add_command(
        LazyCommand(
            "op",
            "d5core.lv0.validate_op_cmd:validate_op",
            "Validate an operator backend (or a custom operator) against the reference.",
        )
    )
    audit = LazyGroup(
        "audit",
        help="Audit that timed results are honest: outputs while timed, no caching, seeds.",
    )
    audit.add_command(
        LazyCommand(
            "op",
            "d5core.lv0.audit_cmd:audit_op",
            "Audit an operator's timed callables (accuracy while timed, caching, seeds).",
        )
    )
    return [
        bench,
        validate,
        audit,
        LazyCommand("op", "d5core.lv0.op_cmd:op", "Build and inspect C++ custom operators."),
        LazyCommand(
            "calibrate",
            "d5core.lv0.calibrate_cmd:calibrate",
            "Measure this machine's noise floor and store it.",
        ),
    ]


@hookimpl(tryfirst=True)
def d5_operator_shape_suites() -> Mapping[str, Sequence[Any]]:
    from d5core.lv0.workloads.problems import SUITES

    return dict(SUITES)


@hookimpl(tryfirst=True)
def d5_worker_jobs() -> Mapping[str, str]:
    return {"op": "d5core.lv0.jobs:op_job"}


@hookimpl(tryfirst=True)
def d5_report_figures(runs: Sequence[Any]) -> list[Any]:
    from d5core.lv0 import audit_figures
    from d5core.lv0.figures import figures
    from d5core.report.figures import section_figures

    return [
        *section_figures("operators", lambda: figures(runs)),
        *section_figures("audit", lambda: audit_figures.figures(runs)),
    ]


@hookimpl(tryfirst=True)
def d5_results_tables() -> Mapping[str, Callable[..., None]]:
    from d5core.lv0.benchmark_table_view import results_table

    return {"op": results_table("op")}
