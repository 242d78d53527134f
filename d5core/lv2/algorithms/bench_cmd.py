"""``d5 bench algorithms SUITE``: run training algorithms on a suite's workloads under a
tuning ruleset (AlgoPerf's external or self tuning) and store every trial.

The command reads and checks its options, then hands the campaign to
:mod:`d5core.lv2.algorithms.campaign`, which trains each trial in a fresh process and
records it; rerun with the same options, it runs only the trials not yet recorded.
``d5 results score`` scores what it stored.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from d5core.cli.options import db_option, json_option
from d5core.errors import UsageError

if TYPE_CHECKING:
    from d5core.lv2.algorithms.campaign import CampaignResult

__all__ = ["DEFAULT_STUDIES", "DEFAULT_TRIALS", "bench_algorithms"]

#: AlgoPerf's external tuning: 5 trials in each of 3 studies.
DEFAULT_STUDIES = 3
DEFAULT_TRIALS = 5


def _seconds(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


def _print_table(result: CampaignResult) -> None:
    from rich.table import Table

    from d5core.cli.output import console

    spec = result.spec
    table = Table(
        title=f"d5 bench algorithms {spec.suite.name}: campaign {spec.id} "
        f"(ruleset {spec.ruleset}, {spec.studies} studies x {spec.trials} trials, seed "
        f"{spec.seed})",
        title_justify="left",
    )
    for column, justify in (("workload", "left"), ("algorithm", "left"), ("trials", "right"),
                            ("reached", "right"), ("best (s)", "right"),
                            ("median of study bests (s)", "right"),
                            ("other outcomes", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in result.summary():
        others = ", ".join(
            f"{count} {outcome}"
            for outcome, count in sorted(row["outcomes"].items())
            if outcome != "reached"
        )
        median = row["median_of_study_best_s"]
        table.add_row(
            row["workload"], row["algorithm"], str(row["trials"]), str(row["reached"]),
            _seconds(row["best_s"]), "missed" if median is None else _seconds(median),
            others or "-",
        )  # fmt: skip
    out = console()
    out.print(table)
    out.print(
        f"{result.ran} trials run, {result.skipped} already recorded, {result.wall_s:.1f} s; "
        f"times are training seconds to the target, evaluation excluded. Score it: "
        f"d5 results score --campaign {spec.id}",
        highlight=False,
    )


def _check_executor(name: str | None) -> None:
    """Refuse an executor that is not installed (``d5.frameworks``), naming those that are."""
    if name is None:
        return
    from d5core.plugins import get_plugin_manager

    get_plugin_manager().record("d5.frameworks", name)


@click.command("algorithms")
@click.argument("suite")
@click.option(
    "--algorithms",
    "algorithms",
    required=True,
    metavar="A,B@EXECUTOR,...",
    help="The algorithms to run, separated by commas: a d5.algorithms entry or a baseline "
    "optimizer, each optionally @EXECUTOR (default: --executor, else each recipe's own).",
)
@click.option(
    "--ruleset",
    type=click.Choice(["external", "self"]),
    default="external",
    show_default=True,
    help="external: --trials points drawn from each search space per study; self: one "
    "trial per study at the space's defaults with 1.5 times the budget.",
)
@click.option(
    "--studies",
    type=click.IntRange(min=1),
    default=DEFAULT_STUDIES,
    show_default=True,
    help="Studies (independent repeats of the tuning).",
)
@click.option(
    "--trials",
    type=click.IntRange(min=1),
    default=None,
    help=f"Trials per study with --ruleset external [default: {DEFAULT_TRIALS}].",
)
@click.option(
    "--executor",
    default=None,
    metavar="NAME",
    help="The executor of the algorithms given without @EXECUTOR.",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="The campaign's seed: every trial's seed and hyperparameters derive from it, "
    "the study and the trial.",
)
@click.option(
    "--timeout-factor",
    type=click.FloatRange(min=1.0),
    default=None,
    help="Kill a trial after this many times its budget plus 60 s of wall-clock time "
    "(it counts as a miss) [default: 3].",
)
@json_option(help="Print the campaign and its trial records as JSON.")
@db_option
def bench_algorithms(
    suite: str,
    algorithms: str,
    ruleset: str,
    studies: int,
    trials: int | None,
    executor: str | None,
    seed: int,
    timeout_factor: float | None,
    as_json: bool,
    db: str | Path | None,
) -> None:
    """Run ALGORITHMS on every workload of SUITE (a name in suites/ or a .toml path)
    under a tuning RULESET, each trial in a fresh process, and store every trial.

    A trial that diverges, fails or outlives its wall-clock limit is a missed target,
    never the end of the campaign. Run again with the same options, the campaign resumes:
    trials already recorded are not rerun. Exits 0 when the campaign ran to its end
    (whatever the trials' outcomes), 2 for bad input, 130 when interrupted.
    """
    from d5core.cli.output import print_json
    from d5core.lv2.algorithms.campaign import (
        DEFAULT_TIMEOUT_FACTOR,
        CampaignSpec,
        parse_algorithms,
        run_campaign,
    )
    from d5core.lv2.algorithms.suites import load_suite

    if ruleset == "self" and trials not in (None, 1):
        raise UsageError(
            "--trials does not apply to --ruleset self (one trial per study at the search "
            "space's defaults); drop --trials, or use --ruleset external"
        )
    if timeout_factor is not None and not math.isfinite(timeout_factor):
        raise UsageError(f"--timeout-factor must be a finite number, got {timeout_factor!r}")
    choices = parse_algorithms(algorithms, executor)
    for choice in choices:
        _check_executor(choice.executor)
    spec = CampaignSpec(
        suite=load_suite(suite),
        algorithms=choices,
        ruleset=ruleset,
        studies=studies,
        trials=1 if ruleset == "self" else (trials or DEFAULT_TRIALS),
        seed=seed,
        timeout_factor=DEFAULT_TIMEOUT_FACTOR if timeout_factor is None else timeout_factor,
    )
    result = run_campaign(spec, db, on_line=lambda line: click.echo(line, err=True))
    if as_json:
        data: dict[str, Any] = result.to_json()
        print_json(data)
    else:
        _print_table(result)
