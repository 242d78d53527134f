"""Level 3 figures: collective bandwidth, and what distributed training runs spent on
communication and how they scaled.

From ``comm`` runs (``d5 bench comm``): algorithm and bus bandwidth against message size,
d5's call beside the library's own, one column per rank count, with the median's
confidence interval and the link's peak where it was given; and from a ping-pong run's
fit, what the schemes' cost models predict from 2 to 4,096 ranks
(:mod:`d5core.lv3.model_figures`).

From distributed training runs (``d5 run --ranks N``, kind ``train`` with a
``distributed`` setting): the bytes each rank sent and received; each run's
communication time against the rest of its wall time; and, where one recipe ran under
one scheme at several rank counts, global throughput against ranks beside ideal scaling.
Whether that is strong or weak scaling is read from the stored batch sizes: a fixed
global batch is strong scaling, a fixed per-rank batch weak scaling.

Every figure's ``data`` holds exactly the numbers it draws. The number of figures is
bounded whatever the number of runs: the most recent runs are drawn and each caption
says what was left out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from d5core.levels.report import ReportFigure, ReportRun
from d5core.lv3 import model_figures
from d5core.lv3.comm_sweep import bus_factor
from d5core.report.style import (
    PALETTE,
    colors_for,
    figure_key,
    machines_note,
    new_figure,
    short_label,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "MAX_BANDWIDTH_FIGURES",
    "MAX_RANK_PANELS",
    "MAX_SCALING_GROUPS",
    "MAX_TRAIN_RUNS",
    "SECTION",
    "bandwidth_data",
    "figures",
    "scaling_groups",
]

#: The report section these figures belong to.
SECTION = "distributed"
#: Bandwidth figures drawn at most (one per ``comm`` run, the most recent).
MAX_BANDWIDTH_FIGURES = 3
#: Rank counts drawn at most in one bandwidth figure (the smallest ones).
MAX_RANK_PANELS = 4
#: Distributed training runs drawn at most in the volume and time figures.
MAX_TRAIN_RUNS = 12
#: Scaling series (recipe, scheme, batch) drawn at most.
MAX_SCALING_GROUPS = 6
#: Statuses of runs whose throughput is drawn in the scaling figure.
_FINISHED = ("complete", "diverged")
_IMPLS = ("d5", "raw")
_SERIES_KEYS = ("bytes", "algbw", "algbw_low", "algbw_high", "busbw", "busbw_low", "busbw_high")


def figures(runs: Sequence[ReportRun]) -> list[ReportFigure]:
    """The level 3 figures of ``runs`` (others are ignored); ``[]`` when none applies."""
    comm = [r for r in runs if r.kind == "comm" and r.find("time")]
    train = [
        r for r in runs if r.kind == "train" and isinstance(r.config.get("distributed"), Mapping)
    ]
    drawn: list[ReportFigure] = []
    drawn += _bandwidth_figures(comm)
    drawn += model_figures.figures([r for r in runs if r.kind == "comm"])
    drawn += _volume_figure(train)
    drawn += _time_figure(train)
    drawn += _scaling_figure(train)
    return drawn


# -- helpers ---------------------------------------------------------------------------


def _recent(runs: Sequence[ReportRun], limit: int) -> tuple[list[ReportRun], int]:
    """The ``limit`` most recent of ``runs`` in the order they were made, and how many
    were left out."""
    ordered = sorted(runs, key=lambda r: (r.created, r.id))
    kept = ordered[-limit:] if limit > 0 else []
    return kept, len(ordered) - len(kept)


def _left_out(count: int, what: str) -> str:
    return f" {count} older {what} not drawn." if count else ""


def _run_label(run: ReportRun) -> str:
    dist = run.config.get("distributed") or {}
    scheme, ranks = dist.get("scheme", "?"), dist.get("ranks", "?")
    return f"{short_label(run.name, 18)}\n{scheme}, {ranks} ranks\n{run.id[:8]}"


# -- collective bandwidth --------------------------------------------------------------


def _data_bytes(collective: str, nbytes: int, ranks: int) -> int:
    """The size nccl-tests divides by the time (as :mod:`d5core.lv3.comm_sweep`)."""
    return nbytes * ranks if collective == "allgather" else nbytes


def bandwidth_data(run: ReportRun) -> dict[str, Any]:
    """What the bandwidth figure of ``comm`` run ``run`` draws: per rank count and
    implementation, message sizes and the algorithm and bus bandwidths (GB/s) of the
    stored ``time`` measurements' medians, with the bounds of their CIs."""
    collective = str(run.config.get("collective") or "allreduce")
    series: dict[int, dict[str, dict[str, list[float]]]] = {}
    points: dict[tuple[int, str], list[tuple[int, tuple[float, float, float]]]] = {}
    for m in run.find("time"):
        ci = m.median_ci()
        try:
            ranks, nbytes, impl = (
                int(m.labels["ranks"]),
                int(m.labels["bytes"]),
                str(m.labels["impl"]),
            )
        except (KeyError, TypeError, ValueError):
            continue
        if ci is None or impl not in _IMPLS or not all(v > 0 for v in ci):
            continue
        points.setdefault((ranks, impl), []).append((nbytes, ci))
    for (ranks, impl), found in sorted(points.items()):
        factor = bus_factor(collective, ranks)
        s: dict[str, list[float]] = {k: [] for k in _SERIES_KEYS}
        for nbytes, (median, low, high) in sorted(found):
            size = _data_bytes(collective, nbytes, ranks) / 1e9
            s["bytes"].append(nbytes)
            for name, scale in (("algbw", 1.0), ("busbw", factor)):
                s[name].append(size / median * scale)
                s[f"{name}_low"].append(size / high * scale)
                s[f"{name}_high"].append(size / low * scale)
        series.setdefault(ranks, {})[impl] = s
    counts = sorted(series)
    peak = run.config.get("link_peak_gbps")
    return {
        "run": run.id,
        "collective": collective,
        "communicator": run.config.get("communicator"),
        "raw_baseline": any("raw" in v for v in series.values()),
        "link_peak_gbps": float(peak) if isinstance(peak, (int, float)) and peak > 0 else None,
        "panels": [{"ranks": n, "series": series[n]} for n in counts[:MAX_RANK_PANELS]],
        "omitted_ranks": counts[MAX_RANK_PANELS:],
    }


