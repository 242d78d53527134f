"""``d5 results score``: the AlgoPerf score table of a campaign of ``d5 bench algorithms``.

Reads the campaign's trial records (:mod:`.trials`), scores them
(:func:`.scoring.score_trials`) and prints, per algorithm (``ALGORITHM@EXECUTOR``), the
score, the workloads reached and the geometric-mean speed-up against a baseline; and per
workload and algorithm, the time to target (the median over studies) with its
study-to-study interval, or "missed". ``docs/algorithm-scoring.md`` explains each figure.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.errors import UsageError

if TYPE_CHECKING:
    from d5core.lv2.algorithms.scoring import Scoreboard, WorkloadTime
    from d5core.lv2.algorithms.trials import TrialRecord

__all__ = ["pick_campaign", "score"]


def _s(seconds: float | None) -> str:
    """Seconds with four significant digits; ``missed`` for inf or ``None``."""
    if seconds is None or not math.isfinite(seconds):
        return "missed"
    return f"{seconds:.4g}"


def _listed(names: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def pick_campaign(
    trials: Sequence[TrialRecord], campaign: str | None, suite: str | None, where: str
) -> str:
    """The campaign to score among ``trials`` (:class:`~.trials.TrialRecord`, oldest
    first): ``campaign`` (an id or a unique start of one), else the newest campaign of
    ``suite``, else the newest campaign.

    :raises UsageError: for no trial at all, an unknown suite, an unknown or ambiguous
        campaign, or a campaign of another suite than ``suite``.
    """
    if not trials:
        raise UsageError(
            f"no algorithm trials in {where}; run 'd5 bench algorithms SUITE --algorithms "
            f"A,B' first, or pass --db with the database that holds them"
        )
    suites = list(dict.fromkeys(t.suite for t in trials))
    if suite is not None and suite not in suites:
        raise UsageError(f"no trials of suite {suite!r} in {where}; suites with trials: "
                         f"{_listed(suites)}")  # fmt: skip
    pool = [t for t in trials if suite is None or t.suite == suite]
    # newest last: the order trials were stored in
    campaigns = list(dict.fromkeys(t.campaign for t in reversed(pool)))
    if campaign is None:
        return campaigns[0]
    every = list(dict.fromkeys(t.campaign for t in reversed(trials)))
    matches = [c for c in every if c == campaign] or [c for c in every if c.startswith(campaign)]
    if not matches:
        raise UsageError(
            f"no campaign {campaign!r} in {where}; campaigns (newest first): {_listed(every)}"
        )
    if len(matches) > 1:
        raise UsageError(
            f"campaign {campaign!r} is ambiguous: it starts {_listed(matches)}; give more "
            f"characters"
        )
    if suite is not None and matches[0] not in campaigns:
        of = next(t.suite for t in trials if t.campaign == matches[0])
        raise UsageError(f"campaign {matches[0]} is of suite {of!r}, not {suite!r}; drop "
                         f"--suite or give a campaign of {suite!r}")  # fmt: skip
    return matches[0]


def _header(trials: Sequence[TrialRecord]) -> dict[str, Any]:
    """What the scored campaign is: suite, ruleset, studies, trials, outcomes."""
    first = trials[0]
    studies = sorted({t.study for t in trials})
    per_study = Counter((t.label, t.workload, t.study) for t in trials)
    return {
        "campaign": first.campaign,
        "suite": first.suite,
        "suite_hash": first.suite_hash,
        "ruleset": ", ".join(sorted({t.ruleset for t in trials})),
        "studies": len(studies),
        "trials_per_study": max(per_study.values()),
        "trials": len(trials),
        "outcomes": dict(sorted(Counter(t.outcome for t in trials).items())),
    }


def _score_table(board: Scoreboard) -> Table:
    base = board.baseline
    table = Table(title="score (AlgoPerf performance profile)", title_justify="left")
    table.add_column("algorithm")
    table.add_column("score", justify="right")
    table.add_column("workloads reached", justify="right")
    table.add_column(f"speed-up vs {base} (geometric mean)", justify="right")
    for e in board.entries:
        sp = e.speedup
        if sp is None or sp.value is None:
            speed = "-" if sp is None else f"n/a (0 of {sp.of} workloads both reached)"
        else:
            speed = f"{sp.value:.2f}x over {sp.workloads} of {sp.of} workloads"
        table.add_row(e.entry, f"{e.score:.3f}", f"{e.reached}/{e.workloads}", speed)
    return table


def _interval_text(found: WorkloadTime) -> tuple[str, str]:
    """The min–max over studies and the CI of the median, as two cells."""
    iv = found.interval
    spread = f"{_s(iv.low)} – {_s(iv.high)}"
    if iv.ci is None:
        ci = f"n/a ({len(found.studies)} studies; 6+ needed)"
    else:
        ci = f"{_s(iv.ci[0])} – {_s(iv.ci[1])}"
    return spread, ci


def _times_table(board: Scoreboard) -> Table:
    table = Table(
        title="time to target (training s, evaluation excluded): median over studies of "
        "each study's fastest trial",
        title_justify="left",
    )
    for column in ("workload", "algorithm"):
        table.add_column(column)
    for column in ("time (s)", "ratio to best", "min – max over studies", "95% CI of median",
                   "studies", "trials reached"):  # fmt: skip
        table.add_column(column, justify="right")
    for w in board.workloads:
        for e in board.entries:
            found = board.time(e.entry, w)
            ratio = board.ratios[e.entry][w]
            ratio_text = f"{ratio:.3g}" if math.isfinite(ratio) else "-"
            if found is None:
                table.add_row(w, e.entry, "missed (no trials)", ratio_text, "-", "-", "0", "0/0")
                continue
            spread, ci = _interval_text(found)
            table.add_row(
                w, e.entry, _s(found.time), ratio_text, spread, ci, str(len(found.studies)),
                f"{found.trials_reached}/{found.trials}",
            )  # fmt: skip
    return table


@click.command("score")
@click.option("--campaign", default=None, metavar="ID",
              help="The campaign to score (an id or its start; default: the newest).")  # fmt: skip
@click.option("--suite", default=None, metavar="NAME",
              help="Score the newest campaign of this suite.")  # fmt: skip
@click.option("--baseline", default=None, metavar="ALGO",
              help="Speed-ups against this algorithm (ALGO or ALGO@EXECUTOR; default: the "
              "best score).")  # fmt: skip
@json_option
@db_option
def score(
    campaign: str | None,
    suite: str | None,
    baseline: str | None,
    as_json: bool,
    db: str | Path | None,
) -> None:
    """Score a campaign of 'd5 bench algorithms' the AlgoPerf way.

    A workload's time is the median over studies of each study's fastest trial to the
    target (a miss is infinite); r = time / the best algorithm's time; rho(tau) is the
    fraction of workloads with r <= tau, and the score its integral from 1 to 4 divided
    by 3 (1: fastest everywhere, 0: never within 4x of the best). Prints the score,
    workloads reached and the geometric-mean speed-up per algorithm, and each
    workload's time with its study-to-study spread. Exits 2 for bad input.
    """
    from d5core.lv2.algorithms.scoring import score_trials
    from d5core.lv2.algorithms.trials import load_trials
    from d5core.results.store import read_store

    with read_store(db) as store:
        where = store.location
        trials = load_trials(store)
    chosen = pick_campaign(trials, campaign, suite, where)
    scored = [t for t in trials if t.campaign == chosen]
    header = _header(scored)
    others = sorted({t.campaign for t in trials if t.suite == header["suite"]} - {chosen})
    board = score_trials(scored, baseline=baseline)
    if baseline is None and board.entries:
        board = score_trials(scored, baseline=board.entries[0].entry)
    if as_json:
        print_json({"database": where, **header, "other_campaigns": others,
                    **board.to_json()})  # fmt: skip
        return
    out = console()
    outcomes = ", ".join(f"{n} {what}" for what, n in header["outcomes"].items())
    out.print(
        f"d5 results score: suite {header['suite']}, campaign {chosen}, ruleset "
        f"{header['ruleset']}: {header['studies']} studies x {header['trials_per_study']} "
        f"trials, {len(board.workloads)} workloads, {len(board.entries)} algorithms; "
        f"{header['trials']} trials ({outcomes}); {where}",
        markup=False, highlight=False,
    )  # fmt: skip
    if others:
        out.print(f"other campaigns of suite {header['suite']}: {_listed(others)} "
                  f"(--campaign ID)", markup=False, highlight=False)  # fmt: skip
    out.print(_score_table(board))
    base_note = "" if baseline is not None else " (the best score; --baseline to choose)"
    out.print(
        f"score: integral of rho(tau) over tau in [1, {board.r_max:g}] / {board.r_max - 1:g}; "
        f"speed-up: {board.baseline}'s time / the algorithm's, geometric mean over the "
        f"workloads both reached; baseline {board.baseline}{base_note}",
        markup=False, highlight=False,
    )  # fmt: skip
    out.print(_times_table(board))
    for line in board.warnings:
        click.echo(f"d5: warning: {line}", err=True)
