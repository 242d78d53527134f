"""Figures of inference under load: runs of ``d5 bench net --scenario`` and of inference
recipes (run kind ``inference``).

One figure per (model, scenario), ``inference-latency-*``: the latency of every query
LoadGen issued, per executor, as a distribution of the stored samples (box, and a violin
on a linear axis), on a log axis when the samples span more than
:data:`LOG_SPAN` times. LoadGen's own percentiles (p50, p90, p99, p99.9, as stored in the
metrics ``latency_p50`` ...) are marked beside each box, the latency bound of the run is
drawn as a dashed line where one was set, and every executor's label says whether LoadGen
found its run VALID or INVALID. Only performance-mode latencies are drawn (an accuracy
run's latencies are not a measurement).

When several runs measured the same (model, scenario), the newest
:data:`MAX_RUNS_PER_SCENARIO` are drawn side by side, their executors labelled with the
run's short id. At most :data:`MAX_SCENARIOS` figures are drawn, the most recently
measured; the caption says what was left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from d5core.levels.report import ReportFigure, ReportMeasurement, ReportRun
from d5core.report.style import (
    colors_for,
    draw_distributions,
    figure_key,
    new_figure,
    runs_figure,
    time_unit,
)

__all__ = [
    "LOG_SPAN",
    "MARKED_PERCENTILES",
    "MAX_RUNS_PER_SCENARIO",
    "MAX_SCENARIOS",
    "SECTION",
    "figures",
]

#: The report section these figures belong to.
SECTION = "networks"
#: How many (model, scenario) get a figure: those measured most recently.
MAX_SCENARIOS = 4
#: How many runs of one (model, scenario) are drawn side by side: the newest.
MAX_RUNS_PER_SCENARIO = 3
#: The latency axis is logarithmic when the largest sample is more than this many times
#: the smallest.
LOG_SPAN = 20.0
#: LoadGen's percentiles marked beside each distribution: key of the stored metric
#: ``latency_p<key>``, and the marker it is drawn with.
MARKED_PERCENTILES: tuple[tuple[str, str], ...] = (
    ("50", "o"),
    ("90", "^"),
    ("99", "s"),
    ("99.9", "D"),
)


#: The colour of the latency bound's dashed line.
_BOUND_COLOR = "#D55E00"


@dataclass(frozen=True)
class _Series:
    """One executor's performance run in one stored run."""

    run: ReportRun
    executor: str
    latency: ReportMeasurement
    valid: bool | None
    failed_checks: tuple[str, ...]
    percentiles: dict[str, float]
    bound_s: float | None


@dataclass
class _Scenario:
    """Every run of one (model, scenario), by run id, in the order they were stored."""

    model: str
    scenario: str
    runs: dict[str, list[_Series]] = field(default_factory=dict)

    def newest(self) -> str:
        return max(series[0].run.created for series in self.runs.values())


def _model_of(run: ReportRun) -> str:
    model = run.config.get("model")
    if isinstance(model, str) and model:
        return model
    parts = run.name.split()
    return parts[1] if len(parts) >= 3 and parts[0] == "inference" else run.name


def _facts(run: ReportRun, executor: str) -> Mapping[str, Any]:
    """What the run's config keeps of ``executor`` (``inference.executors``, as
    :func:`d5core.loadgen.store.store_scenario` writes it); empty when absent."""
    inference = run.config.get("inference")
    executors = inference.get("executors") if isinstance(inference, Mapping) else None
    facts = executors.get(executor) if isinstance(executors, Mapping) else None
    return facts if isinstance(facts, Mapping) else {}


def _failed_checks(run: ReportRun, executor: str) -> tuple[str, ...]:
    """The failed checks the run recorded for ``executor`` (none when absent)."""
    checks = _facts(run, executor).get("failed_checks")
    return tuple(str(c) for c in checks) if isinstance(checks, list) else ()


