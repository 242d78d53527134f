"""Level 0 figures: the operator runs of ``d5 bench op`` (runs of kind ``op``).

For each operator, dtype and direction (a *group*), two figures:

- the samples of every backend on each problem, as box (and violin) plots with the
  median's confidence interval, several problems as subplots of one figure;
- the dispatch-cost curve: the median time per call, with its interval, against the
  problem's size (its FLOPs, or its compulsory bytes where the FLOPs are not counted),
  log-log, one line per backend joining its problems in size order.

And for each dtype one roofline: the achieved GFLOP/s of every (backend, problem)
against its arithmetic intensity (FLOPs over compulsory bytes), log-log, under the
machine's compute roof (the stored ``peak_gflops``) and memory roof (the stored
``peak_bandwidth`` times the intensity), each point with its fraction of the peak (the
stored ``peak_fraction``, of the peak of the threads its backend ran on), each backend's
median fraction in the legend. Everything drawn is read from the store
(``problem_flops`` and ``problem_bytes`` are stored by ``d5 bench op`` for each problem);
nothing is derived from the problems again. Runs made before those metrics were stored
are named in the captions of the figures that cannot draw them.

The number of figures stays bounded however many runs are given: the newest
:data:`MAX_GROUPS` groups, the newest :data:`MAX_RUNS_PER_GROUP` runs of each and the
first :data:`MAX_PROBLEMS_PER_FIGURE` problems of a group's samples are drawn; captions
say what was left out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from d5core.levels.report import ReportFigure, ReportMeasurement, ReportRun
from d5core.report.style import (
    colors_for,
    draw_distributions,
    figure_key,
    new_figure,
    runs_figure,
    short_label,
    time_unit,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "MAX_GROUPS",
    "MAX_PROBLEMS_PER_FIGURE",
    "MAX_RUNS_PER_GROUP",
    "SECTION",
    "figures",
]

#: The report section these figures belong to.
SECTION = "operators"
#: Groups (operator, dtype, direction) drawn, the newest first.
MAX_GROUPS = 4
#: Runs of one group drawn, the newest.
MAX_RUNS_PER_GROUP = 3
#: Problems drawn as subplots of one samples figure.
MAX_PROBLEMS_PER_FIGURE = 9

_DIRECTION_MARKERS = {"forward": "o", "backward": "^"}


@dataclass
class _Group:
    """The runs of one operator in one dtype and direction."""

    op: str
    dtype: str
    direction: str
    runs: list[ReportRun] = field(default_factory=list)
    #: Runs of the group left out (older than the newest MAX_RUNS_PER_GROUP).
    left_out: list[ReportRun] = field(default_factory=list)

    @property
    def newest(self) -> str:
        return max(run.created for run in [*self.runs, *self.left_out])

    @property
    def title(self) -> str:
        return f"{self.op} {self.direction} ({self.dtype})"


def _op_of(run: ReportRun) -> str:
    op = run.config.get("op")
    if op:
        return str(op)
    name = run.name
    return name[len("bench ") :] if name.startswith("bench ") else name


def _timings(run: ReportRun) -> list[ReportMeasurement]:
    """The run's per-(backend, problem) time measurements."""
    return [m for m in run.find("time") if "backend" in m.labels and "problem" in m.labels]


def _collect(runs: Sequence[ReportRun]) -> tuple[list[_Group], list[_Group]]:
    """The groups drawn (the newest first, their runs oldest first) and those left out."""
    groups: dict[tuple[str, str, str], _Group] = {}
    for run in runs:
        if run.kind != "op":
            continue
        keys = {
            (_op_of(run), str(m.labels.get("dtype", "")), str(m.labels.get("direction", "")))
            for m in _timings(run)
        }
        for key in sorted(keys):
            groups.setdefault(key, _Group(*key)).runs.append(run)
    for group in groups.values():
        group.runs.sort(key=lambda r: (r.created, r.id))
        group.left_out = group.runs[:-MAX_RUNS_PER_GROUP]
        group.runs = group.runs[-MAX_RUNS_PER_GROUP:]
    ordered = sorted(groups.values(), key=lambda g: (g.newest, g.op), reverse=True)
    return ordered[:MAX_GROUPS], ordered[MAX_GROUPS:]


