"""Level 2's internal plugin: ``d5 run``, the learning-rate schedules and the training
report figures. (Its datasets and training metrics are entry points of d5core, found
like any plugin's.)"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from d5core.hookspecs import hookimpl

__all__ = ["d5_cli_commands", "d5_lr_schedules", "d5_report_figures", "d5_results_tables"]


@hookimpl(tryfirst=True)
def d5_cli_commands() -> list[Any]:
    from d5core.cli.lazy import LazyCommand

    return [
        LazyCommand(
            "run",
            "d5core.lv2.run_cmd:run",
            "Run a training (or inference) recipe and store its metrics.",
        )
    ]


@hookimpl(tryfirst=True)
def d5_lr_schedules() -> Mapping[str, Callable[..., Any]]:
    from d5core.lv2.schedules import BUILTIN_SCHEDULES

    return dict(BUILTIN_SCHEDULES)


@hookimpl(tryfirst=True)
def d5_report_figures(runs: Sequence[Any]) -> list[Any]:
    from d5core.lv2.figures import figures
    from d5core.report.figures import section_figures

    return section_figures("training", lambda: figures(runs))


@hookimpl(tryfirst=True)
def d5_results_tables() -> Mapping[str, Callable[..., None]]:
    from d5core.lv2.training_table import print_training_table

    return {"train": print_training_table}