def _latency_bound_s(run: ReportRun, executor: str) -> float | None:
    """The latency bound ``executor`` ran under, in seconds (``None``: none set): the
    settings LoadGen ran with (the server's default filled in), else those asked for."""
    settings = _facts(run, executor).get("settings")
    if not isinstance(settings, Mapping):
        settings = run.config.get("settings")
    bound = settings.get("latency_bound_ms") if isinstance(settings, Mapping) else None
    if isinstance(bound, bool) or not isinstance(bound, int | float) or not bound > 0:
        return None
    return float(bound) / 1e3


def _collect(runs: Sequence[ReportRun]) -> dict[tuple[str, str], _Scenario]:
    """The (model, scenario) measured by the ``inference`` runs among ``runs``."""
    found: dict[tuple[str, str], _Scenario] = {}
    for run in runs:
        if run.kind != "inference":
            continue
        model = _model_of(run)
        for m in run.measurements:
            executor, scenario = m.labels.get("executor"), m.labels.get("scenario")
            if m.metric != "latency" or m.labels.get("mode", "performance") != "performance":
                continue
            if not isinstance(executor, str) or not isinstance(scenario, str) or not m.finite:
                continue
            wanted = {"executor": executor, "scenario": scenario}
            valid = run.metric_value("valid", **wanted)
            percentiles = {
                key: value
                for key, _ in MARKED_PERCENTILES
                if (value := run.metric_value(f"latency_p{key}", **wanted)) is not None
                and math.isfinite(value)
            }
            series = _Series(
                run=run,
                executor=executor,
                latency=m,
                valid=None if valid is None else bool(valid),
                failed_checks=_failed_checks(run, executor),
                percentiles=percentiles,
                bound_s=_latency_bound_s(run, executor),
            )
            entry = found.setdefault((model, scenario), _Scenario(model, scenario))
            entry.runs.setdefault(run.id, []).append(series)
    return found


def _verdict(series: _Series) -> str:
    if series.valid is None:
        return "validity unknown"
    return "VALID" if series.valid else "INVALID"


def _label(series: _Series, several: bool) -> str:
    name = f"{series.executor} ({series.run.id[:6]})" if several else series.executor
    return f"{name}\n{_verdict(series)}"


