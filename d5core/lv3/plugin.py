"""Level 3's internal plugin: ``d5 bench comm``, ``d5 model comm`` and the distributed
report figures.
(Ranks are launched by the communication plugin's ``d5_rank_launcher``.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from d5core.hookspecs import hookimpl

__all__ = ["d5_cli_commands", "d5_report_figures"]


@hookimpl(tryfirst=True)
def d5_cli_commands() -> list[Any]:
    from d5core.cli.lazy import LazyCommand, LazyGroup

    bench = LazyGroup("bench")
    bench.add_command(
        LazyCommand(
            "comm",
            "d5core.lv3.bench_comm_cmd:bench_comm",
            "Benchmark a collective over MPI ranks against raw MPI.",
        )
    )
    model = LazyGroup("model", help="Predict from fitted models: communication time per step.")
    model.add_command(
        LazyCommand(
            "comm",
            "d5core.lv3.model_comm_cmd:model_comm",
            "Predict a scheme's communication time per step from a fitted L and G.",
        )
    )
    return [bench, model]


@hookimpl(tryfirst=True)
def d5_report_figures(runs: Sequence[Any]) -> list[Any]:
    from d5core.lv3.figures import figures
    from d5core.report.figures import section_figures

    return section_figures("distributed", lambda: figures(runs))
