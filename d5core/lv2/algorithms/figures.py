"""Report figures of ``d5 bench algorithms`` campaigns: performance profiles and the time
to target of every workload.

For each campaign among the report's runs (its trial records, kind ``algorithm-trial``;
the newest :data:`MAX_CAMPAIGNS`), two figures:

* ``algo-profile``: ρ(τ) of every algorithm (``ALGORITHM@EXECUTOR``) as a step plot for
  τ from 1 to 4, its score in the legend (:mod:`.scoring`);
* ``algo-times``: one panel per workload, one box per algorithm over the study times
  (each study's fastest trial), every study drawn as a point, studies that missed the
  target as triangles at the top, and the workload time (the median over studies,
  AlgoPerf's) as a diamond, or "missed" under the box.

A campaign is drawn from all its trials in the store when the report has one (a report
of the newest runs may hold only some of them), else from the report's runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from d5core.levels.report import ReportFigure, ReportRun
from d5core.lv2.algorithms.trials import TRIAL_KIND, TrialRecord, load_trials
from d5core.report.style import colors_for, draw_distributions, figure_key, new_figure, runs_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from d5core.lv2.algorithms.scoring import Scoreboard
    from d5core.results.store import ResultsStore

__all__ = ["MAX_CAMPAIGNS", "MAX_WORKLOAD_PANELS", "SECTION", "figures"]

#: The report section these figures belong to.
SECTION = "training"
#: Campaigns drawn at most (the newest).
MAX_CAMPAIGNS = 2
#: Workload panels drawn at most in one time-to-target figure.
MAX_WORKLOAD_PANELS = 12
_MISS_MARK = "^"


def _campaign_trials(
    runs: Sequence[ReportRun], store: ResultsStore | None
) -> tuple[dict[str, list[TrialRecord]], int]:
    """The newest campaigns' trials by campaign (newest first), and how many campaigns
    were left out."""
    mine = sorted(
        (r for r in runs if r.kind == TRIAL_KIND and r.status == "complete"),
        key=lambda r: (r.created, r.id),
        reverse=True,
    )
    order = list(dict.fromkeys(str(r.config.get("campaign")) for r in mine))
    kept, left = order[:MAX_CAMPAIGNS], max(0, len(order) - MAX_CAMPAIGNS)
    found: dict[str, list[TrialRecord]] = {}
    for campaign in kept:
        if store is not None:
            records = load_trials(store, campaign=campaign)
        else:
            records = []
            for r in reversed(mine):
                if r.config.get("campaign") == campaign:
                    try:
                        records.append(
                            TrialRecord.from_config(r.config, run_id=r.id, created=r.created)
                        )
                    except Exception:  # not a trial record: nothing to draw of it
                        continue
        if records:
            found[campaign] = records
    return found, left


def _title(trials: Sequence[TrialRecord]) -> str:
    first = trials[0]
    studies = len({t.study for t in trials})
    return (
        f"suite {first.suite}, campaign {first.campaign[:12]}, {first.ruleset} ({studies} studies)"
    )


def _profile_figure(
    board: Scoreboard, trials: Sequence[TrialRecord], runs: Sequence[ReportRun], left: int
) -> ReportFigure:
    figure = new_figure(6.4, 3.8)
    ax = figure.add_subplot(1, 1, 1)
    colors = colors_for(e.entry for e in board.entries)
    data: dict[str, Any] = {
        "campaign": trials[0].campaign,
        "suite": trials[0].suite,
        "r_max": board.r_max,
        "workloads": list(board.workloads),
        "entries": {},
    }
    for e in board.entries:
        taus = [t for t, _ in e.profile]
        rhos = [r for _, r in e.profile]
        ax.step(taus, rhos, where="post", color=colors[e.entry], linewidth=1.6,
                label=f"{e.entry}: score {e.score:.3f}")  # fmt: skip
        data["entries"][e.entry] = {"score": e.score, "tau": taus, "rho": rhos,
                                    "reached": e.reached}  # fmt: skip
    ax.set_xlim(1.0, board.r_max)
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel("τ: ratio of the time to target to the best algorithm's")
    ax.set_ylabel(f"ρ(τ): share of the {len(board.workloads)} workloads")
    ax.legend(fontsize=7, loc="lower right")
    caption = (
        "Performance profile (AlgoPerf): for each algorithm, the share of workloads whose "
        "time to target is within τ times the best algorithm's; a workload time is the "
        "median over studies of each study's fastest trial, a miss never counts. The "
        f"score is the area under ρ from 1 to {board.r_max:g} divided by "
        f"{board.r_max - 1:g} (1: fastest on every workload)."
        + (f" {left} older campaign(s) not drawn." if left else "")
    )
    return runs_figure(
        figure, data, runs,
        key=figure_key("algo-profile", trials[0].campaign),
        title=f"Performance profiles: {_title(trials)}", section=SECTION, caption=caption,
        ids=[t.run_id for t in trials if t.run_id],
    )  # fmt: skip


def _workload_panel(ax: Axes, board: Scoreboard, workload: str, colors: Mapping[str, str]) -> Any:
    """Draw one workload's study times per algorithm; the numbers drawn."""
    from matplotlib.transforms import blended_transform_factory

    groups: list[tuple[str, list[float], tuple[float, float, float] | None]] = []
    data: dict[str, Any] = {}
    for e in board.entries:
        found = board.time(e.entry, workload)
        studies = list(found.study_times) if found is not None else []
        finite = [t for t in studies if math.isfinite(t)]
        groups.append((e.entry, finite, None))
        data[e.entry] = {
            "study_times": [t if math.isfinite(t) else None for t in studies],
            "time": found.time if found is not None and found.reached else None,
            "missed_studies": len(studies) - len(finite),
        }
    draw_distributions(ax, groups, colors=dict(colors))
    top = blended_transform_factory(ax.transData, ax.transAxes)
    ticks = []
    for position, (entry, item) in enumerate(data.items(), start=1):
        finite = [t for t in item["study_times"] if t is not None]
        ax.plot([position] * len(finite), finite, marker="o", linestyle="none", markersize=3,
                color="black", alpha=0.7)  # fmt: skip
        if item["time"] is not None:
            ax.plot([position], [item["time"]], marker="D", color=colors[entry], markersize=6,
                    markeredgecolor="black", linestyle="none")  # fmt: skip
        missed = item["missed_studies"]
        if missed:
            xs = [position + (j - (missed - 1) / 2) * 0.08 for j in range(missed)]
            ax.plot(xs, [0.97] * missed, marker=_MISS_MARK, markerfacecolor="none",
                    linestyle="none", color=colors[entry], transform=top,
                    clip_on=False)  # fmt: skip
        state = "missed" if item["time"] is None else f"{item['time']:.3g} s"
        ticks.append(f"{entry}\n{state}")
    ax.set_xticks(range(1, len(ticks) + 1), ticks, fontsize=7)
    low, high = ax.get_ylim()
    ax.set_ylim(min(0.0, low), high + 0.12 * (high - low))
    ax.set_title(workload)
    ax.set_ylabel("training s to target")
    return data


