"""Level 1's internal plugin: ``d5 bench net``, ``d5 validate net``, ``d5 conformance``,
the model zoo, the graph passes, the ``net`` measurement job and the networks' and
conformance report figures."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from d5core.hookspecs import hookimpl

__all__ = [
    "d5_cli_commands",
    "d5_graph_passes",
    "d5_model_zoo",
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
            "net",
            "d5core.lv1.bench_net_cmd:bench_net",
            "Benchmark a network across executors (or under load, with --scenario).",
        )
    )
    validate = LazyGroup("validate")
    validate.add_command(
        LazyCommand(
            "net",
            "d5core.lv1.validate_net_cmd:validate_net",
            "Validate a network on an executor against the reference executor.",
        )
    )
    audit = LazyGroup(
        "audit",
        help="Audit that timed results are honest: outputs while timed, no caching, seeds.",
    )
    audit.add_command(
        LazyCommand(
            "net",
            "d5core.lv1.audit_cmd:audit_net",
            "Audit a network's timed step on executors (accuracy while timed, caching, seeds).",
        )
    )
    return [
        bench,
        validate,
        audit,
        LazyCommand(
            "conformance",
            "d5core.lv1.conformance_cmd:conformance",
            "Run ONNX's backend test suite on an executor.",
        ),
    ]


@hookimpl(tryfirst=True)
def d5_model_zoo() -> Mapping[str, Callable[..., Any]]:
    from d5core.lv1.zoo import ZOO

    return dict(ZOO)


@hookimpl(tryfirst=True)
def d5_graph_passes() -> Mapping[str, Callable[..., Any]]:
    from d5core.lv1.passes import PASSES

    return dict(PASSES)


@hookimpl(tryfirst=True)
def d5_worker_jobs() -> Mapping[str, str]:
    return {"net": "d5core.lv1.jobs:net_job"}


@hookimpl(tryfirst=True)
def d5_report_figures(runs: Sequence[Any]) -> list[Any]:
    from d5core.lv1 import conformance_figures, figures
    from d5core.report.figures import section_figures

    return [
        *section_figures("networks", lambda: figures.figures(runs)),
        *section_figures("conformance", lambda: conformance_figures.figures(runs)),
    ]


@hookimpl(tryfirst=True)
def d5_results_tables() -> Mapping[str, Callable[..., None]]:
    from d5core.lv0.benchmark_table_view import results_table

    return {"net": results_table("net")}
