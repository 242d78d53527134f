"""The history section: each benchmark over the runs that measured it, changes marked.

A *benchmark* here is one series: the same quantity of the same kind of run, identified
by the run's kind and name, the metric and its labels (``op``, ``bench Gemm``, ``time``,
``{backend: torch, problem: ..., direction, dtype}``; a network's time per executor,
mode and batch). Training runs contribute their scalar results (time to accuracy, final
accuracy, ...), told apart by recipe and settings. A series gets a history when at least
two runs hold it.

Each run is drawn at its creation time with the median and confidence interval d5
stored for it (:meth:`~d5core.levels.report.ReportMeasurement.median_ci`); the tick
labels name the short git commit where the run knew it, else the date. Consecutive runs
are judged exactly as ``d5 results compare`` judges them
(:func:`d5core.report.comparison.compare_measurements`: between worker processes,
above the noise floor), and every change it calls is marked: an arrow-head pointing the
way the median moved, green when the change is better and red when it is worse by the
quantity's own direction (grey when the quantity has none), with the ratio beside it.
Runs of two different machines are never compared: a dashed line marks where the
machine changes, and no verdict is drawn across it.

Scalar results (time to accuracy, final accuracy) have one value per run. The repeats
of one recipe and setting at one commit on one machine (``d5 run --repeat``) are one
point: their median, with a bar over their range. A change between two points is called
only by the two-sided Mann-Whitney test on the repeats' values, significant at alpha
and above the smallest effect; where the points hold too few repeats for the test to
reach alpha at all (fewer than five a side at d5's alpha of 0.01, :func:`can_reach`), no
verdict is drawn and the panel says ``no verdict (n=a/b)``: a difference of medians
that no test could confirm is not a finding. A distributed run (its ranks and scheme)
is a series of its own.

Without a results store (the report's hook gives none), the noise floor is
``min_effect``, else ``$D5_NOISE_FLOOR``, else d5's default; with ``store`` it is the one
``d5 results compare`` takes from the stored calibrations of the runs' machines.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from d5core.levels.report import ReportFigure, ReportMeasurement, ReportRun
from d5core.report.style import PALETTE, colors_for, new_figure, runs_figure, short_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from d5core.report.comparison import MeasurementSamples
    from d5core.results.store import MetricRecord, ResultsStore

__all__ = [
    "MAX_POINTS",
    "MAX_SERIES",
    "SCALAR_METRICS",
    "SKIPPED_METRICS",
    "HistoryPoint",
    "HistorySeries",
    "can_reach",
    "figures",
    "history_series",
    "min_repeats",
]

#: Series drawn per section at most (one figure of small multiples each); the series
#: held by the most runs come first, and the caption says how many were left out.
MAX_SERIES = 6
#: Runs drawn per series at most: the newest (judging a pair of runs as ``d5 results
#: compare`` does takes milliseconds; a report of hundreds of runs must stay quick).
MAX_POINTS = 20
#: The scalar results of training runs that get a history.
SCALAR_METRICS: tuple[str, ...] = (
    "time_to_accuracy",
    "final_test_accuracy",
    "time_to_perplexity",
    "final_perplexity",
)
#: Measurements that get no history of their own, by run kind: those derived one to one
#: from the run's time samples (their verdict is the time's, inverted), per-node
#: breakdowns (one series per graph node), and training curves (samples along
#: training, not repeats of one quantity).
SKIPPED_METRICS: dict[str, frozenset[str]] = {
    "op": frozenset({"gflops"}),
    "net": frozenset({"throughput", "node_time"}),
    "train": frozenset(
        {"loss", "step_time", "throughput", "test_accuracy", "validation_perplexity"}
    ),
}
#: The sections whose runs get histories, in the report's order.
_SECTIONS: tuple[str, ...] = ("operators", "networks", "training", "distributed")
#: Colours of the verdicts of a change.
_VERDICT_COLORS = {"worse": "#D55E00", "better": "#009E73", "changed": "#666666"}
#: Verdicts that mark a change.
_CHANGES = frozenset(_VERDICT_COLORS)
#: Tick labels per axis at most, and the smallest gap between two, as a share of the axis.
_MAX_TICKS = 8


@dataclass
class HistoryPoint:
    """One run of a series: where it is drawn and what it holds."""

    run: ReportRun
    #: The run's creation time, in POSIX seconds (the x value).
    x: float
    machine: str
    #: (median, low, high) as stored; low == high == median for a scalar.
    median: float
    low: float
    high: float
    #: The pooled samples by process (measured series) or the scalar's record.
    samples: MeasurementSamples | None = None
    metric: MetricRecord | None = None
    #: For a scalar result: the value of every repeat this point stands for (the runs
    #: of one recipe and setting at one commit on one machine), in :attr:`runs`.
    values: list[float] = field(default_factory=list)
    runs: list[ReportRun] = field(default_factory=list)


@dataclass
class HistorySeries:
    """One benchmark over the runs that hold it, oldest first, with every consecutive
    pair judged (:attr:`steps`)."""

    section: str
    kind: str
    name: str
    metric: str
    labels: Mapping[str, Any]
    unit: str
    better: str | None
    #: ``True`` for a scalar result (one value per run, no interval; changes tested over
    #: the repeats of each point).
    scalar: bool
    points: list[HistoryPoint] = field(default_factory=list)
    #: One entry per consecutive pair of points (see :func:`history_series`).
    steps: list[dict[str, Any]] = field(default_factory=list)
    #: Older runs that hold the series but are not drawn (``max_points``).
    left_out: int = 0

    @property
    def shown_labels(self) -> str:
        """The labels in a line: ``key=value`` (a mapping value as ``key=value`` too)."""
        return " ".join(f"{k}={_shown(v)}" for k, v in self.labels.items())

    @property
    def title(self) -> str:
        shown = self.shown_labels
        return f"{self.name} · {self.metric}" + (f" · {shown}" if shown else "")

    @property
    def changes(self) -> list[dict[str, Any]]:
        """The steps with a change called (better, worse or changed)."""
        return [s for s in self.steps if s.get("verdict") in _CHANGES]

    @property
    def machine_changes(self) -> list[dict[str, Any]]:
        """The steps across which the machine changed (not judged)."""
        return [s for s in self.steps if s.get("machine_changed")]

    def to_json(self) -> dict[str, Any]:
        """The numbers the figure draws for this series, as plain JSON types."""
        return {
            "kind": self.kind,
            "name": self.name,
            "metric": self.metric,
            "labels": dict(self.labels),
            "unit": self.unit,
            "better": self.better,
            "scalar": self.scalar,
            "run_ids": [p.run.id for p in self.points],
            "created": [p.run.created for p in self.points],
            "commits": [p.run.commit for p in self.points],
            "machines": [p.machine for p in self.points],
            "x": [p.x for p in self.points],
            "medians": [p.median for p in self.points],
            "ci_low": [p.low for p in self.points],
            "ci_high": [p.high for p in self.points],
            "steps": [dict(s) for s in self.steps],
            "changes": [
                {k: s[k] for k in ("from_run", "to_run", "verdict", "change", "ratio", "tested")}
                for s in self.changes
            ],
            "machine_changes": [
                {k: s[k] for k in ("from_run", "to_run", "from_machine", "to_machine")}
                for s in self.machine_changes
            ],
            "runs_left_out": self.left_out,
        }


# -- finding the series ------------------------------------------------------------------


def _shown(value: Any) -> str:
    if isinstance(value, Mapping):
        return "(" + ", ".join(f"{k}={_shown(v)}" for k, v in value.items()) + ")"
    return str(value)


def _timestamp(created: str) -> float:
    """POSIX seconds of a stored ISO 8601 time (UTC where it names no zone)."""
    when = datetime.fromisoformat(created)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def _machine_key(run: ReportRun) -> str:
    """What tells two runs' machines apart: the fingerprint ``d5 results compare`` uses
    for the noise floor where it is known, else the host and CPU model."""
    from d5core.measure.noise import machine_fingerprint, machine_identity_of

    stored = run.config.get("machine_fingerprint")
    if isinstance(stored, str) and stored:
        return stored
    identity = machine_identity_of(run.environment)
    return run.machine if identity is None else machine_fingerprint(identity)


def _per_process(m: ReportMeasurement) -> dict[int | None, list[float]]:
    """``m``'s samples by process, in process order (as the store hands them to
    ``d5 results compare``)."""
    groups: dict[int | None, list[float]] = {}
    for value, process in zip(m.samples, m.processes, strict=True):
        groups.setdefault(process, []).append(value)
    return dict(sorted(groups.items(), key=lambda kv: -1 if kv[0] is None else kv[0]))


_SeriesKey = tuple[str, str, str, str, str]


def _measured(run: ReportRun, section: str, found: dict[_SeriesKey, HistorySeries]) -> None:
    """Add ``run``'s measurements to their series. Where one (metric, labels) was
    measured several times in the run, the samples are pooled for the verdict (as
    ``d5 results compare`` pools them) and the first measurement's stored median and
    interval are drawn."""
    from d5core.report.comparison import pool_measurements

    skipped = SKIPPED_METRICS.get(run.kind, frozenset())
    wanted = [m for m in run.measurements if m.metric not in skipped]
    pooled = pool_measurements((m, _per_process(m)) for m in wanted)
    for (metric, labels_json), samples in pooled.items():
        first = samples.first
        assert isinstance(first, ReportMeasurement)
        ci = first.median_ci()
        if ci is None or not all(math.isfinite(v) for v in ci):
            continue  # nothing summarised (a NaN sample): no point to draw or judge
        key = (run.kind, run.name, metric, labels_json, "")
        series = found.get(key)
        if series is None:
            series = found[key] = HistorySeries(
                section, run.kind, run.name, metric, dict(first.labels), first.unit,
                first.better, scalar=False,
            )  # fmt: skip
        median, low, high = ci
        series.points.append(
            HistoryPoint(run, _timestamp(run.created), run.machine, median, low, high, samples)
        )


def _setting(run: ReportRun) -> str:
    """A training run's setting in a line: its MUTABLE values (``--set`` applied) and,
    for a distributed run, its ranks and scheme."""
    values = {**(run.config.get("mutable") or {}), **(run.config.get("overrides") or {})}
    shown = [f"{k}={_shown(v)}" for k, v in values.items()]
    distributed = run.config.get("distributed")
    if isinstance(distributed, Mapping):
        shown += [f"ranks={distributed.get('ranks')}", f"scheme={distributed.get('scheme')}"]
    return ", ".join(shown)


def _scalars(run: ReportRun, section: str, found: dict[_SeriesKey, HistorySeries]) -> None:
    """Add ``run``'s scalar results to their series (recipe name, settings and, for a
    distributed run, its ranks and scheme apart)."""
    settings = json.dumps(
        [run.config.get("settings"), run.config.get("distributed")], sort_keys=True, default=str
    )
    # A name stored twice under the same labels: the last counts, as in 'd5 results compare'.
    latest = {
        (record.name, json.dumps(record.labels, sort_keys=True)): record
        for record in run.metrics
        if record.name in SCALAR_METRICS
    }
    for (_name, labels_json), record in latest.items():
        if not math.isfinite(record.value):
            continue
        key = (run.kind, run.name, record.name, labels_json, settings)
        series = found.get(key)
        if series is None:
            labels = dict(record.labels)
            setting = _setting(run)
            if setting:
                labels["setting"] = setting
            series = found[key] = HistorySeries(
                section, run.kind, run.name, record.name, labels, record.unit, record.better,
                scalar=True,
            )  # fmt: skip
        v = record.value
        series.points.append(
            HistoryPoint(
                run, _timestamp(run.created), run.machine, v, v, v, metric=record,
                values=[v], runs=[run],
            )
        )  # fmt: skip


def _repeats_together(series: HistorySeries) -> None:
    """Make one point of consecutive repeats of a scalar series: runs at the same commit
    on the same machine are repeats of one experiment (``d5 run --repeat``), not a
    history. The point is drawn at the last repeat, its median the repeats' median, its
    bar their range (lowest to highest)."""
    import statistics

    merged: list[HistoryPoint] = []
    for point in series.points:
        last = merged[-1] if merged else None
        if (
            last is not None
            and last.run.commit == point.run.commit
            and _machine_key(last.run) == _machine_key(point.run)
        ):
            last.values += point.values
            last.runs += point.runs
            last.run, last.x, last.metric = point.run, point.x, point.metric
            last.median = float(statistics.median(last.values))
            last.low, last.high = min(last.values), max(last.values)
        else:
            merged.append(point)
    series.points = merged


class _Floors:
    """The noise floor of each pair of runs, as ``d5 results compare`` would take it."""

    def __init__(self, store: ResultsStore | None, min_effect: float | None) -> None:
        from d5core.measure.compare import DEFAULT_MIN_EFFECT
        from d5core.measure.noise import NOISE_FLOOR_ENV, noise_floor_override

        self.store = store
        self.min_effect = min_effect
        self.cache: dict[str, tuple[float, str]] = {}
        if min_effect is not None:
            self.fixed: tuple[float, str] | None = (min_effect, "min_effect")
        elif (override := noise_floor_override()) is not None:
            self.fixed = (override, NOISE_FLOOR_ENV)
        elif store is None:
            self.fixed = (DEFAULT_MIN_EFFECT, "default")
        else:
            self.fixed = None
        #: The smallest change of a scalar result called (``--min-effect``, else d5's
        #: default), and where it came from.
        self.scalar = DEFAULT_MIN_EFFECT if min_effect is None else min_effect
        self.scalar_source = "default" if min_effect is None else "min_effect"

    def __call__(self, a: ReportRun, b: ReportRun, machine: str) -> tuple[float, str]:
        if self.fixed is not None:
            return self.fixed
        if machine not in self.cache:
            from d5core.report.comparison import noise_floor_for

            assert self.store is not None
            floor = noise_floor_for(self.store, (a.record, b.record), self.min_effect)
            self.cache[machine] = (float(floor["value"]), str(floor["source"]))
        return self.cache[machine]


def _judge(
    series: HistorySeries, a: HistoryPoint, b: HistoryPoint, alpha: float, floors: _Floors
) -> dict[str, Any]:
    """One step of ``series``, from point ``a`` to ``b`` (same machine)."""
    from d5core.report.comparison import compare_measurements

    step: dict[str, Any] = {"from_run": a.run.id, "to_run": b.run.id, "machine_changed": False}
    if series.scalar:
        na, nb = len(a.values), len(b.values)
        if can_reach(na, nb, alpha):
            return _judge_repeats(series, a, b, alpha, floors.scalar, step)
        step.update(
            verdict=None, change=None, tested=False, repeats=[na, nb],
            ratio=b.median / a.median if a.median else None,
            no_verdict=f"no verdict (n={na}/{nb})",
            reason=f"{na} and {nb} repeats: a Mann-Whitney test of so few cannot reach "
            f"p < {alpha:g}; {min_repeats(alpha)} a side can",
        )  # fmt: skip
        return step
    assert a.samples is not None and b.samples is not None
    floor, source = floors(a.run, b.run, _machine_key(a.run))
    row = compare_measurements(a.samples, b.samples, alpha=alpha, noise_floor=floor)
    step.update(noise_floor=floor, noise_floor_source=source, tested=True)
    if "error" in row:
        step.update(verdict=None, change=None, ratio=None, error=row["error"])
        return step
    step.update(
        verdict=row["verdict"], change=row["change"], ratio=row["ratio"],
        ratio_ci_low=row["ratio_ci_low"], ratio_ci_high=row["ratio_ci_high"],
        p_value=row["p_value"], method=row["method"], reason=row["reason"],
    )  # fmt: skip
    return step


def can_reach(n_a: int, n_b: int, alpha: float) -> bool:
    """Whether the two-sided Mann-Whitney test of ``n_a`` values against ``n_b`` can
    reach ``p < alpha`` at all: its smallest p (two sets that do not overlap, no ties)
    is ``2 / C(n_a + n_b, n_a)``. With four a side that is 0.029, which never reaches
    d5's alpha of 0.01: a verdict between such points could only be hollow."""
    return n_a >= 1 and n_b >= 1 and 2.0 / math.comb(n_a + n_b, n_a) < alpha