def _bandwidth_figures(runs: Sequence[ReportRun]) -> list[ReportFigure]:
    kept, left = _recent(runs, MAX_BANDWIDTH_FIGURES)
    drawn = []
    for run in kept:
        data = bandwidth_data(run)
        if data["panels"]:
            drawn.append(_bandwidth_figure(run, data, left))
    return drawn


def _size_label(value: float, _pos: Any = None) -> str:
    """A message size for an axis tick: ``4K``, ``1M``."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if value >= scale:
            return f"{value / scale:g}{unit}"
    return f"{value:g}"


def _plain(value: float, _pos: Any = None) -> str:
    """A bandwidth for an axis tick, as a plain number (``0.01``, ``2``)."""
    return f"{value:g}"


def _size_axis(ax: Axes, sizes: Sequence[int]) -> None:
    """Ticks at the measured message sizes (every other one beyond 8), no minor ticks."""
    from matplotlib.ticker import NullLocator

    ax.set_xlim(sizes[0] / 1.5, sizes[-1] * 1.5)
    shown = sizes if len(sizes) <= 8 else sizes[::2]
    ax.set_xticks(shown, [_size_label(v) for v in shown], fontsize=7)
    ax.xaxis.set_minor_locator(NullLocator())


def _bandwidth_figure(run: ReportRun, data: dict[str, Any], left: int) -> ReportFigure:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    panels = data["panels"]
    colors = colors_for(_IMPLS)
    fig = new_figure(3.0 * len(panels) + 1.0, 5.2)
    axes = fig.subplots(2, len(panels), squeeze=False)
    peak = data["link_peak_gbps"]
    for col, panel in enumerate(panels):
        for row, metric in enumerate(("algbw", "busbw")):
            ax: Axes = axes[row][col]
            for impl, s in panel["series"].items():
                y = s[metric]
                err = [[v - lo for v, lo in zip(y, s[f"{metric}_low"], strict=True)],
                       [hi - v for v, hi in zip(y, s[f"{metric}_high"], strict=True)]]  # fmt: skip
                label = "d5" if impl == "d5" else f"raw {data['communicator'] or 'library'}"
                ax.errorbar(s["bytes"], y, yerr=err, marker="o", markersize=3, capsize=2,
                            linewidth=1.2, color=colors[impl], label=label)  # fmt: skip
            if metric == "busbw" and peak is not None:
                ax.axhline(peak, color="black", linestyle="--", linewidth=1,
                           label=f"link peak {peak:g} GB/s")  # fmt: skip
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            _size_axis(ax, sorted({b for s in panel["series"].values() for b in s["bytes"]}))
            # majors at 1, 2, 5 x 10^k as plain numbers (mathtext is slow), minors unlabelled
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(_plain))
            ax.yaxis.set_minor_formatter(NullFormatter())
            if row == 0:
                ax.set_title(f"{panel['ranks']} ranks")
                ax.tick_params(labelbottom=False)
            else:
                ax.set_xlabel("message size per rank (bytes, K = 1024)")
            if col == 0:
                ax.set_ylabel(("algorithm" if metric == "algbw" else "bus") + " bandwidth (GB/s)")
    axes[1][0].legend(fontsize=7)
    baseline = (
        f"d5 beside {data['communicator']}'s own call"
        if data["raw_baseline"]
        else f"no raw baseline: the {data['communicator'] or 'run'!s} communicator offers none"
    )
    peak_text = (
        f"dashed: the link's peak, {peak:g} GB/s (given with --link-peak)"
        if peak is not None
        else "no link peak is known for this machine (give --link-peak to draw one)"
    )
    omitted = data["omitted_ranks"]
    caption = (
        f"{data['collective']} bandwidth against message size, {baseline}. Median over "
        "samples (each the slowest rank's time) with its 95% CI; algorithm bandwidth = size "
        f"/ time, bus bandwidth = algorithm bandwidth x nccl-tests' factor; {peak_text}."
        + (f" Rank counts {', '.join(map(str, omitted))} not drawn." if omitted else "")
        + _left_out(left, "comm runs")
    )
    return ReportFigure(
        key=figure_key("distributed-bandwidth", run.id),
        title=f"{data['collective']} bandwidth, run {run.id}",
        section=SECTION,
        figure=fig,
        data=data,
        runs=(run.id,),
        caption=caption,
        notes=machines_note([run]),
    )


# -- distributed training: volume and time ----------------------------------------------


def _per_rank(run: ReportRun, name: str) -> list[float] | None:
    """The per-rank metric ``name`` of ``run`` in rank order, or ``None`` when a rank
    lacks it."""
    found: dict[int, float] = {}
    for rec in run.metric_records(name):
        try:
            found[int(rec.labels["rank"])] = float(rec.value)
        except (KeyError, TypeError, ValueError):
            continue
    if not found or sorted(found) != list(range(len(found))):
        return None
    return [found[r] for r in range(len(found))]


def _run_facts(run: ReportRun) -> dict[str, Any]:
    dist = run.config.get("distributed") or {}
    return {"run": run.id, "name": run.name, "scheme": str(dist.get("scheme", "?")),
            "ranks": dist.get("ranks")}  # fmt: skip


def _volume_figure(runs: Sequence[ReportRun]) -> list[ReportFigure]:
    usable = [
        r for r in runs if _per_rank(r, "rank_bytes_sent") and _per_rank(r, "rank_bytes_received")
    ]
    kept, left = _recent(usable, MAX_TRAIN_RUNS)
    if not kept:
        return []
    entries = []
    for run in kept:
        entries.append({**_run_facts(run), "sent": _per_rank(run, "rank_bytes_sent"),
                        "received": _per_rank(run, "rank_bytes_received")})  # fmt: skip
    from matplotlib.ticker import EngFormatter

    colors = colors_for(e["scheme"] for e in entries)
    fig = new_figure(max(5.0, 1.1 * len(entries) + 2.0), 5.2)
    axes = fig.subplots(2, 1, sharex=True)
    for ax, what in zip(axes, ("sent", "received"), strict=True):
        for i, e in enumerate(entries):
            values = e[what]
            width = 0.8 / len(values)
            xs = [i - 0.4 + width * (r + 0.5) for r in range(len(values))]
            ax.bar(xs, values, width=width * 0.9, color=colors[e["scheme"]], edgecolor="black",
                   linewidth=0.3)  # fmt: skip
        ax.yaxis.set_major_formatter(EngFormatter(unit="B"))
        ax.set_ylabel(f"bytes {what} per rank")
    axes[1].set_xticks(range(len(entries)), [_run_label(_by_id(kept, e["run"])) for e in entries],
                       fontsize=7)  # fmt: skip
    handles = [_patch(colors[s], s) for s in sorted(colors)]
    axes[0].legend(handles=handles, fontsize=7, title="scheme", title_fontsize=7)
    return [
        ReportFigure(
            key="distributed-comm-volume",
            title="Communication volume per rank",
            section=SECTION,
            figure=fig,
            data={"runs": entries, "omitted": left},
            runs=tuple(e["run"] for e in entries),
            caption="Bytes each rank sent (top) and received (bottom) over the whole run, as "
            "the communicator counted them (d5's convention, docs/distributed.md); one bar "
            "per rank, rank 0 first, one group per run, coloured by scheme."
            + _left_out(left, "distributed runs"),
            notes=machines_note(kept),
        )
    ]


def _by_id(runs: Sequence[ReportRun], run_id: str) -> ReportRun:
    return next(r for r in runs if r.id == run_id)


def _patch(color: str, label: str) -> Any:
    from matplotlib.patches import Patch

    return Patch(facecolor=color, edgecolor="black", linewidth=0.3, label=label)


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def _time_figure(runs: Sequence[ReportRun]) -> list[ReportFigure]:
    usable = []
    for run in runs:
        comm, wall = _per_rank(run, "rank_comm_time"), _per_rank(run, "rank_wall_time")
        if comm and wall and len(comm) == len(wall):
            usable.append(run)
    kept, left = _recent(usable, MAX_TRAIN_RUNS)
    if not kept:
        return []
    entries = []
    for run in kept:
        comm = _per_rank(run, "rank_comm_time") or []
        wall = _per_rank(run, "rank_wall_time") or []
        rest = [w - c for w, c in zip(wall, comm, strict=True)]
        c, r, w = _spread(comm), _spread(rest), _spread(wall)
        entries.append({
            **_run_facts(run),
            "comm_mean": c["mean"], "comm_min": c["min"], "comm_max": c["max"],
            "rest_mean": r["mean"], "rest_min": r["min"], "rest_max": r["max"],
            "wall_mean": w["mean"], "wall_min": w["min"], "wall_max": w["max"],
        })  # fmt: skip
    entries.sort(key=lambda e: (e["scheme"], e["ranks"] or 0, e["run"]))
    fig = new_figure(max(5.0, 0.9 * len(entries) + 2.0), 3.8)
    ax = fig.subplots()
    xs = list(range(len(entries)))
    comm_color, rest_color = PALETTE[3], PALETTE[5]
    ax.bar(xs, [e["comm_mean"] for e in entries], width=0.6, color=comm_color,
           label="communication")  # fmt: skip
    ax.bar(xs, [e["rest_mean"] for e in entries], width=0.6, color=rest_color,
           bottom=[e["comm_mean"] for e in entries], label="rest of wall time")  # fmt: skip
    for x, e in zip(xs, entries, strict=True):
        ax.errorbar([x - 0.12], [e["comm_mean"]],
                    yerr=[[e["comm_mean"] - e["comm_min"]], [e["comm_max"] - e["comm_mean"]]],
                    color="black", capsize=3, linewidth=1)  # fmt: skip
        ax.errorbar([x + 0.12], [e["wall_mean"]],
                    yerr=[[e["wall_mean"] - e["wall_min"]], [e["wall_max"] - e["wall_mean"]]],
                    color="black", capsize=3, linewidth=1)  # fmt: skip
    ax.set_xticks(xs, [_run_label(_by_id(kept, e["run"])) for e in entries], fontsize=7)
    ax.set_ylabel("seconds per rank")
    ax.legend(fontsize=7)
    return [
        ReportFigure(
            key="distributed-compute-comm",
            title="Communication against the rest of the wall time, per scheme",
            section=SECTION,
            figure=fig,
            data={"runs": entries, "omitted": left},
            runs=tuple(e["run"] for e in entries),
            caption="Per run (grouped by scheme), the mean over ranks of the seconds spent in "
            "communication calls and of the rest of each rank's wall time, stacked; whiskers: "
            "the ranks' minimum and maximum of the communication time (left) and of the whole "
            "wall time (right)." + _left_out(left, "distributed runs"),
            notes=machines_note(kept),
        )
    ]


# -- scaling ---------------------------------------------------------------------------


def scaling_groups(runs: Sequence[ReportRun]) -> list[dict[str, Any]]:
    """The scaling series in ``runs``: runs of one recipe (run name) and scheme at two
    or more rank counts with the same global batch (``strong``) or the same per-rank
    batch (``weak``), read from the stored ``distributed`` setting. Only finished runs
    with a ``global_throughput`` count.

    Each series: ``name``, ``scheme``, ``scaling``, ``batch`` (the fixed batch size),
    ``ranks`` (sorted), and per rank count the ``runs`` and their ``throughput``
    (samples/s), the ``median``, ``min`` and ``max``; ``ideal`` (the smallest rank
    count's median times ranks over that count), ``efficiency`` (median / ideal),
    ``base_ranks`` and ``base_throughput``.
    """
    found: dict[tuple[str, str, str, int], dict[int, list[tuple[str, float]]]] = {}
    for run in runs:
        dist = run.config.get("distributed") or {}
        throughput = run.metric_value("global_throughput")
        if run.status not in _FINISHED or throughput is None or not math.isfinite(throughput):
            continue
        try:
            ranks = int(dist["ranks"])
            fixed = {
                "strong": int(dist["global_batch_size"]),
                "weak": int(dist["per_rank_batch_size"]),
            }
        except (KeyError, TypeError, ValueError):
            continue
        for scaling, batch in fixed.items():
            key = (run.name, str(dist.get("scheme", "?")), scaling, batch)
            found.setdefault(key, {}).setdefault(ranks, []).append((run.id, float(throughput)))
    groups = []
    for (name, scheme, scaling, batch), by_ranks in sorted(found.items()):
        if len(by_ranks) < 2:
            continue
        counts = sorted(by_ranks)
        values = [[v for _, v in sorted(by_ranks[n])] for n in counts]
        medians = [statistics.median(v) for v in values]
        base_n, base_t = counts[0], medians[0]
        ideal = [base_t * n / base_n for n in counts]
        groups.append({
            "name": name, "scheme": scheme, "scaling": scaling,
            "batch": {"global_batch_size" if scaling == "strong" else "per_rank_batch_size": batch},
            "ranks": counts, "runs": [[i for i, _ in sorted(by_ranks[n])] for n in counts],
            "throughput": values, "median": medians, "min": [min(v) for v in values],
            "max": [max(v) for v in values], "ideal": ideal,
            "efficiency": [m / i if i > 0 else None for m, i in zip(medians, ideal, strict=True)],
            "base_ranks": base_n, "base_throughput": base_t,
        })  # fmt: skip
    return groups


def _scaling_figure(runs: Sequence[ReportRun]) -> list[ReportFigure]:
    groups = scaling_groups(runs)
    if not groups:
        return []
    # the series with most rank counts first, then by name
    groups.sort(key=lambda g: (-len(g["ranks"]), g["name"], g["scheme"], g["scaling"]))
    kept, left = groups[:MAX_SCALING_GROUPS], len(groups) - MAX_SCALING_GROUPS
    cols = min(3, len(kept))
    rows = math.ceil(len(kept) / cols)
    fig = new_figure(3.4 * cols + 0.5, 3.2 * rows)
    axes = fig.subplots(rows, cols, squeeze=False)
    colors = colors_for(["measured", "ideal"])
    for i, g in enumerate(kept):
        ax: Axes = axes[i // cols][i % cols]
        for n, values in zip(g["ranks"], g["throughput"], strict=True):
            ax.plot([n] * len(values), values, "o", color=colors["measured"], alpha=0.35,
                    markersize=3)  # fmt: skip
        ax.errorbar(g["ranks"], g["median"],
                    yerr=[[m - lo for m, lo in zip(g["median"], g["min"], strict=True)],
                          [hi - m for m, hi in zip(g["median"], g["max"], strict=True)]],
                    fmt="s", color=colors["measured"], capsize=3, markersize=5,
                    label="measured (median, min-max)")  # fmt: skip
        ax.plot(g["ranks"], g["ideal"], "--", color="black", linewidth=1,
                label=f"ideal from {g['base_ranks']} ranks")  # fmt: skip
        ((what, batch),) = g["batch"].items()
        ax.set_title(
            f"{short_label(g['name'], 22)}, {g['scheme']}\n{g['scaling']} scaling "
            f"({what.replace('_', ' ')} {batch})",
            fontsize=8,
        )
        ax.set_xticks(g["ranks"])
        ax.set_xlabel("ranks")
        ax.set_ylabel("global throughput (samples/s)")
        ax.legend(fontsize=6)
    for j in range(len(kept), rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    bases = "; ".join(
        f"{g['name']} {g['scheme']} {g['scaling']}: {g['base_throughput']:.4g} samples/s on "
        f"{g['base_ranks']} ranks"
        for g in kept
    )
    drawn_ids = {i for g in kept for ids in g["runs"] for i in ids}
    drawn_runs = [r for r in runs if r.id in drawn_ids]
    return [
        ReportFigure(
            key="distributed-scaling",
            title="Scaling against ideal scaling",
            section=SECTION,
            figure=fig,
            data={"groups": kept, "omitted": max(left, 0)},
            runs=tuple(sorted(drawn_ids)),
            caption="Global throughput against ranks, where one recipe ran under one scheme at "
            "several rank counts. Strong scaling: the global batch is fixed; weak scaling: the "
            "per-rank batch is fixed (read from each run's stored batch sizes). Dots: runs; "
            "squares: their median with min-max; dashed: ideal (linear) scaling from the "
            f"smallest rank count. Base cases: {bases}."
            + (f" {left} more series not drawn." if left > 0 else ""),
            notes=machines_note(drawn_runs),
        )
    ]
