"""Level 1 figures: networks timed on several executors (runs of ``d5 bench net``).

Three kinds of figure, all drawn from what ``d5 bench net`` stores:

- ``net-steps-*``, one per (model, mode, batch): the time per step of each executor as a
  distribution of its raw samples (box, violin, median CI), beside its throughput (median
  with CI), each throughput also given as a ratio to the first executor its run lists
  (named, with its absolute throughput).
- ``net-breakdown-*``, one per (model, mode, batch) measured with ``--breakdown``: the
  median node times stacked per executor, grouped by operator type and direction, with
  the measured step beside them, in seconds and as a share of the step, so that the
  reader sees what the per-node times miss or count twice.
- ``net-batch-scaling``: throughput against batch size for every (model, mode) run with
  at least two batch sizes, across runs.

When several runs measured the same (model, mode, batch), each run is drawn (the newest
:data:`MAX_RUNS_PER_PROBLEM`), its executors labelled with the run's short id. At most
:data:`MAX_PROBLEMS` (model, mode, batch) are drawn, those measured most recently; the
captions say what was left out.
"""

from __future__ import annotations

import math
import statistics
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from d5core.levels.report import ReportFigure, ReportMeasurement, ReportRun
from d5core.report.style import (
    PALETTE,
    colors_for,
    draw_distributions,
    figure_key,
    new_figure,
    runs_figure,
    short_label,
    time_unit,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "MAX_BATCH_PANELS",
    "MAX_PROBLEMS",
    "MAX_RUNS_PER_PROBLEM",
    "MAX_SEGMENTS",
    "SECTION",
    "figures",
]

#: The report section these figures belong to.
SECTION = "networks"
#: How many (model, mode, batch) get a step figure (and a breakdown figure): the ones
#: whose newest run is newest.
MAX_PROBLEMS = 4
#: How many runs of one (model, mode, batch) are drawn side by side: the newest.
MAX_RUNS_PER_PROBLEM = 3
#: How many (model, mode) panels the throughput-against-batch figure holds.
MAX_BATCH_PANELS = 4
#: How many groups (operator type and direction) a breakdown bar is split into; the
#: smallest of the rest are added up as ``other``.
MAX_SEGMENTS = 8

#: On a log axis, a confidence interval is drawn whole only while it stays within this
#: factor of the drawn values; past it the axes stop and the caption says so (two
#: processes can give intervals of many decades).
_CI_REACH = 3.0


# -- what is drawn ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Series:
    """One executor measured in one run, for one (model, mode, batch)."""

    run: ReportRun
    executor: str
    mode: str
    batch: int
    time: ReportMeasurement
    throughput: ReportMeasurement | None
    nodes: tuple[ReportMeasurement, ...]


@dataclass
class _Problem:
    """Everything measured for one (model, mode, batch), by run."""

    model: str
    mode: str
    batch: int
    runs: dict[str, list[_Series]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.model} ({self.mode}, batch {self.batch})"

    def newest(self) -> str:
        return max(s[0].run.created for s in self.runs.values())


def _model_of(run: ReportRun) -> str:
    model = run.config.get("model")
    if isinstance(model, str) and model:
        return model
    name = run.name
    return name[len("bench ") :] if name.startswith("bench ") else name