def min_repeats(alpha: float) -> int:
    """The fewest repeats a side (the same on both) with which :func:`can_reach`
    ``alpha``: 5 at d5's alpha of 0.01."""
    n = 1
    while not can_reach(n, n, alpha):
        n += 1
    return n


def _judge_repeats(
    series: HistorySeries,
    a: HistoryPoint,
    b: HistoryPoint,
    alpha: float,
    floor: float,
    step: dict[str, Any],
) -> dict[str, Any]:
    """A step between two points of repeats: the two-sided Mann-Whitney test of
    ``d5 results compare`` (``d5core.measure.compare``) on the repeats' values, a change
    called only above the noise floor."""
    from d5core.measure.compare import compare, judge

    lower = None if series.better is None else series.better == "lower"
    if a.median == 0:
        step.update(verdict=None, change=None, ratio=None, tested=True,
                    error="the earlier median is 0: no ratio to it")  # fmt: skip
        return step
    result = compare(a.values, b.values, alpha=alpha, lower_is_better=lower, min_effect=floor)
    verdict = judge(result.change, lower)
    step.update(
        verdict=verdict, change=result.change, ratio=result.ratio,
        ratio_ci_low=result.ratio_ci_low, ratio_ci_high=result.ratio_ci_high,
        p_value=result.p_value, method="mann-whitney over repeats", tested=True,
        noise_floor=floor, repeats=[len(a.values), len(b.values)],
    )  # fmt: skip
    return step