def _scenario_figure(scenario: _Scenario, colors: Mapping[str, str], left_out: str) -> ReportFigure:
    newest_first = sorted(
        scenario.runs, key=lambda r: scenario.runs[r][0].run.created, reverse=True
    )
    drawn_ids = sorted(
        newest_first[:MAX_RUNS_PER_SCENARIO], key=lambda r: scenario.runs[r][0].run.created
    )
    older = newest_first[MAX_RUNS_PER_SCENARIO:]
    several = len(drawn_ids) > 1
    series = [s for run_id in drawn_ids for s in scenario.runs[run_id]]

    rows: list[dict[str, Any]] = [
        {
            "label": _label(s, several),
            "run": s.run.id,
            "executor": s.executor,
            "valid": s.valid,
            "failed_checks": list(s.failed_checks),
            "samples": s.latency.finite,
            "percentiles": dict(s.percentiles),
            "latency_bound_s": s.bound_s,
        }
        for s in series
    ]
    every = [v for r in rows for v in r["samples"]]
    positive = [v for v in every if v > 0]
    log = bool(positive) and max(positive) / min(positive) > LOG_SPAN
    unit, scale = time_unit(every)
    distinct_bounds = sorted({r["latency_bound_s"] for r in rows if r["latency_bound_s"]})

    figure = new_figure(max(5.0, 1.6 + 1.3 * len(rows)), 4.0)
    ax = figure.subplots()
    label_colors = {r["label"]: colors[r["executor"]] for r in rows}
    draw_distributions(
        ax,
        [(r["label"], r["samples"], None) for r in rows],
        colors=label_colors,
        scale=scale,
        # a violin is a density of the linear values: on a log axis it would mislead
        violin_from=10**9 if log else 30,
    )
    positions = list(range(1, len(rows) + 1))
    for marker_key, marker in MARKED_PERCENTILES:
        xs = [
            p + 0.3 for p, r in zip(positions, rows, strict=True) if marker_key in r["percentiles"]
        ]
        ys = [r["percentiles"][marker_key] * scale for r in rows if marker_key in r["percentiles"]]
        if xs:
            ax.scatter(
                xs, ys, marker=marker, s=22, color="black", zorder=4,
                label=f"LoadGen p{marker_key}",
            )  # fmt: skip
    for bound in distinct_bounds:
        label = f"latency bound {bound * scale:.4g} {unit}"
        under = [p for p, r in zip(positions, rows, strict=True) if r["latency_bound_s"] == bound]
        if len(distinct_bounds) == 1 and len(under) == len(rows):
            ax.axhline(bound * scale, color=_BOUND_COLOR, linestyle="--", linewidth=1.2,
                       label=label)  # fmt: skip
        else:  # runs under other bounds: each bound beside the runs it applies to
            ax.hlines([bound * scale] * len(under), [p - 0.45 for p in under],
                      [p + 0.45 for p in under], colors=_BOUND_COLOR, linestyles="--",
                      linewidth=1.2, label=label)  # fmt: skip
    if log:
        ax.set_yscale("log")
    ax.set_xticks(positions, [r["label"] for r in rows])
    ax.set_xlim(0.4, len(rows) + 0.7)
    ax.set_ylabel(f"latency per query ({unit})")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")

    caption = [
        f"Latency of every query LoadGen issued in the {scenario.scenario} scenario, per "
        "executor: box (median and quartiles) of the stored samples"
        + ("" if log else ", with a violin where there are 30 or more")
        + "; black markers are LoadGen's own percentiles (p50 circle, p90 triangle, p99 "
        "square, p99.9 diamond); each label says whether LoadGen found the run VALID.",
    ]
    if log:
        caption.append(f"Log axis: the samples span more than {LOG_SPAN:g} times.")
    if distinct_bounds:
        caption.append("The dashed line is the latency bound of the run's settings.")
    failed = [
        f"{r['executor']}"
        + (f" ({r['run'][:6]})" if several else "")
        + ": "
        + "; ".join(r["failed_checks"])
        for r in rows
        if r["failed_checks"]
    ]
    if failed:
        caption.append("Failed checks: " + " | ".join(failed) + ".")
    if older:
        caption.append(
            f"{len(older)} older run{'s' if len(older) > 1 else ''} of this scenario left "
            f"out: {', '.join(r[:6] for r in older)}."
        )
    if left_out:
        caption.append(left_out)
    data = {
        "model": scenario.model,
        "scenario": scenario.scenario,
        "unit": "s",
        "drawn_unit": unit,
        "drawn_scale": scale,
        "log_scale": log,
        "latency_bounds_s": distinct_bounds,
        "series": rows,
    }
    return runs_figure(
        figure,
        data,
        [scenario.runs[r][0].run for r in drawn_ids],
        key=figure_key("inference-latency", scenario.model, scenario.scenario),
        title=f"latency under load: {scenario.model}, {scenario.scenario}",
        section=SECTION,
        caption=" ".join(caption),
    )


def figures(runs: Sequence[ReportRun]) -> list[ReportFigure]:
    """The latency figures of the ``inference`` runs among ``runs`` (none without any)."""
    found = _collect(runs)
    if not found:
        return []
    ordered = sorted(found.values(), key=lambda s: s.newest(), reverse=True)
    drawn, skipped = ordered[:MAX_SCENARIOS], ordered[MAX_SCENARIOS:]
    left_out = (
        f"{len(skipped)} other (model, scenario) measured earlier left out: "
        + ", ".join(f"{s.model} {s.scenario}" for s in skipped)
        + "."
        if skipped
        else ""
    )
    colors = colors_for(s.executor for sc in drawn for ss in sc.runs.values() for s in ss)
    return [_scenario_figure(scenario, colors, left_out) for scenario in drawn]