def _problems(group: _Group) -> list[str]:
    """The group's problems in the order its runs list them."""
    order: dict[str, None] = {}
    for run in group.runs:
        listed = run.config.get("problems")
        timed = {str(m.labels["problem"]) for m in _timings(run)}
        if isinstance(listed, list):
            order.update((str(p), None) for p in listed if str(p) in timed)
        order.update((str(m.labels["problem"]), None) for m in _timings(run))
    return list(order)


def _backends(group: _Group) -> list[str]:
    return sorted({str(m.labels["backend"]) for run in group.runs for m in _timings(run)})


def _measurement(
    run: ReportRun, metric: str, group: _Group, problem: str, backend: str
) -> ReportMeasurement | None:
    found = run.find(
        metric, backend=backend, problem=problem, direction=group.direction, dtype=group.dtype
    )
    return found[0] if found else None


def _plain(text: str) -> str:
    """``text`` as matplotlib draws it literally: dollar signs escaped, so that a name
    holding two of them is not read as mathematical notation (which can fail to draw)."""
    return text.replace("$", r"\$")


def _short_id(run: ReportRun) -> str:
    return run.id[:6]


def _names(items: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _left_out_runs_text(group: _Group) -> str:
    if not group.left_out:
        return ""
    ids = [_short_id(r) for r in group.left_out]
    return f" Older runs of {group.title} left out: {_names(ids)}."


def _group_figure(
    group: _Group,
    prefix: str,
    title: str,
    figure: Figure,
    caption: str,
    data: Mapping[str, Any],
    ids: Iterable[str] | None = None,
) -> ReportFigure:
    """A figure of ``group``'s runs (naming only ``ids`` of them where given): key and
    title name the group; its data is the group, ``data``, then the runs left out, which
    the caption names last."""
    return runs_figure(
        figure,
        {"op": group.op, "dtype": group.dtype, "direction": group.direction, **data,
         "left_out_runs": [r.id for r in group.left_out]},
        group.runs,
        key=figure_key(prefix, group.op, group.dtype, group.direction),
        title=f"{group.title}: {title}",
        section=SECTION,
        caption=caption + _left_out_runs_text(group),
        ids=ids,
    )  # fmt: skip


# -- samples per backend ---------------------------------------------------------------------


def _samples_figure(group: _Group, colors: dict[str, str]) -> ReportFigure | None:
    problems = _problems(group)
    shown, hidden = problems[:MAX_PROBLEMS_PER_FIGURE], problems[MAX_PROBLEMS_PER_FIGURE:]
    several = len(group.runs) > 1
    panels: list[dict[str, Any]] = []
    for problem in shown:
        entries: list[dict[str, Any]] = []
        for run in group.runs:
            for backend in _backends(group):
                m = _measurement(run, "time", group, problem, backend)
                if m is None:
                    continue
                ci = m.median_ci()
                label = f"{backend} {_short_id(run)}" if several else backend
                entries.append(
                    {
                        "label": label,
                        "run": run.id,
                        "backend": backend,
                        "samples": m.finite,
                        "median": None if ci is None else ci[0],
                        "ci_low": None if ci is None else ci[1],
                        "ci_high": None if ci is None else ci[2],
                    }
                )
        if entries:
            unit, scale = time_unit([v for e in entries for v in e["samples"]])
            y_range, cut = _sample_range(entries)
            panels.append(
                {
                    "problem": problem,
                    "unit": unit,
                    "scale": scale,
                    "y_range": y_range,
                    "cut": cut,
                    "groups": entries,
                }
            )
    if not panels:
        return None
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    figure = new_figure(3.3 * columns, 2.7 * rows + 0.3)
    axes = figure.subplots(rows, columns, squeeze=False)
    for index, panel in enumerate(panels):
        ax = axes[index // columns][index % columns]
        groups = [
            (
                _plain(e["label"]),
                e["samples"],
                None if e["median"] is None else (e["median"], e["ci_low"], e["ci_high"]),
            )
            for e in panel["groups"]
        ]
        label_colors = {_plain(e["label"]): colors[e["backend"]] for e in panel["groups"]}
        low, high = panel["y_range"]
        # Backends a factor 20 apart share a panel on a log axis, where a box of each can
        # be read; a violin (a density of the linear values) is then left out.
        positive = [v for e in panel["groups"] for v in e["samples"] if v > 0]
        smallest = min(positive) if positive else 0.0
        log_axis = smallest > 0 and high / smallest > 20
        if log_axis:
            low = smallest / 1.25
        panel["log_axis"] = log_axis
        draw_distributions(
            ax, groups, colors=label_colors, scale=panel["scale"],
            violin_from=10**9 if log_axis else 30,
        )  # fmt: skip
        if log_axis:
            ax.set_yscale("log")
        ax.set_ylim(low * panel["scale"], high * panel["scale"])
        ax.set_title(_plain(short_label(panel["problem"], 36)), fontsize=8)
        ax.set_ylabel(f"time per call ({panel['unit']})")
        ax.tick_params(axis="x", labelrotation=30 if several else 0, labelsize=7)
    for index in range(len(panels), rows * columns):
        axes[index // columns][index % columns].set_visible(False)
    figure.suptitle(_plain(f"{group.title}: samples per backend"))
    caption = (
        "The samples of every backend on each problem: boxes span the quartiles, "
        "whiskers 1.5 IQR, a violin shows the density where there are at least 30 "
        "samples; the black bar is the median with its 95% confidence interval (between "
        "processes where several processes were run). Each panel has its own time unit; "
        "a panel whose backends lie more than a factor 20 apart is drawn on a log axis, "
        "without violins."
    )
    if several:
        caption += " Labels name the backend and the run id."
    cut_panels = [str(p["problem"]) for p in panels if p["cut"]]
    if cut_panels:
        caption += (
            " Each axis spans the 1st to 99th percentile of every backend's samples and "
            f"the medians; samples and intervals beyond it are cut in {len(cut_panels)} "
            f"panel(s) ({_names(cut_panels, 3)}), their full extent is in the data."
        )
    if hidden:
        caption += (
            f" {len(hidden)} of {len(problems)} problems left out (at most "
            f"{MAX_PROBLEMS_PER_FIGURE} per figure): {_names(hidden, 4)}."
        )
    data = {"runs": [r.id for r in group.runs], "problems": panels, "left_out_problems": hidden}
    return _group_figure(group, "op-samples", "samples per backend", figure, caption, data)


def _sample_range(entries: Sequence[dict[str, Any]]) -> tuple[list[float], bool]:
    """The time axis of a samples panel, in seconds: from the lowest 1st to the highest
    99th percentile of its groups' samples (and every median), padded by 5%; and whether
    a sample or an interval lies beyond it."""
    import numpy as np

    lows, highs, extremes = [], [], []
    for entry in entries:
        if entry["samples"]:
            p1, p99 = np.percentile(entry["samples"], [1, 99])
            lows.append(float(p1))
            highs.append(float(p99))
            extremes += [min(entry["samples"]), max(entry["samples"])]
        if entry["median"] is not None:
            lows.append(entry["median"])
            highs.append(entry["median"])
            extremes += [entry["ci_low"], entry["ci_high"]]
    if not lows:
        return [0.0, 1.0], False
    low, high = min(lows), max(highs)
    pad = 0.05 * (high - low) or 0.05 * abs(high) or 1e-9
    low, high = max(0.0, low - pad), high + pad
    return [low, high], any(v < low or v > high for v in extremes)


def _log_limits(values: Sequence[float], floor: Sequence[float] = ()) -> list[float]:
    """Log-axis limits around ``values`` (and ``floor``): a factor 3 beyond each end."""
    finite = [v for v in [*values, *floor] if v is not None and math.isfinite(v) and v > 0]
    if not finite:
        return [0.1, 10.0]
    return [min(finite) / 3, max(finite) * 3]


# -- dispatch-cost curve ---------------------------------------------------------------------


def _size_metric(run: ReportRun, name: str, group: _Group, problem: str) -> float | None:
    value = run.metric_value(name, problem=problem, direction=group.direction, dtype=group.dtype)
    return None if value is None or not math.isfinite(value) else value


def _dispatch_figure(group: _Group, colors: dict[str, str]) -> ReportFigure | None:
    problems = _problems(group)
    sizes: dict[tuple[str, str], tuple[float | None, float | None]] = {}
    for run in group.runs:
        for problem in problems:
            sizes[(run.id, problem)] = (
                _size_metric(run, "problem_flops", group, problem),
                _size_metric(run, "problem_bytes", group, problem),
            )
    known = [s for s in sizes.values() if s[0] is not None or s[1] is not None]
    if not known:
        return None
    by_flops = all(f is not None and f > 0 for f, _ in known)
    quantity = "flops" if by_flops else "bytes"
    several = len(group.runs) > 1
    lines: list[dict[str, Any]] = []
    unsized: list[str] = []
    for run in group.runs:
        for backend in _backends(group):
            points = []
            for problem in problems:
                m = _measurement(run, "time", group, problem, backend)
                if m is None:
                    continue
                flops, nbytes = sizes[(run.id, problem)]
                size = flops if by_flops else nbytes
                ci = m.median_ci()
                if size is None or size <= 0 or ci is None or ci[0] <= 0:
                    if run.id not in unsized:
                        unsized.append(run.id)
                    continue
                points.append(
                    {
                        "problem": problem,
                        "size": size,
                        "median": ci[0],
                        "ci_low": ci[1],
                        "ci_high": ci[2],
                    }
                )
            if points:
                points.sort(key=lambda p: (p["size"], p["problem"]))
                label = f"{backend} {_short_id(run)}" if several else backend
                lines.append({"label": label, "run": run.id, "backend": backend, "points": points})
    if not lines:
        return None
    unit, scale = time_unit([p["median"] for line in lines for p in line["points"]])
    figure = new_figure(6.4, 4.0)
    ax = figure.subplots()
    styles = ["-", "--", ":"]
    run_ids = [r.id for r in group.runs]
    for line in lines:
        xs = [p["size"] for p in line["points"]]
        ys = [p["median"] * scale for p in line["points"]]
        low = [(p["median"] - p["ci_low"]) * scale for p in line["points"]]
        high = [(p["ci_high"] - p["median"]) * scale for p in line["points"]]
        ax.errorbar(
            xs,
            ys,
            yerr=[low, high],
            fmt="o",
            linestyle=styles[run_ids.index(line["run"]) % len(styles)],
            color=colors[line["backend"]],
            markersize=3,
            capsize=2,
            linewidth=1,
            label=_plain(short_label(line["label"], 28)),
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    y_range = _log_limits([p["median"] for line in lines for p in line["points"]])
    ax.set_ylim(y_range[0] * scale, y_range[1] * scale)
    cut = any(
        p["ci_low"] < y_range[0] or p["ci_high"] > y_range[1]
        for line in lines
        for p in line["points"]
    )
    ax.set_xlabel("problem size (FLOPs)" if by_flops else "problem size (compulsory bytes)")
    ax.set_ylabel(f"time per call ({unit})")
    ax.set_title(_plain(f"{group.title}: time per call against size"))
    ax.legend(fontsize=7)
    caption = (
        "The median time per call of each backend on each problem, with its 95% "
        "confidence interval, against the problem's "
        + (
            "FLOPs (as stored with the run)"
            if by_flops
            else "compulsory bytes (every input read and every output written once, as "
            "stored with the run; some problems have no counted FLOPs)"
        )
        + "; each backend's problems are joined in size order. Where the curve flattens "
        "towards small sizes, the time per call is the backend's dispatch cost."
    )
    if cut:
        caption += (
            " The time axis spans the medians a factor 3 either way; intervals beyond it "
            "are cut (their full extent is in the data)."
        )
    if unsized:
        caption += f" Not drawn (no stored problem size): runs {_names([i[:6] for i in unsized])}."
    data = {
        "size": quantity,
        "unit": unit,
        "scale": scale,
        "y_range": y_range,
        "lines": lines,
        "not_drawn": unsized,
    }
    title = "time per call against size"
    return _group_figure(group, "op-dispatch", title, figure, caption, data, ids=run_ids)


# -- roofline --------------------------------------------------------------------------------


def _max_metric(
    runs: Sequence[ReportRun], name: str, **labels: Any
) -> tuple[float | None, list[str]]:
    """The largest stored ``name`` over ``runs``, with the sources stored beside it."""
    best: float | None = None
    sources: list[str] = []
    for run in runs:
        for record in run.metric_records(name, **labels):
            # a peak stored per backend is that of its threads, not the machine's roof
            if "backend" in record.labels:
                continue
            if not math.isfinite(record.value) or record.value <= 0:
                continue
            if best is None or record.value > best:
                best = record.value
            source = str(record.labels.get("source", ""))
            if source and source not in sources:
                sources.append(source)
    return best, sources


def _roofs(runs: Sequence[ReportRun], dtype: str) -> list[dict[str, Any]]:
    """One roof pair per machine, the largest peak and bandwidth its runs stored;
    machines with the same pair share one."""
    machines: dict[str, list[ReportRun]] = {}
    for run in runs:
        machines.setdefault(run.machine, []).append(run)
    roofs: list[dict[str, Any]] = []
    for machine, members in sorted(machines.items()):
        peak, peak_sources = _max_metric(members, "peak_gflops", dtype=dtype)
        bandwidth, bandwidth_sources = _max_metric(members, "peak_bandwidth")
        if peak is None and bandwidth is None:
            continue
        peaks = {_max_metric([r], "peak_gflops", dtype=dtype)[0] for r in members}
        bandwidths = {r.metric_value("peak_bandwidth") for r in members}
        varied = len(peaks - {None}) > 1 or len(bandwidths - {None}) > 1
        same = [r for r in roofs if (r["peak_gflops"], r["peak_bandwidth"]) == (peak, bandwidth)]
        if same:
            same[0]["machines"].append(machine)
            same[0]["runs"] += [r.id for r in members]
            same[0]["varied"] = same[0]["varied"] or varied
            continue
        roofs.append(
            {
                "machines": [machine],
                "runs": [r.id for r in members],
                "peak_gflops": peak,
                "peak_bandwidth": bandwidth,
                "ridge_intensity": None if peak is None or bandwidth is None else peak / bandwidth,
                "peak_sources": peak_sources,
                "bandwidth_sources": bandwidth_sources,
                "varied": varied,
            }
        )
    return roofs


def _point_fraction(
    point: dict[str, Any], run: ReportRun, dtype: str, roofs: Sequence[dict[str, Any]]
) -> None:
    """Put in ``point`` its fraction of the compute roof it sits under (``peak_fraction``),
    that roof (``fraction_of``, GFLOP/s), the cores it counts (``peak_cores``: ``None``
    for the machine's) and where the fraction comes from (``fraction_from``): ``stored``
    by ``d5 bench op`` (of the peak of the threads the backend ran on), else ``roof``,
    the point's GFLOP/s over the roof drawn for its run (``None`` without one)."""
    labels = {k: point[k] for k in ("backend", "problem", "direction")}
    stored = run.metric_value("peak_fraction", dtype=dtype, **labels)
    of = run.metric_records("peak_gflops", dtype=dtype, **labels)
    roof = next((r["peak_gflops"] for r in roofs if run.id in r["runs"]), None)
    if stored is not None:
        whole = _max_metric([run], "peak_gflops", dtype=dtype)[0]
        point.update(peak_fraction=stored, fraction_from="stored",
                     fraction_of=of[0].value if of else whole,
                     peak_cores=of[0].labels.get("cores") if of else None)  # fmt: skip
        return
    fraction = point["gflops"] / roof if roof else None
    point.update(peak_fraction=fraction, fraction_of=roof, peak_cores=None,
                 fraction_from="roof" if roof else None)  # fmt: skip


def _median_fractions(points: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Per backend, the median fraction of peak of its points (backends with none are
    left out)."""
    by_backend: dict[str, list[float]] = {}
    for p in points:
        if p["peak_fraction"] is not None:
            by_backend.setdefault(p["backend"], []).append(p["peak_fraction"])
    return {b: statistics.median(values) for b, values in sorted(by_backend.items())}


def _legend_label(backend: str, fractions: Mapping[str, float]) -> str:
    name = short_label(backend, 20)
    fraction = fractions.get(backend)
    return name if fraction is None else f"{name} ({100 * fraction:.0f}% of peak)"


def _core_roofs(
    points: Sequence[dict[str, Any]], roofs: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The peaks of fewer cores than a drawn roof's that stored fractions are of (a
    backend on 1 thread of 2 cores), each once: ``cores`` and ``gflops``."""
    drawn = [r["peak_gflops"] for r in roofs if r["peak_gflops"]]
    found: dict[tuple[int, float], dict[str, Any]] = {}
    for p in points:
        cores, of = p["peak_cores"], p["fraction_of"]
        if p["fraction_from"] != "stored" or not cores or not of:
            continue
        if not any(math.isclose(of, d, rel_tol=1e-3) for d in drawn):
            found.setdefault((cores, round(of, 1)), {"cores": cores, "gflops": of})
    return [found[k] for k in sorted(found)]


def _roofline_figure(
    dtype: str, groups: Sequence[_Group], colors: dict[str, str]
) -> ReportFigure | None:
    runs: dict[str, ReportRun] = {}
    for group in groups:
        runs.update((r.id, r) for r in group.runs)
    points: list[dict[str, Any]] = []
    without_bytes: list[str] = []
    for group in groups:
        for run in group.runs:
            if not run.metric_records("problem_bytes"):
                if run.id not in without_bytes:
                    without_bytes.append(run.id)
                continue
            for problem in _problems(group):
                flops = _size_metric(run, "problem_flops", group, problem)
                nbytes = _size_metric(run, "problem_bytes", group, problem)
                if not flops or not nbytes or flops <= 0 or nbytes <= 0:
                    continue
                for backend in _backends(group):
                    m = _measurement(run, "gflops", group, problem, backend)
                    ci = None if m is None else m.median_ci()
                    if ci is None or ci[0] <= 0:
                        continue
                    points.append(
                        {
                            "run": run.id,
                            "op": group.op,
                            "backend": backend,
                            "problem": problem,
                            "direction": group.direction,
                            "flops": flops,
                            "bytes": nbytes,
                            "intensity": flops / nbytes,
                            "gflops": ci[0],
                            "ci_low": ci[1],
                            "ci_high": ci[2],
                        }
                    )
    if not points and not without_bytes:
        return None
    drawn_runs = [runs[i] for i in dict.fromkeys(p["run"] for p in points)]
    roofs = _roofs(drawn_runs, dtype)
    for point in points:
        _point_fraction(point, runs[point["run"]], dtype, roofs)
    fractions = _median_fractions(points)
    figure = new_figure(6.4, 4.4)
    ax = figure.subplots()
    series: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for point in points:
        series.setdefault((point["backend"], point["direction"]), []).append(point)
    for (backend, direction), members in sorted(series.items()):
        ax.errorbar(
            [p["intensity"] for p in members],
            [p["gflops"] for p in members],
            yerr=[
                [p["gflops"] - p["ci_low"] for p in members],
                [p["ci_high"] - p["gflops"] for p in members],
            ],
            fmt=_DIRECTION_MARKERS.get(direction, "s"),
            linestyle="none",
            color=colors[backend],
            markersize=4,
            capsize=2,
            linewidth=1,
        )
    intensities = [p["intensity"] for p in points] + [
        r["ridge_intensity"] for r in roofs if r["ridge_intensity"]
    ]
    low = min(intensities, default=0.1) / 4
    high = max(intensities, default=10.0) * 4
    several = len(roofs) > 1
    for index, roof in enumerate(roofs):
        style = ["-", "--", "-.", ":"][index % 4]
        name = f" ({_plain(short_label(', '.join(roof['machines']), 30))})" if several else ""
        peak, bandwidth = roof["peak_gflops"], roof["peak_bandwidth"]
        if peak is not None:
            start = roof["ridge_intensity"] or low
            ax.plot([start, high], [peak, peak], style, color="#444444", linewidth=1.2)
            ax.annotate(
                f"peak {peak:.0f} GFLOP/s{name}",
                (high, peak),
                xytext=(-4, 3 + 9 * index),
                textcoords="offset points",
                ha="right",
                fontsize=7,
            )
        if bandwidth is not None:
            end = roof["ridge_intensity"] or high
            ax.plot(
                [low, end],
                [bandwidth * low, bandwidth * end],
                style,
                color="#444444",
                linewidth=1.2,
            )
            ax.annotate(
                f"memory {bandwidth:.0f} GB/s{name}",
                (low, bandwidth * low),
                xytext=(3, 4 + 9 * index),
                textcoords="offset points",
                rotation=0,
                fontsize=7,
            )
    core_roofs = _core_roofs(points, roofs)
    for roof in core_roofs:
        ax.plot([low, high], [roof["gflops"]] * 2, ":", color="#888888", linewidth=1)
        cores = f"{roof['cores']} core{'s' if roof['cores'] != 1 else ''}"
        ax.annotate(f"peak of {cores} {roof['gflops']:.0f} GFLOP/s", (high, roof["gflops"]),
                    xytext=(-4, 3), textcoords="offset points", ha="right", fontsize=6)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    roof_values = [r["peak_gflops"] for r in roofs] + [
        r["peak_bandwidth"] * low for r in roofs if r["peak_bandwidth"] is not None
    ]
    y_range = _log_limits([p["gflops"] for p in points], roof_values)
    ax.set_ylim(*y_range)
    cut = any(p["ci_low"] < y_range[0] or p["ci_high"] > y_range[1] for p in points)
    ax.set_xlabel("arithmetic intensity (FLOP per compulsory byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(_plain(f"Roofline ({dtype})"))
    backends = sorted({p["backend"] for p in points})
    directions = sorted({p["direction"] for p in points})
    handles = [
        ax.plot([], [], "o", color=colors[b], label=_plain(_legend_label(b, fractions)))[0]
        for b in backends
    ]
    if len(directions) > 1:
        handles += [
            ax.plot([], [], _DIRECTION_MARKERS.get(d, "s"), color="#777777", label=_plain(d))[0]
            for d in directions
        ]
    if handles:
        ax.legend(handles=handles, fontsize=7, loc="lower right")
    caption = (
        "The GFLOP/s of every backend on every problem (median with its 95% confidence "
        "interval) against the problem's arithmetic intensity: its FLOPs over its "
        "compulsory bytes (every input read and every output written once), both as "
        "stored with the run. The roofs are the machine's peak GFLOP/s and its memory "
        "bandwidth times the intensity, as stored with the runs. A point above the lower "
        "roof did less work or moved less memory than counted (a Winograd or FFT "
        "convolution; tensors reused from cache). Problems without counted FLOPs have no "
        "point. Each point's fraction of the compute roof it sits under is in the data: the "
        "fraction d5 bench op stored, of the FMA peak of the threads the backend ran on "
        "(dotted: the peaks of fewer cores than the machine's), else its GFLOP/s over the "
        "roof drawn; the legend gives each backend's median fraction over its points."
    )
    if several:
        caption += (
            f" The runs' machines have {len(roofs)} different roofs, each drawn in its own "
            "line style and labelled with its machines."
        )
    if cut:
        caption += (
            " The GFLOP/s axis spans the medians and roofs a factor 3 either way; intervals "
            "beyond it are cut (their full extent is in the data)."
        )
    if any(r["varied"] for r in roofs):
        caption += " Runs of one machine stored different roofs; the highest is drawn."
    if not roofs and points:
        caption += " No run stored a peak or a bandwidth: no roof is drawn."
    missing = [m for r in roofs if r["peak_bandwidth"] is None for m in r["machines"]]
    if missing:
        caption += f" No stored memory bandwidth for: {_names(missing)}."
    if without_bytes:
        caption += (
            " Not drawn (no stored problem bytes; made before d5 stored them): runs "
            f"{_names([i[:6] for i in without_bytes])}."
        )
    data = {
        "dtype": dtype,
        "points": points,
        "roofs": roofs,
        "core_roofs": core_roofs,
        "peak_fractions": fractions,
        "not_drawn": without_bytes,
        "x_range": [low, high],
        "y_range": y_range,
    }
    drawn = [runs[i] for i in dict.fromkeys([*(p["run"] for p in points), *without_bytes])]
    return runs_figure(
        figure,
        data,
        drawn,
        key=figure_key("op-roofline", dtype),
        title=f"Roofline ({dtype})",
        section=SECTION,
        caption=caption,
    )


def figures(runs: Sequence[ReportRun]) -> list[ReportFigure]:
    """The level 0 figures of the ``op`` runs among ``runs`` (others are ignored): per
    group the samples and the dispatch-cost curve, per dtype a roofline; ``[]`` when no
    run of kind ``op`` has timings."""
    groups, hidden = _collect(runs)
    if not groups:
        return []
    backends = {str(m.labels["backend"]) for g in groups for r in g.runs for m in _timings(r)}
    colors = colors_for(backends) if backends else {}
    drawn: list[ReportFigure] = []
    for group in groups:
        for make in (_samples_figure, _dispatch_figure):
            made = make(group, colors)
            if made is not None:
                drawn.append(made)
    by_dtype: dict[str, list[_Group]] = {}
    for group in groups:
        by_dtype.setdefault(group.dtype, []).append(group)
    for dtype in sorted(by_dtype):
        made = _roofline_figure(dtype, by_dtype[dtype], colors)
        if made is not None:
            drawn.append(made)
    if hidden and drawn:
        left = _names([g.title for g in hidden], 5)
        drawn[0].caption += (
            f" Only the {MAX_GROUPS} newest operator groups are drawn; "
            f"{len(hidden)} left out: {left}."
        )
    return drawn