def _batch_of(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _collect(runs: Sequence[ReportRun]) -> dict[tuple[str, str, int], _Problem]:
    """The (model, mode, batch) measured by the ``net`` runs among ``runs``."""
    problems: dict[tuple[str, str, int], _Problem] = {}
    for run in runs:
        if run.kind != "net":
            continue
        model = _model_of(run)
        listed = run.config.get("executors")
        order = [str(e) for e in listed] if isinstance(listed, list) else []
        index: dict[tuple[str, str, str, Any], list[ReportMeasurement]] = {}
        for m in run.measurements:
            labelled = (m.metric, str(m.labels.get("executor")), str(m.labels.get("mode")))
            index.setdefault((*labelled, m.labels.get("batch")), []).append(m)
        found: list[_Series] = []
        for m in run.measurements:
            executor = m.labels.get("executor")
            if m.metric != "time" or not isinstance(executor, str) or not m.finite:
                continue
            mode = str(m.labels.get("mode", run.config.get("mode", "inference")))
            batch = _batch_of(m.labels.get("batch", run.config.get("batch")))
            if batch is None:
                continue
            at = (executor, mode, m.labels.get("batch"))
            rates = index.get(("throughput", *at), [])
            found.append(
                _Series(
                    run=run,
                    executor=executor,
                    mode=mode,
                    batch=batch,
                    time=m,
                    throughput=rates[0] if rates else None,
                    nodes=tuple(index.get(("node_time", *at), [])),
                )
            )
        found.sort(
            key=lambda s: (
                order.index(s.executor) if s.executor in order else len(order),
                s.executor,
            )
        )
        for series in found:
            key = (model, series.mode, series.batch)
            problem = problems.setdefault(key, _Problem(*key))
            problem.runs.setdefault(run.id, []).append(series)
    return problems


# -- small helpers -----------------------------------------------------------------------


def _fmt_rate(rate: float) -> str:
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def _median_ci(m: ReportMeasurement) -> tuple[float, float, float]:
    """The stored median and CI of ``m``; the samples' median (no interval) where no
    summary was stored."""
    found = m.median_ci()
    if found is not None:
        return found
    median = float(statistics.median(m.finite)) if m.finite else float("nan")
    return median, median, median


def _short_id(run: ReportRun) -> str:
    return run.id[:6]


def _fit_limits(
    ax: Axes, values: Sequence[float], cis: Sequence[tuple[float, float]], *, log: bool
) -> bool:
    """Set the y-limits to show ``values``, and the intervals ``cis`` as far as they stay
    near them (a factor :data:`_CI_REACH` on a log axis; half the values' spread on a
    linear one); return whether an interval was cut."""
    finite = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
    if not finite:
        return False
    low, high = min(finite), max(finite)
    if log:
        floor, ceiling = low / _CI_REACH, high * _CI_REACH
    else:
        span = 0.5 * max(high - low, abs(high) * 0.2)
        floor, ceiling = low - span, high + span
    cut = False
    for a, b in cis:
        if math.isfinite(a) and (a > 0 or not log):
            if a < floor:
                cut = True
            low = min(low, max(a, floor))
        if math.isfinite(b):
            if b > ceiling:
                cut = True
            high = max(high, min(b, ceiling))
    if log:
        ax.set_yscale("log")
        ax.set_ylim(low / 1.25, high * 1.25)
    else:
        pad = 0.08 * (high - low or abs(high) or 1.0)
        ax.set_ylim(0.0 if min(finite) >= 0 else low - pad, high + pad)
    return cut


def _yerr(points: Sequence[Mapping[str, float]]) -> list[list[float]]:
    """Matplotlib's ``yerr`` (below, above) of points with ``median``, ``ci_low`` and
    ``ci_high``."""
    return [
        [max(p["median"] - p["ci_low"], 0.0) for p in points],
        [max(p["ci_high"] - p["median"], 0.0) for p in points],
    ]


def _tilt_ticks(*axes: Axes, count: int) -> None:
    """Tilt the x tick labels when ``count`` of them would crowd each other."""
    if count <= 4:
        return
    for ax in axes:
        for label in ax.get_xticklabels():
            label.set_rotation(30)
            label.set_horizontalalignment("right")


def _spans_decades(values: Sequence[float]) -> bool:
    positive = [v for v in values if math.isfinite(v) and v > 0]
    return bool(positive) and max(positive) / min(positive) > 20.0


# -- time per step and throughput ------------------------------------------------------------


def _drawn_runs(problem: _Problem) -> tuple[list[str], list[str]]:
    """The ids of ``problem``'s runs that are drawn (oldest first) and of those left out."""
    newest_first = sorted(problem.runs, key=lambda r: problem.runs[r][0].run.created, reverse=True)
    drawn = newest_first[:MAX_RUNS_PER_PROBLEM]
    return sorted(drawn, key=lambda r: problem.runs[r][0].run.created), newest_first[
        MAX_RUNS_PER_PROBLEM:
    ]


def _problem_figure(
    problem: _Problem,
    prefix: str,
    title: str,
    figure: Figure,
    *,
    drawn: Sequence[str],
    caption: Sequence[str],
    unit: str,
    scale: float,
    data: Mapping[str, Any],
    ids: Iterable[str] | None = None,
) -> ReportFigure:
    """A figure of ``problem`` drawn from its runs ``drawn`` (naming only ``ids`` of them
    where given): key and title name the problem, and its data starts with the problem
    and the time unit (``unit``, ``scale`` from seconds), then ``data``."""
    return runs_figure(
        figure,
        {"model": problem.model, "mode": problem.mode, "batch": problem.batch,
         "time_unit": unit, "time_scale": scale, **data},
        [problem.runs[r][0].run for r in drawn],
        key=figure_key(prefix, problem.model, problem.mode, problem.batch),
        title=f"{title}: {problem.name}",
        section=SECTION,
        caption=" ".join(caption),
        ids=ids,
    )  # fmt: skip


def _label(series: _Series, several: bool) -> str:
    return f"{series.executor} ({_short_id(series.run)})" if several else series.executor


def _steps_figure(
    problem: _Problem, colors: Mapping[str, str], left_out_problems: str
) -> ReportFigure:
    drawn_ids, older = _drawn_runs(problem)
    several = len(drawn_ids) > 1
    series = [s for run_id in drawn_ids for s in problem.runs[run_id]]
    labels = [_label(s, several) for s in series]
    label_colors = {label: colors[s.executor] for label, s in zip(labels, series, strict=True)}

    rows: list[dict[str, Any]] = []
    bases: list[dict[str, Any]] = []
    for run_id in drawn_ids:
        run_series = problem.runs[run_id]
        base = run_series[0]
        base_rate = _median_ci(base.throughput)[0] if base.throughput is not None else None
        bases.append({"run": run_id, "executor": base.executor, "throughput": base_rate})
        for s in run_series:
            median, low, high = _median_ci(s.time)
            row: dict[str, Any] = {
                "label": _label(s, several),
                "run": run_id,
                "executor": s.executor,
                "time": {
                    "samples": s.time.finite,
                    "median": median,
                    "ci_low": low,
                    "ci_high": high,
                },
                "throughput": None,
                "ratio": None,
            }
            if s.throughput is not None:
                rate, rate_low, rate_high = _median_ci(s.throughput)
                row["throughput"] = {"median": rate, "ci_low": rate_low, "ci_high": rate_high}
                if base_rate:
                    row["ratio"] = rate / base_rate
            rows.append(row)

    every_time = [v for r in rows for v in r["time"]["samples"]]
    unit, scale = time_unit([r["time"]["median"] for r in rows])
    figure = new_figure(9.0, 3.8)
    time_ax, rate_ax = figure.subplots(1, 2)
    groups = [
        (r["label"], r["time"]["samples"],
         (r["time"]["median"], r["time"]["ci_low"], r["time"]["ci_high"]))
        for r in rows
    ]  # fmt: skip
    log = _spans_decades(every_time)
    # a violin is a density of the linear values: on a log axis it would mislead
    draw_distributions(
        time_ax, groups, colors=label_colors, scale=scale, violin_from=10**9 if log else 30
    )
    cut_time = _fit_limits(
        time_ax,
        [v * scale for v in every_time],
        [(r["time"]["ci_low"] * scale, r["time"]["ci_high"] * scale) for r in rows],
        log=log,
    )
    time_ax.set_ylabel(f"time per step ({unit})")
    time_ax.set_title("time per step")

    positions = list(range(1, len(rows) + 1))
    rated = [(p, r) for p, r in zip(positions, rows, strict=True) if r["throughput"]]
    if rated:
        where = [p for p, _ in rated]
        middle = [r["throughput"]["median"] for _, r in rated]
        rate_ax.errorbar(
            where, middle, yerr=_yerr([r["throughput"] for _, r in rated]), fmt="none",
            ecolor="black", capsize=4, linewidth=1.2,
        )  # fmt: skip
        rate_ax.scatter(
            where, middle, s=40, zorder=3, c=[label_colors[r["label"]] for _, r in rated]
        )
    for p, r in rated:
        if r["ratio"] is not None:
            rate_ax.annotate(
                f"{r['ratio']:.2f}×", (p, r["throughput"]["median"]), textcoords="offset points",
                xytext=(8, 0), va="center", fontsize=8,
            )  # fmt: skip
    rate_values = [r["throughput"]["median"] for _, r in rated]
    cut_rate = _fit_limits(
        rate_ax,
        rate_values,
        [(r["throughput"]["ci_low"], r["throughput"]["ci_high"]) for _, r in rated],
        log=_spans_decades(rate_values),
    )
    ticks = [short_label(r["label"], 24) for r in rows]
    time_ax.set_xticks(positions, ticks)
    rate_ax.set_xticks(positions, ticks)
    rate_ax.set_xlim(0.5, len(rows) + 0.5)
    _tilt_ticks(time_ax, rate_ax, count=len(rows))
    rate_ax.set_ylabel("throughput (samples/s)")
    base_text = "; ".join(
        f"{b['executor']} = 1.00 ({_fmt_rate(b['throughput'])} samples/s)"
        + (f" in {b['run'][:6]}" if several else "")
        for b in bases
        if b["throughput"]
    )
    rate_ax.set_title(
        textwrap.fill("throughput; ratio to " + base_text if base_text else "throughput", 64),
        fontsize=8,
    )

    caption = [
        f"{problem.name}: time per step of each executor, every stored sample as a box"
        + ("" if log else " (a violin behind it from 30 samples)")
        + ", the black bar the median with its 95% CI "
        "(between processes where several ran); right, the throughput's median with its "
        f"95% CI, and its ratio to the first executor the run lists ({base_text or 'none'})."
    ]
    if several:
        caption.append(
            f"Several runs measured this network: each is drawn (the newest "
            f"{MAX_RUNS_PER_PROBLEM} at most), its executors labelled with the run's short id."
        )
    if older:
        caption.append(f"{len(older)} older run(s) left out: {', '.join(older)}.")
    if cut_time or cut_rate:
        caption.append(
            "A confidence interval that runs past the axes is cut there (few processes "
            "give very wide intervals)."
        )
    if log:
        caption.append("The time axis is logarithmic (so no violins).")
    if left_out_problems:
        caption.append(left_out_problems)
    data = {"runs_left_out": older, "bases": bases, "series": rows}
    return _problem_figure(
        problem, "net-steps", "Time per step and throughput", figure,
        drawn=drawn_ids, caption=caption, unit=unit, scale=scale, data=data,
    )  # fmt: skip


# -- per-node breakdown ------------------------------------------------------------------------


def _segment_name(op_type: str, direction: str, both: bool) -> str:
    return f"{op_type} ({direction})" if both else op_type


def _breakdown_figure(problem: _Problem, left_out_problems: str) -> ReportFigure | None:
    drawn_ids, _ = _drawn_runs(problem)
    several = len(drawn_ids) > 1
    series = [s for run_id in drawn_ids for s in problem.runs[run_id] if s.nodes]
    if not series:
        return None
    both = len({str(n.labels.get("direction", "forward")) for s in series for n in s.nodes}) > 1

    rows: list[dict[str, Any]] = []
    totals: dict[str, float] = {}
    for s in series:
        nodes: list[dict[str, Any]] = []
        grouped: dict[str, float] = {}
        for n in s.nodes:
            median = _median_ci(n)[0]
            op_type = str(n.labels.get("op_type", "?"))
            direction = str(n.labels.get("direction", "forward"))
            nodes.append({
                "node": str(n.labels.get("node", "?")), "op_type": op_type,
                "direction": direction, "median": median,
                "fallback": n.labels.get("fallback") == "yes",
            })  # fmt: skip
            segment = _segment_name(op_type, direction, both)
            grouped[segment] = grouped.get(segment, 0.0) + (median if math.isfinite(median) else 0)
        for name, value in grouped.items():
            totals[name] = totals.get(name, 0.0) + value
        step, step_low, step_high = _median_ci(s.time)
        node_sum = sum(node["median"] for node in nodes if math.isfinite(node["median"]))
        rows.append({
            "label": _label(s, several), "run": s.run.id, "executor": s.executor,
            "nodes": nodes, "grouped": grouped, "node_sum": node_sum,
            "step": {"median": step, "ci_low": step_low, "ci_high": step_high},
        })  # fmt: skip

    ranked = sorted(totals, key=lambda name: (-totals[name], name))
    kept = ranked if len(ranked) <= MAX_SEGMENTS else ranked[: MAX_SEGMENTS - 1]
    segments = [*kept, "other"] if len(kept) < len(ranked) else kept
    for row in rows:
        grouped = row.pop("grouped")
        row["segments"] = {name: grouped.get(name, 0.0) for name in kept}
        if "other" in segments:
            row["segments"]["other"] = sum(v for k, v in grouped.items() if k not in kept)
        row["share_of_step"] = (
            {k: v / row["step"]["median"] for k, v in row["segments"].items()}
            if row["step"]["median"] > 0
            else None
        )

    unit, scale = time_unit([max(r["node_sum"], r["step"]["median"]) for r in rows])
    segment_colors = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(kept)}
    segment_colors["other"] = "#BBBBBB"
    figure = new_figure(9.0, 4.0)
    abs_ax, share_ax = figure.subplots(1, 2)
    positions = list(range(1, len(rows) + 1))
    for name in segments:
        backward = both and name.endswith("(backward)")
        for ax, values in (
            (abs_ax, [r["segments"][name] * scale for r in rows]),
            (
                share_ax,
                [100 * r["share_of_step"][name] if r["share_of_step"] else 0.0 for r in rows],
            ),
        ):
            bottoms = _bottoms(rows, segments, name, scale if ax is abs_ax else None)
            ax.bar(
                positions, values, bottom=bottoms, width=0.6, color=segment_colors[name],
                hatch="//" if backward else None, edgecolor="white", linewidth=0.5,
                label=name if ax is abs_ax else None,
            )  # fmt: skip
    abs_ax.errorbar(
        [p + 0.38 for p in positions], [r["step"]["median"] * scale for r in rows],
        yerr=[[v * scale for v in side] for side in _yerr([r["step"] for r in rows])],
        fmt="D", color="black", markersize=4, capsize=3, label="measured step (median, 95% CI)",
    )  # fmt: skip
    for p, r in zip(positions, rows, strict=True):
        if r["step"]["median"] > 0:
            covered = 100 * r["node_sum"] / r["step"]["median"]
            share_ax.annotate(
                f"{covered:.0f}%", (p, covered),
                textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8,
            )  # fmt: skip
    tops = [r["node_sum"] * scale for r in rows] + [r["step"]["median"] * scale for r in rows]
    cut = _fit_limits(
        abs_ax, tops, [(r["step"]["ci_low"] * scale, r["step"]["ci_high"] * scale) for r in rows],
        log=False,
    )  # fmt: skip
    abs_ax.set_ylim(bottom=0.0)
    share_ax.axhline(100.0, color="black", linewidth=1.0, linestyle="--")
    share_ax.set_ylim(0.0, max([110.0] + [100 * r["node_sum"] / r["step"]["median"] * 1.12
                                          for r in rows if r["step"]["median"] > 0]))  # fmt: skip
    ticks = [short_label(r["label"], 24) for r in rows]
    abs_ax.set_xticks(positions, ticks)
    share_ax.set_xticks(positions, ticks)
    _tilt_ticks(abs_ax, share_ax, count=len(rows))
    abs_ax.set_ylabel(f"median node time ({unit})")
    abs_ax.set_title("node medians stacked; ◆ the measured step")
    share_ax.set_ylabel("% of the measured step")
    share_ax.set_title("as a share of the step (dashed: 100%)")
    figure.legend(
        *abs_ax.get_legend_handles_labels(), loc="outside right upper", fontsize=7, frameon=False
    )

    fallback = sorted({n["node"] for r in rows for n in r["nodes"] if n["fallback"]})
    caption = [
        f"{problem.name}: the median time of every node (from the separate per-node run of "
        "--breakdown), added up per operator type"
        + (" and direction (backward hatched)" if both else "")
        + (
            f", the smallest beyond {MAX_SEGMENTS - 1} groups as 'other'"
            if "other" in segments
            else ""
        )
        + "; the black diamond is the measured step with its 95% CI. Right: the same as a "
        "share of the measured step; a bar short of 100% is time the nodes do not account "
        "for (work between nodes), a bar past it is tracing overhead or load."
    ]
    if several:
        caption.append("Executors are labelled with the short id of their run.")
    missing = [s.executor for run_id in drawn_ids for s in problem.runs[run_id] if not s.nodes]
    if missing:
        caption.append(f"Not broken down: {', '.join(sorted(set(missing)))}.")
    if fallback:
        caption.append(f"Run by an executor's fallback engine: {', '.join(fallback)}.")
    if cut:
        caption.append("A confidence interval that runs past the axes is cut there.")
    if left_out_problems:
        caption.append(left_out_problems)
    return _problem_figure(
        problem, "net-breakdown", "Per-node breakdown", figure,
        drawn=drawn_ids, caption=caption, unit=unit, scale=scale,
        data={"segments": segments, "series": rows}, ids=dict.fromkeys(r["run"] for r in rows),
    )  # fmt: skip