def history_series(
    runs: Sequence[ReportRun],
    *,
    store: ResultsStore | None = None,
    alpha: float | None = None,
    min_effect: float | None = None,
) -> list[HistorySeries]:
    """Every series held by at least two of ``runs``, its points oldest first and each
    consecutive pair judged.

    A step (one per consecutive pair) holds ``from_run``, ``to_run``,
    ``machine_changed`` and, between runs of one machine, ``d5 results compare``'s
    ``verdict`` (``better``, ``worse``, ``same``, ``changed``, or ``None`` with an
    ``error`` where the two cannot be compared), ``change``, ``ratio`` (later over
    earlier median), ``tested`` and the ``noise_floor`` judged against; across machines
    ``from_machine`` and ``to_machine`` instead.

    :param store: the store the runs come from, to take the noise floor from its
        calibrations as ``d5 results compare`` does; without it: ``min_effect``, else
        ``$D5_NOISE_FLOOR``, else d5's default.
    :param alpha: the significance level (default: ``d5 results compare``'s).
    :param min_effect: the smallest relative change called (``--min-effect``).
    """
    found = _collect(runs)
    _judge_all(found, store=store, alpha=alpha, min_effect=min_effect)
    return found


def _collect(runs: Sequence[ReportRun]) -> list[HistorySeries]:
    """Every series held by at least two of ``runs``, points oldest first, not judged."""
    found: dict[_SeriesKey, HistorySeries] = {}
    for run in sorted(runs, key=lambda r: (_timestamp(r.created), r.id)):
        section = run.level
        if section is None:
            continue
        if run.kind == "train":
            _scalars(run, section, found)
        else:
            _measured(run, section, found)
    for series in found.values():
        if series.scalar:
            _repeats_together(series)
    return [s for s in found.values() if len(s.points) >= 2]


