"""Level 2's internal plugin: ``d5 run``, ``d5 bench algorithms``, ``d5 results score``,
the learning-rate schedules and the training report figures (those of training-algorithm
campaigns among them). (Its datasets and training metrics are entry points of d5core,
found like any plugin's.)"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from d5core.hookspecs import hookimpl

__all__ = ["d5_cli_commands", "d5_lr_schedules", "d5_report_figures", "d5_results_tables"]


@hookimpl(tryfirst=True)
def d5_cli_commands() -> list[Any]:
    from d5core.cli.lazy import LazyCommand, LazyGroup

    bench = LazyGroup("bench")
    bench.add_command(
        LazyCommand(
            "algorithms",
            "d5core.lv2.algorithms.bench_cmd:bench_algorithms",
            "Run training algorithms on a workload suite under a tuning ruleset (AlgoPerf) "
            "and store every trial.",
        )
    )
    results = LazyGroup("results", help="List, show, export, compare and score stored runs.")
    results.add_command(
        LazyCommand(
            "score",
            "d5core.lv2.algorithms.score_cmd:score",
            "Score a campaign of 'd5 bench algorithms' the AlgoPerf way (performance profiles).",
        )
    )
    return [
        LazyCommand(
            "run",
            "d5core.lv2.run_cmd:run",
            "Run a training (or inference) recipe and store its metrics.",
        ),
        bench,
        results,
    ]


@hookimpl(tryfirst=True)
def d5_lr_schedules() -> Mapping[str, Callable[..., Any]]:
    from d5core.lv2.schedules import BUILTIN_SCHEDULES

    return dict(BUILTIN_SCHEDULES)


@hookimpl(tryfirst=True)
def d5_report_figures(runs: Sequence[Any], store: Any) -> list[Any]:
    from d5core.lv2.figures import figures
    from d5core.report.figures import section_figures

    def campaigns() -> list[Any]:
        from d5core.lv2.algorithms.figures import figures as campaign_figures

        return campaign_figures(runs, store)

    return [
        *section_figures("training", lambda: figures(runs)),
        *section_figures("training-algorithm campaign", campaigns),
    ]


@hookimpl(tryfirst=True)
def d5_results_tables() -> Mapping[str, Callable[..., None]]:
    from d5core.lv2.training_table import print_training_table

    return {"train": print_training_table}