def _bottoms(
    rows: Sequence[Mapping[str, Any]], segments: Sequence[str], name: str, scale: float | None
) -> list[float]:
    """Where the bar of segment ``name`` starts in each row: the segments before it,
    in seconds times ``scale``, or in percent of the step when ``scale`` is ``None``."""
    before = segments[: segments.index(name)]
    if scale is not None:
        return [sum(r["segments"][k] for k in before) * scale for r in rows]
    return [
        sum(100 * r["share_of_step"][k] for k in before) if r["share_of_step"] else 0.0
        for r in rows
    ]


# -- throughput against batch size ---------------------------------------------------------------


def _batch_figure(
    problems: Mapping[tuple[str, str, int], _Problem], colors: Mapping[str, str]
) -> ReportFigure | None:
    # (model, mode) -> executor -> batch -> the newest series with a throughput
    networks: dict[tuple[str, str], dict[str, dict[int, _Series]]] = {}
    for (model, mode, batch), problem in problems.items():
        for run_series in problem.runs.values():
            for s in run_series:
                if s.throughput is None:
                    continue
                by_batch = networks.setdefault((model, mode), {}).setdefault(s.executor, {})
                known = by_batch.get(batch)
                if known is None or s.run.created > known.run.created:
                    by_batch[batch] = s
    scaling = {
        key: executors
        for key, executors in networks.items()
        if any(len(batches) >= 2 for batches in executors.values())
    }
    if not scaling:
        return None

    def newest(key: tuple[str, str]) -> str:
        return max(s.run.created for b in scaling[key].values() for s in b.values())

    chosen = sorted(scaling, key=newest, reverse=True)
    drawn, left_out = sorted(chosen[:MAX_BATCH_PANELS]), chosen[MAX_BATCH_PANELS:]
    columns = min(len(drawn), 3)
    rows_n = math.ceil(len(drawn) / columns)
    figure = new_figure(3.4 * columns + 1.2, 3.0 * rows_n)
    axes = figure.subplots(rows_n, columns, squeeze=False)
    panels: list[dict[str, Any]] = []
    drawn_runs: dict[str, ReportRun] = {}
    for index, (model, mode) in enumerate(drawn):
        ax = axes[index // columns][index % columns]
        executors: dict[str, list[dict[str, Any]]] = {}
        for executor in sorted(scaling[(model, mode)]):
            points: list[dict[str, Any]] = []
            for batch, s in sorted(scaling[(model, mode)][executor].items()):
                assert s.throughput is not None
                median, low, high = _median_ci(s.throughput)
                points.append({"batch": batch, "median": median, "ci_low": low,
                               "ci_high": high, "run": s.run.id})  # fmt: skip
                drawn_runs[s.run.id] = s.run
            executors[executor] = points
            ax.errorbar(
                [p["batch"] for p in points], [p["median"] for p in points],
                yerr=_yerr(points),
                fmt="-o", color=colors[executor], markersize=4, capsize=3, label=executor,
            )  # fmt: skip
        values = [p["median"] for ps in executors.values() for p in ps]
        _fit_limits(
            ax, values, [(p["ci_low"], p["ci_high"]) for ps in executors.values() for p in ps],
            log=_spans_decades(values),
        )  # fmt: skip
        ax.set_xscale("log", base=2)
        batches = sorted({p["batch"] for ps in executors.values() for p in ps})
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.minorticks_off()
        ax.set_xlabel("batch size")
        ax.set_ylabel("throughput (samples/s)")
        ax.set_title(short_label(f"{model} ({mode})", 40))
        ax.legend(fontsize=7)
        panels.append({"model": model, "mode": mode, "executors": executors})
    for index in range(len(drawn), rows_n * columns):
        axes[index // columns][index % columns].set_visible(False)
    caption = (
        "Throughput (median with its 95% CI) against batch size, per executor, for every "
        "network run with at least two batch sizes; where several runs measured the same "
        "batch on the same executor, the newest is drawn. Batch sizes on a log2 axis."
    )
    if left_out:
        caption += (
            f" {len(left_out)} more network(s) left out: "
            + ", ".join(f"{m} ({mode})" for m, mode in left_out)
            + "."
        )
    return runs_figure(
        figure,
        {"panels": panels},
        list(drawn_runs.values()),
        key="net-batch-scaling",
        title="Throughput against batch size",
        section=SECTION,
        caption=caption,
        ids=sorted(drawn_runs),
    )


# -- the section -------------------------------------------------------------------------------


def figures(runs: Sequence[ReportRun]) -> list[ReportFigure]:
    """The networks section's figures of the ``net`` runs among ``runs`` (others are
    ignored; no figure without them)."""
    problems = _collect(runs)
    if not problems:
        return []
    executors = {s.executor for p in problems.values() for ss in p.runs.values() for s in ss}
    colors = colors_for(executors)
    newest_first = sorted(problems.values(), key=lambda p: p.newest(), reverse=True)
    drawn = sorted(newest_first[:MAX_PROBLEMS], key=lambda p: (p.model, p.mode, p.batch))
    left = newest_first[MAX_PROBLEMS:]
    left_note = (
        f"{len(left)} further network setting(s) of older runs are not drawn (the "
        f"{MAX_PROBLEMS} measured most recently are): "
        + ", ".join(p.name for p in left[:10])
        + (", ..." if len(left) > 10 else "")
        + "."
        if left
        else ""
    )
    found: list[ReportFigure] = []
    for problem in drawn:
        found.append(_steps_figure(problem, colors, left_note))
    for problem in drawn:
        breakdown = _breakdown_figure(problem, left_note)
        if breakdown is not None:
            found.append(breakdown)
    batch = _batch_figure(problems, colors)
    if batch is not None:
        found.append(batch)
    return found