def _alpha(alpha: float | None) -> float:
    """``alpha``, else ``d5 results compare``'s default."""
    from d5core.measure.nested import DEFAULT_NESTED_ALPHA

    return DEFAULT_NESTED_ALPHA if alpha is None else alpha


def _judge_all(
    found: Sequence[HistorySeries],
    *,
    store: ResultsStore | None,
    alpha: float | None,
    min_effect: float | None,
) -> None:
    """Fill in the steps of each series (see :func:`history_series`)."""
    level = _alpha(alpha)
    floors = _Floors(store, min_effect)
    for series in found:
        series.steps = []
        for a, b in zip(series.points, series.points[1:], strict=False):
            ka, kb = _machine_key(a.run), _machine_key(b.run)
            if ka != kb:
                series.steps.append(
                    {"from_run": a.run.id, "to_run": b.run.id, "machine_changed": True,
                     "from_machine": a.machine, "to_machine": b.machine, "verdict": None}
                )  # fmt: skip
            else:
                series.steps.append(_judge(series, a, b, level, floors))


# -- drawing -----------------------------------------------------------------------------


def _scale(unit: str, values: Sequence[float]) -> tuple[float, str]:
    """A factor and unit that put times into a readable range (seconds to ms or µs)."""
    if unit != "s" or not values:
        return 1.0, unit
    top = max(abs(v) for v in values)
    for factor, name in ((1.0, "s"), (1e3, "ms"), (1e6, "µs")):
        if top * factor >= 1.0:
            return factor, name
    return 1e9, "ns"