def _times_figure(
    board: Scoreboard, trials: Sequence[TrialRecord], runs: Sequence[ReportRun]
) -> ReportFigure:
    workloads = list(board.workloads)[:MAX_WORKLOAD_PANELS]
    cols = min(3, len(workloads))
    rows = math.ceil(len(workloads) / cols)
    width = max(1.2 * len(board.entries), 2.6)
    figure = new_figure(width * cols + 0.6, 3.2 * rows + 0.3)
    colors = colors_for(e.entry for e in board.entries)
    data: dict[str, Any] = {"campaign": trials[0].campaign, "workloads": {}}
    for i, workload in enumerate(workloads):
        ax = figure.add_subplot(rows, cols, i + 1)
        data["workloads"][workload] = _workload_panel(ax, board, workload, colors)
    cut = len(board.workloads) - len(workloads)
    caption = (
        "Time to target per workload (training seconds, evaluation excluded): one box per "
        "algorithm over its study times (each study's fastest trial, the black points); "
        "the diamond is the workload time, the median over studies, that the score uses; "
        "triangles at the top are studies in which no trial reached the target."
        + (f" {cut} more workload(s) not drawn." if cut else "")
    )
    return runs_figure(
        figure, data, runs,
        key=figure_key("algo-times", trials[0].campaign),
        title=f"Time to target: {_title(trials)}", section=SECTION, caption=caption,
        ids=[t.run_id for t in trials if t.run_id],
    )  # fmt: skip


def figures(runs: Sequence[ReportRun], store: ResultsStore | None = None) -> list[ReportFigure]:
    """The campaign figures of ``runs`` (other kinds are ignored); ``[]`` when none applies."""
    from d5core.lv2.algorithms.scoring import score_trials

    campaigns, left = _campaign_trials(runs, store)
    ids = {t.run_id for trials in campaigns.values() for t in trials}
    drawn_runs = [r for r in runs if r.id in ids]
    drawn: list[ReportFigure] = []
    for trials in campaigns.values():
        board = score_trials(trials)
        mine = [r for r in drawn_runs if r.config.get("campaign") == trials[0].campaign]
        drawn.append(_profile_figure(board, trials, mine, left))
        drawn.append(_times_figure(board, trials, mine))
    return drawn