def _tick_label(run: ReportRun) -> str:
    commit = run.commit
    if commit:
        return commit[:8]
    return _timestamp_label(run.created)


def _timestamp_label(created: str) -> str:
    when = datetime.fromisoformat(created)
    return when.strftime("%Y-%m-%d %H:%M")


def _ticks(points: Sequence[HistoryPoint]) -> list[int]:
    """The points that get a tick label: spread out so that labels do not overlap."""
    if not points:
        return []
    xs = [p.x for p in points]
    span = (xs[-1] - xs[0]) or 1.0
    gap = span / (_MAX_TICKS - 1)
    chosen = [0]
    for i in range(1, len(xs)):
        if xs[i] - xs[chosen[-1]] >= gap * 0.999:
            chosen.append(i)
    if chosen[-1] != len(xs) - 1:
        if len(chosen) > 1 and xs[-1] - xs[chosen[-1]] < gap:
            chosen.pop()
        chosen.append(len(xs) - 1)
    return chosen


def _draw(ax: Axes, series: HistorySeries, colors: Mapping[str, str]) -> dict[str, Any]:
    """Draw ``series`` on ``ax``; return its data (what is drawn)."""
    points = series.points
    factor, unit = _scale(series.unit, [p.high for p in points])
    when = [p.x for p in points]  # POSIX seconds; the ticks name commits or dates
    for machine in dict.fromkeys(p.machine for p in points):
        idx = [i for i, p in enumerate(points) if p.machine == machine]
        xs = [when[i] for i in idx]
        ys = [points[i].median * factor for i in idx]
        lo = [(points[i].median - points[i].low) * factor for i in idx]
        hi = [(points[i].high - points[i].median) * factor for i in idx]
        ax.errorbar(
            xs, ys, yerr=None if series.scalar else [lo, hi], fmt="o",
            color=colors.get(machine, PALETTE[0]), markersize=3.5, capsize=2.5,
            linewidth=1.0, label=short_label(machine, 30),
        )  # fmt: skip
    by_id = {p.run.id: i for i, p in enumerate(points)}
    for step in series.changes:
        i = by_id[step["to_run"]]
        color = _VERDICT_COLORS[step["verdict"]]
        marker = "^" if step["change"] == "higher" else "v"
        hollow = not step["tested"]
        ax.plot(
            [when[i]], [points[i].median * factor], marker=marker, markersize=9,
            linestyle="none", markeredgecolor=color,
            markerfacecolor="none" if hollow else color, markeredgewidth=1.5, zorder=5,
        )  # fmt: skip
        ax.annotate(
            f"×{step['ratio']:.3g}", (when[i], points[i].median * factor),
            xytext=(6, 4), textcoords="offset points", fontsize=7, color=color,
        )  # fmt: skip
    for step in series.steps:
        if step.get("no_verdict"):
            i = by_id[step["to_run"]]
            ax.annotate(
                step["no_verdict"], (when[i], points[i].median * factor), xytext=(6, -8),
                textcoords="offset points", fontsize=6, color="#666666",
            )  # fmt: skip
    for step in series.machine_changes:
        i = by_id[step["to_run"]]
        middle = (points[i - 1].x + points[i].x) / 2.0
        ax.axvline(middle, color="#444444", linestyle="--", linewidth=0.9)
        ax.annotate(
            "machine changed", (middle, 1.0), xycoords=("data", "axes fraction"),
            xytext=(2, -8), textcoords="offset points", fontsize=6, rotation=90,
            va="top", color="#444444",
        )  # fmt: skip
    ticks = _ticks(points)
    ax.set_xticks([when[i] for i in ticks], [_tick_label(points[i].run) for i in ticks])
    ax.tick_params(axis="x", labelrotation=45, labelsize=6)
    direction = f" ({series.better} is better)" if series.better else ""
    ax.set_ylabel(f"{series.metric} [{unit}]{direction}" if unit else series.metric, fontsize=7)
    shown = series.shown_labels
    heading = short_label(f"{series.name} · {series.metric}", 52)
    ax.set_title(heading + (f"\n{short_label(shown, 50)}" if shown else ""), fontsize=7)
    data = series.to_json()
    data["scale"] = factor
    data["axis_unit"] = unit
    return data


def _key(section: str) -> str:
    return f"history-{section}"


def _figure(
    section: str, series: Sequence[HistorySeries], total: int, alpha: float
) -> ReportFigure:
    """One figure of small multiples: a panel per series."""
    n = len(series)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    figure = new_figure(3.3 * cols + 0.4, 2.7 * rows + 0.4)
    axes = figure.subplots(rows, cols, squeeze=False)
    machines = [p.machine for s in series for p in s.points]
    colors = colors_for(machines)
    drawn = [_draw(axes[i // cols][i % cols], s, colors) for i, s in enumerate(series)]
    for i in range(n, rows * cols):
        axes[i // cols][i % cols].set_visible(False)
    if len(set(machines)) > 1:
        axes[0][0].legend(fontsize=6, loc="best", title="machine", title_fontsize=6)
    runs = list({p.run.id: p.run for s in series for p in s.points}.values())
    left_out = total - n
    floors = sorted(
        {f"{st['noise_floor']:.1%} ({st['noise_floor_source']})"
         for s in series if not s.scalar for st in s.steps if "noise_floor" in st}
    )  # fmt: skip
    caption = (
        f"Each panel is one benchmark over the runs that measured it, at their creation "
        f"time (ticks: the short git commit, else the date): the median with its 95% "
        f"confidence interval as stored. Consecutive runs of one machine are judged as "
        f"'d5 results compare' judges them (between worker processes, noise floor "
        f"{', '.join(floors) or 'n/a'}); a triangle marks each change it calls, pointing "
        f"the way the median moved, green when better and red when worse, with the "
        f"ratio later/earlier. A dashed line marks a change of machine: no verdict is "
        f"drawn across it."
    )
    if any(s.scalar for s in series):
        caption += (
            " Scalar results: the repeats at one commit are one point (their median, the "
            "bar their range); a change between two points is called only when the "
            "Mann-Whitney test over their repeats is significant, which needs at least "
            f"{min_repeats(alpha)} repeats a side; with fewer the panel says 'no verdict "
            "(n=repeats before/after)' and draws no triangle."
        )
    older = sum(s.left_out for s in series)
    if older:
        caption += (
            f" Each panel shows its newest {max(len(s.points) for s in series)} runs at "
            f"most: {older} older run{'s are' if older > 1 else ' is'} not drawn."
        )
    if left_out:
        caption += (
            f" {left_out} more benchmark{'s' if left_out > 1 else ''} with a history "
            f"{'are' if left_out > 1 else 'is'} not drawn (the {n} held by the most "
            f"runs are)."
        )
    data = {"series": drawn, "series_total": total, "series_left_out": left_out}
    return runs_figure(
        figure,
        data,
        runs,
        key=_key(section),
        title=f"History of {section} benchmarks ({n} of {total})",
        section="history",
        caption=caption,
    )


def _rank(series: HistorySeries) -> tuple[int, str, str]:
    """Most runs first, then by name."""
    return (-len(series.points), series.title, series.kind)


def figures(
    runs: Sequence[ReportRun],
    *,
    store: ResultsStore | None = None,
    alpha: float | None = None,
    min_effect: float | None = None,
    max_series: int = MAX_SERIES,
    max_points: int = MAX_POINTS,
) -> list[ReportFigure]:
    """The history figures of ``runs``: one per report level whose runs hold a series
    in at least two runs, each with at most ``max_series`` panels (the series held by
    the most runs) of at most ``max_points`` runs (the newest); see
    :func:`history_series` for ``store``, ``alpha`` and ``min_effect``. Only the series
    drawn are judged.

    ``data`` holds ``series`` (per series: ``run_ids``, ``x`` (POSIX seconds),
    ``medians``, ``ci_low``, ``ci_high`` in the stored unit, ``scale`` and
    ``axis_unit`` as drawn, ``steps``, ``changes`` (``from_run``, ``to_run``,
    ``verdict``, ``change``, ``ratio``, ``tested``), ``machine_changes`` and
    ``runs_left_out``), ``series_total`` and ``series_left_out``.
    """
    from d5core.errors import UsageError

    if max_series < 1:
        raise UsageError(f"max_series must be at least 1, got {max_series}")
    if max_points < 2:
        raise UsageError(
            f"max_points must be at least 2 (a history compares runs), got {max_points}"
        )
    found = _collect(runs)
    drawn: list[ReportFigure] = []
    for section in _SECTIONS:
        mine = sorted((s for s in found if s.section == section), key=_rank)
        if not mine:
            continue
        shown = mine[:max_series]
        for series in shown:
            series.left_out = max(0, len(series.points) - max_points)
            series.points = series.points[series.left_out :]
        _judge_all(shown, store=store, alpha=alpha, min_effect=min_effect)
        drawn.append(_figure(section, shown, len(mine), _alpha(alpha)))
    return drawn
