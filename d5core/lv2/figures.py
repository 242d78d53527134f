"""Level 2 figures: the training curves and the time to target of ``d5 run``'s runs.

One figure per recipe (its name and FIXED part: the problem), with a panel each for

* the training loss of every run against the step, one thin line per run, coloured by
  setting, and a shaded band from the lowest to the highest value of a setting's runs at
  each step where at least two of them have one;
* the test accuracy (and, for language models, the validation perplexity) after each
  test pass, drawn the same way, with the recipe's target as a dashed line;
* the time to the target per setting as a box over the runs that reached it, with
  MLPerf's olympic mean marked (:func:`d5core.lv2.summaries.time_to_accuracy_summary`,
  the function ``d5 results table`` summarises with), the runs that missed the target
  drawn as triangles at the top, and the number of runs and of misses under each box.

A setting is the values of the recipe's MUTABLE keys (``--set`` included) that differ
between the recipe's runs, the seed left out: the seed is what tells repeats apart.
Runs that diverged or did not finish are drawn up to where their samples end, marked
there, and listed in the caption. Distributed training runs are left to
:mod:`d5core.lv3.figures`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from d5core.levels.report import ReportFigure, ReportMeasurement, ReportRun
from d5core.report.style import (
    colors_for,
    draw_distributions,
    new_figure,
    runs_figure,
    short_label,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "BAND",
    "MAX_POINTS",
    "MAX_RECIPES",
    "MAX_REPEATS",
    "MAX_SETTINGS",
    "figures",
    "setting_keys",
    "setting_label",
]

#: What the shaded band of a curve spans across a setting's runs at each step.
BAND = "min-max"
#: At most this many recipes get a figure (those with the most runs); the others are
#: named in the captions.
MAX_RECIPES = 4
#: At most this many settings per recipe (those with the most runs).
MAX_SETTINGS = 8
#: At most this many runs per setting (the newest).
MAX_REPEATS = 25
#: A curve longer than this is drawn at every k-th point (and its last), k the same for
#: every run of the panel, so that the band is taken at the points drawn.
MAX_POINTS = 250

#: Statuses whose runs trained to the end and count in the time to target, as in
#: ``d5 results table``: a diverged run is a result (it missed the target); failed and
#: unfinished runs are counted beside, never summarised.
_SUMMARISED = ("complete", "diverged")
#: The MUTABLE keys that never make a setting: repeats differ by their seed.
_NOT_SETTINGS = frozenset({"seed"})
_MARKERS = {"diverged": "x"}
_STOPPED_MARKER = "v"
#: Curves of at most this many points get a dot at each (test passes, short runs), as
#: long as a setting's curves have at most ``_DOTS`` points in all.
_DOTTED = 30
_DOTS = 150
_OLYMPIC_COLOR = "#D55E00"


@dataclass(frozen=True)
class _Curve:
    """A stored curve: the measurement, its axis label and what is drawn of it."""

    metric: str
    title: str


@dataclass(frozen=True)
class _Target:
    """A target a recipe may set, the curve it is read from and the time to reach it."""

    setting: str
    curve: str
    time: str
    what: str


_LOSS = _Curve("loss", "training loss")
_QUALITY = (
    _Curve("test_accuracy", "test accuracy"),
    _Curve("validation_perplexity", "validation perplexity"),
)
_TARGETS = (
    _Target("target_accuracy", "test_accuracy", "time_to_accuracy", "accuracy"),
    _Target("target_perplexity", "validation_perplexity", "time_to_perplexity", "perplexity"),
)


# -- grouping -----------------------------------------------------------------------------


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def _flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optimizer_options": {"momentum": 0.9}}`` as ``{"optimizer_options.momentum": 0.9}``."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(_flat(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _mutable(run: ReportRun) -> dict[str, Any]:
    """A run's MUTABLE values after its ``--set`` overrides, flattened, seed left out."""
    config = run.config
    values = dict(config.get("mutable") or {})
    for key, value in (config.get("overrides") or {}).items():
        top, _, sub = str(key).partition(".")
        if top in _NOT_SETTINGS:
            continue
        if sub:
            table = values.get(top)
            values[top] = {**(table if isinstance(table, Mapping) else {}), sub: value}
        else:
            values[top] = value
    return {k: v for k, v in _flat(values).items() if k.partition(".")[0] not in _NOT_SETTINGS}


def setting_keys(runs: Sequence[ReportRun]) -> list[str]:
    """The MUTABLE keys (flattened: ``optimizer_options.momentum``) whose values differ
    between ``runs``, in the order the recipe lists them; the seed is never one."""
    seen: dict[str, set[str]] = {}
    for run in runs:
        for key, value in _mutable(run).items():
            seen.setdefault(key, set()).add(_canonical(value))
    missing = {key for key in seen if any(key not in _mutable(run) for run in runs)}
    return [key for key, values in seen.items() if len(values) > 1 or key in missing]


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else _canonical(value)


def setting_label(run: ReportRun, keys: Sequence[str]) -> str:
    """The name of ``run``'s setting among runs that differ in ``keys``
    (:func:`setting_keys`): ``executor=torch, lr=0.1``; the executor alone when no key
    differs."""
    values = _mutable(run)
    shown = list(keys) or [k for k in ("executor",) if k in values]
    if not shown:
        return "as the recipe says"
    return ", ".join(f"{k}={_shown(values[k]) if k in values else '-'}" for k in shown)


def _problem_key(run: ReportRun) -> tuple[str, str]:
    return run.name, _canonical(run.config.get("fixed") or {})


def _slug(text: str, limit: int = 40) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-")
    return slug or "recipe"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _created(run: ReportRun) -> tuple[str, str]:
    return run.created, run.id


# -- reading the runs ---------------------------------------------------------------------


def _setting_value(run: ReportRun, key: str) -> Any:
    """A recipe setting of ``run``: from its resolved settings, else FIXED, else MUTABLE."""
    config = run.config
    for section in ("settings", "fixed", "mutable"):
        table = config.get(section)
        if isinstance(table, Mapping) and table.get(key) is not None:
            return table[key]
    return None


def _measurement(run: ReportRun, metric: str) -> ReportMeasurement | None:
    found = run.find(metric)
    plain = [m for m in found if not m.labels]
    chosen = plain or found
    return chosen[0] if chosen else None


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _test_axis(runs: Sequence[ReportRun]) -> tuple[str, list[int]]:
    """The x axis of the test curves: ``epoch`` when every run tests after each epoch,
    ``step`` when every run tests every N steps (N per run), else ``test pass``."""
    cadences = [_setting_value(run, "test_every") for run in runs]
    if all(c == "epoch" for c in cadences):
        return "epoch", [1] * len(runs)
    if all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in cadences):
        return "step", [int(c) for c in cadences]
    return "test pass", [1] * len(runs)


def _points(
    samples: Sequence[float], every: int, stride: int
) -> tuple[list[float], list[float], list[list[tuple[float, float]]]]:
    """The finite samples drawn of a curve: x = (index + 1) * ``every``, every
    ``stride``-th point and the last one; and the pieces of line between them (a NaN
    sample breaks the line: nothing is drawn across it)."""
    last = len(samples) - 1
    xs: list[float] = []
    ys: list[float] = []
    pieces: list[list[tuple[float, float]]] = [[]]
    for index, value in enumerate(samples):
        if not math.isfinite(value):
            if pieces[-1]:
                pieces.append([])
        elif index % stride == 0 or index == last:
            xs.append(float((index + 1) * every))
            ys.append(float(value))
            pieces[-1].append((xs[-1], ys[-1]))
    return xs, ys, [piece for piece in pieces if piece]


# -- one panel of curves ------------------------------------------------------------------


def _curve_panel(
    ax: Axes,
    curve: _Curve,
    groups: Mapping[str, Sequence[ReportRun]],
    colors: Mapping[str, str],
    *,
    x_label: str,
    every: Mapping[str, int],
) -> dict[str, Any] | None:
    """Draw ``curve`` of every run of ``groups`` (setting -> runs) with a band per
    setting; the numbers drawn, or ``None`` when no run stored the curve."""
    from matplotlib.collections import LineCollection
    from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

    stored = {
        run.id: m
        for runs in groups.values()
        for run in runs
        if (m := _measurement(run, curve.metric)) is not None and m.samples
    }
    if not stored:
        return None
    longest = max(len(m.samples) for m in stored.values())
    stride = max(1, math.ceil(longest / MAX_POINTS))
    settings: dict[str, Any] = {}
    everything: list[float] = []
    for label, runs in groups.items():
        color = colors[label]
        lines: dict[str, Any] = {}
        at: dict[float, list[float]] = {}
        segments: list[list[tuple[float, float]]] = []
        ends: dict[str, list[tuple[float, float]]] = {}
        for run in runs:
            m = stored.get(run.id)
            if m is None:
                continue
            xs, ys, pieces = _points(m.samples, every[run.id], stride)
            if not xs:
                continue
            segments += pieces
            line: dict[str, Any] = {"x": xs, "y": ys, "status": run.status}
            if run.status != "complete":
                marker = _MARKERS.get(run.status, _STOPPED_MARKER)
                ends.setdefault(marker, []).append((xs[-1], ys[-1]))
                line["marker"] = {"x": xs[-1], "y": ys[-1], "status": run.status}
            lines[run.id] = line
            everything += ys
            on_grid = set(range(0, len(m.samples), stride))
            for index, value in enumerate(m.samples):
                if index in on_grid and math.isfinite(value):
                    at.setdefault(float((index + 1) * every[run.id]), []).append(float(value))
        # one artist for all the runs of a setting: hundreds of runs stay quick to save
        ax.add_collection(LineCollection(segments, colors=color, linewidths=0.8, alpha=0.7))
        dots = [point for points in segments for point in points]
        if dots and len(dots) <= _DOTS and max(len(points) for points in segments) <= _DOTTED:
            ax.plot([x for x, _ in dots], [y for _, y in dots], marker="o", markersize=2.5,
                    color=color, alpha=0.7, linestyle="none")  # fmt: skip
        for marker, points in sorted(ends.items()):
            ax.plot([x for x, _ in points], [y for _, y in points], marker=marker,
                    color=color, markersize=6, linestyle="none",
                    markeredgewidth=1.5)  # fmt: skip
        band_x = sorted(x for x, values in at.items() if len(values) >= 2)
        band = {
            "x": band_x,
            "low": [min(at[x]) for x in band_x],
            "high": [max(at[x]) for x in band_x],
        }
        if band_x:
            ax.fill_between(band_x, band["low"], band["high"], color=color, alpha=0.2,
                            linewidth=0)  # fmt: skip
        if lines:
            settings[label] = {"runs": lines, "band": band}
    positive = [v for v in everything if v > 0]
    scale = (
        "log"
        if curve.metric in ("loss", "validation_perplexity")
        and len(positive) == len(everything)
        and positive
        and max(positive) / min(positive) >= 20
        else "linear"
    )
    ax.autoscale_view()
    ax.set_yscale(scale)
    if scale == "log":  # plain numbers: mathtext labels cost more than the curves to save
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(x_label)
    ax.set_title(curve.title)
    return {
        "metric": curve.metric,
        "x": x_label,
        "stride": stride,
        "y_scale": scale,
        "settings": settings,
    }


def _targets_of(runs: Sequence[ReportRun], target: _Target) -> list[float]:
    values = {_setting_value(run, target.setting) for run in runs}
    return sorted(float(v) for v in values if isinstance(v, int | float) and math.isfinite(v))


def _draw_targets(ax: Axes, target: _Target, values: Sequence[float]) -> None:
    for value in values:
        ax.axhline(value, color="black", linestyle="--", linewidth=1.0)
        ax.annotate(
            f"target {target.what} {value:g}",
            xy=(0.01, value),
            xycoords=("axes fraction", "data"),
            xytext=(0, 3),
            textcoords="offset points",
            fontsize=7,
        )


# -- the time to target ---------------------------------------------------------------


def _time_panel(
    ax: Axes,
    target: _Target,
    groups: Mapping[str, Sequence[ReportRun]],
    colors: Mapping[str, str],
) -> dict[str, Any]:
    """Draw the time to ``target`` per setting; the numbers drawn."""
    from matplotlib.transforms import blended_transform_factory

    from d5core.lv2.summaries import time_to_accuracy_summary

    entries: list[tuple[str, list[float], tuple[float, float, float] | None]] = []
    data: dict[str, Any] = {}
    for label, runs in groups.items():
        counted = [r for r in runs if r.status in _SUMMARISED]
        times = [_finite(r.metric_value(target.time)) for r in counted]
        reached = [(r.id, t) for r, t in zip(counted, times, strict=True) if t is not None]
        entry: dict[str, Any] = {
            "runs": len(counted),
            "reached": len(reached),
            "missed": len(counted) - len(reached),
            "missed_runs": [r.id for r, t in zip(counted, times, strict=True) if t is None],
            "not_summarised": {r.id: r.status for r in runs if r.status not in _SUMMARISED},
            "run_ids": [rid for rid, _ in reached],
            "times": [t for _, t in reached],
            "olympic_mean": None,
            "median": None,
            "ci_low": None,
            "ci_high": None,
        }
        ci = None
        if counted:
            summary = time_to_accuracy_summary(times)
            entry["olympic_mean"] = summary["olympic_mean"]
            for key in ("median", "ci_low", "ci_high"):
                entry[key] = _finite(summary[key])
            if None not in (entry["median"], entry["ci_low"], entry["ci_high"]):
                ci = (entry["median"], entry["ci_low"], entry["ci_high"])
        data[label] = entry
        entries.append((label, entry["times"], ci))
    draw_distributions(ax, entries, colors=dict(colors))
    top = blended_transform_factory(ax.transData, ax.transAxes)
    labelled = False
    ticks = []
    for position, (label, entry) in enumerate(data.items(), start=1):
        if entry["olympic_mean"] is not None:
            ax.plot([position], [entry["olympic_mean"]], marker="D", color=_OLYMPIC_COLOR,
                    markersize=6, linestyle="none",
                    label=None if labelled else "olympic mean")  # fmt: skip
            labelled = True
        missed = entry["missed"]
        if missed:
            xs = [position + (j - (missed - 1) / 2) * 0.06 for j in range(missed)]
            ax.plot(xs, [0.97] * missed, marker="^", markerfacecolor="none", linestyle="none",
                    color=colors[label], transform=top, clip_on=False)  # fmt: skip
        text = f"{entry['runs']} runs\n{missed} missed"
        if entry["runs"] and entry["olympic_mean"] is None:
            text += "\nolympic mean n/a"
        if entry["not_summarised"]:
            text += f"\n+{len(entry['not_summarised'])} not finished"
        wrapped = "\n".join(short_label(part, 22) for part in label.split(", ")[:3])
        ticks.append(f"{wrapped}\n{text}")
    ax.set_xticks(range(1, len(ticks) + 1), ticks, fontsize=7)
    if any(entry["missed"] for entry in data.values()):  # room for the triangles
        low, high = ax.get_ylim()
        ax.set_ylim(low, high + 0.12 * (high - low))
    ax.set_ylabel(f"{target.time.replace('_', ' ')} (s)")
    ax.set_title(f"time to {target.what}")
    if labelled:
        ax.legend(fontsize=7, loc="best")
    return data


# -- one recipe ---------------------------------------------------------------------------


def _pick(groups: dict[str, list[ReportRun]]) -> tuple[dict[str, list[ReportRun]], list[str]]:
    """At most :data:`MAX_SETTINGS` settings (most runs first), each with its newest
    :data:`MAX_REPEATS` runs, in label order; and what was left out, as sentences."""
    ranked = sorted(groups, key=lambda label: (-len(groups[label]), label))
    kept = sorted(ranked[:MAX_SETTINGS])
    left: list[str] = []
    if len(ranked) > MAX_SETTINGS:
        dropped = sorted(ranked[MAX_SETTINGS:])
        count = sum(len(groups[label]) for label in dropped)
        left.append(
            f"{len(dropped)} more settings ({count} runs: {', '.join(dropped[:5])}"
            f"{', ...' if len(dropped) > 5 else ''}) are not drawn"
        )
    picked: dict[str, list[ReportRun]] = {}
    for label in kept:
        runs = sorted(groups[label], key=_created)
        if len(runs) > MAX_REPEATS:
            left.append(f"{label}: only its newest {MAX_REPEATS} of {len(runs)} runs are drawn")
            runs = runs[-MAX_REPEATS:]
        picked[label] = runs
    return picked, left


def _stopped(groups: Mapping[str, Sequence[ReportRun]]) -> list[dict[str, Any]]:
    """The runs that did not complete: what the caption lists."""
    stopped = []
    for label, runs in groups.items():
        for run in runs:
            if run.status == "complete":
                continue
            loss = _measurement(run, "loss")
            steps = len(loss.samples) if loss is not None else 0
            diverged = run.config.get("diverged_at")
            at = None
            if run.status == "diverged" and isinstance(diverged, Mapping):
                step = diverged.get("step")
                at = int(step) + 1 if isinstance(step, int) else None
            stopped.append(
                {
                    "run": run.id,
                    "setting": label,
                    "status": run.status,
                    "loss_steps": steps,
                    "diverged_at_step": at,
                }
            )
    return stopped


def _stopped_text(stopped: Sequence[Mapping[str, Any]]) -> str:
    if not stopped:
        return ""
    parts = []
    for item in stopped[:10]:
        where = (
            f"at step {item['diverged_at_step']}"
            if item["diverged_at_step"] is not None
            else f"after {item['loss_steps']} stored steps"
        )
        parts.append(f"{item['run']} ({item['setting']}) {item['status']} {where}")
    more = f"; and {len(stopped) - 10} more" if len(stopped) > 10 else ""
    return (
        " Runs that did not complete are drawn up to their last stored sample and marked "
        f"there (x: diverged, v: failed or unfinished): {'; '.join(parts)}{more}."
    )


def _recipe_figure(
    name: str,
    fixed: str,
    runs: Sequence[ReportRun],
    left_recipes: Sequence[str],
    *,
    twin: bool = False,
) -> ReportFigure | None:
    """The figure of one recipe's ``runs`` (``twin``: another drawn recipe has the same
    name and another FIXED part, so the title shows a digest of this one's)."""
    from matplotlib.lines import Line2D

    keys = setting_keys(runs)
    grouped: dict[str, list[ReportRun]] = {}
    for run in runs:
        grouped.setdefault(setting_label(run, keys), []).append(run)
    groups, left = _pick(grouped)
    drawn = [run for members in groups.values() for run in members]
    colors = colors_for(groups)
    test_axis, cadence = _test_axis(drawn)
    curves = [c for c in _QUALITY if any(_measurement(r, c.metric) for r in drawn)]
    targets = [(t, v) for t in _TARGETS if (v := _targets_of(drawn, t))]
    if not any(_measurement(r, "loss") for r in drawn) and not curves and not targets:
        return None

    # the time panels widen with the settings they compare, so their labels fit
    widths = [1.0] * (1 + len(curves)) + [max(1.0, len(groups) / 3)] * len(targets)
    figure = new_figure(3.4 * sum(widths) + 0.6, 4.0)
    axes = figure.subplots(1, len(widths), squeeze=False, width_ratios=widths)[0]
    data: dict[str, Any] = {
        "recipe": name,
        "fixed": json.loads(fixed),
        "setting_keys": keys,
        "settings": list(groups),
        "band": BAND,
        "curves": {},
        "targets": {},
        "time_to_target": {},
    }
    loss = _curve_panel(axes[0], _LOSS, groups, colors, x_label="step",
                        every={r.id: 1 for r in drawn})  # fmt: skip
    if loss is not None:
        data["curves"]["loss"] = loss
    else:
        axes[0].set_title("training loss: none stored")
    every = {run.id: n for run, n in zip(drawn, cadence, strict=True)}
    for ax, curve in zip(axes[1:], curves, strict=False):
        drawn_curve = _curve_panel(ax, curve, groups, colors, x_label=test_axis, every=every)
        if drawn_curve is not None:
            data["curves"][curve.metric] = drawn_curve
        for target, values in targets:
            if target.curve == curve.metric:
                _draw_targets(ax, target, values)
                data["targets"][target.setting] = values
    for ax, (target, values) in zip(axes[1 + len(curves) :], targets, strict=True):
        data["targets"].setdefault(target.setting, values)
        data["time_to_target"][target.time] = _time_panel(ax, target, groups, colors)

    stopped = _stopped(groups)
    data["stopped"] = stopped
    handles = [
        Line2D([], [], color=colors[label], label=short_label(label, 48)) for label in groups
    ]
    statuses = {item["status"] for item in stopped}
    if "diverged" in statuses:
        handles.append(Line2D([], [], marker="x", color="black", linestyle="none",
                              label="diverged"))  # fmt: skip
    if statuses - {"diverged"}:
        handles.append(Line2D([], [], marker=_STOPPED_MARKER, color="black", linestyle="none",
                              label="failed / unfinished"))  # fmt: skip
    axes[0].legend(handles=handles, fontsize=7, loc="upper right")

    left_out = [*left]
    if left_recipes:
        left_out.append(
            f"{len(left_recipes)} more recipes are not drawn ({', '.join(left_recipes[:5])}"
            f"{', ...' if len(left_recipes) > 5 else ''}): at most {MAX_RECIPES} training "
            "figures per report"
        )
    data["left_out"] = left_out
    caption = _caption(name, keys, data, test_axis, targets, stopped, left_out)
    fixed_digest = _digest(f"{name}\0{fixed}")
    return runs_figure(
        figure,
        data,
        drawn,
        key=f"training-{_slug(name)}-{fixed_digest}",
        title=f"Training: {name}" + (f" (FIXED {fixed_digest})" if twin else ""),
        section="training",
        caption=caption,
    )


def _caption(
    name: str,
    keys: Sequence[str],
    data: Mapping[str, Any],
    test_axis: str,
    targets: Sequence[tuple[_Target, list[float]]],
    stopped: Sequence[Mapping[str, Any]],
    left_out: Sequence[str],
) -> str:
    runs = sum(len(c["runs"]) for c in data["curves"].get("loss", {}).get("settings", {}).values())
    told = ", ".join(keys) if keys else "nothing (every run has the same MUTABLE values)"
    text = (
        f"Recipe {name}: one thin line per run ({runs} with a loss curve), coloured by "
        f"setting; settings differ in {told}. The shaded band spans the lowest to the "
        "highest value of a setting's runs (min-max) where at least two of them have one."
    )
    strides = {c["metric"]: c["stride"] for c in data["curves"].values() if c["stride"] > 1}
    if strides:
        text += (
            " Long curves are drawn at every k-th point and their last ("
            + ", ".join(f"{metric}: k = {k}" for metric, k in strides.items())
            + ")."
        )
    if any(m != "loss" for m in data["curves"]):
        text += f" Test curves: one point per test pass, against the {test_axis}."
    if targets:
        text += (
            " The dashed line is the recipe's target. Time to target per setting: the box "
            "spans the runs that reached it; the diamond is the olympic mean (best and worst "
            "run dropped, as MLPerf) over every complete or diverged run, a run that missed "
            "the target counting as infinitely slow (no diamond when a kept run missed); "
            "the black bar is the median with its 95% CI where it falls on runs that "
            "reached the target; each triangle at the top is a run that missed. Under each "
            "box: its runs and how many missed."
        )
    else:
        text += " The recipe sets no target, so no time to target is drawn."
    text += _stopped_text(stopped)
    if left_out:
        text += " Left out: " + "; ".join(left_out) + "."
    return text


# -- the section --------------------------------------------------------------------------


def figures(runs: Sequence[ReportRun]) -> list[ReportFigure]:
    """One figure per recipe of the single-process training runs among ``runs`` (at most
    :data:`MAX_RECIPES`, those with the most runs; the captions name the others).

    Runs of other kinds and distributed training runs are ignored; ``[]`` when there is
    none to draw.
    """
    problems: dict[tuple[str, str], list[ReportRun]] = {}
    for run in runs:
        if run.kind == "train" and run.level == "training":
            problems.setdefault(_problem_key(run), []).append(run)
    ranked = sorted(problems, key=lambda key: (-len(problems[key]), key))
    kept = sorted(ranked[:MAX_RECIPES])
    left = [f"{name} ({len(problems[(name, fixed)])} runs)" for name, fixed in ranked[MAX_RECIPES:]]
    names = [name for name, _ in kept]
    drawn: list[ReportFigure] = []
    for name, fixed in kept:
        twin = names.count(name) > 1
        figure = _recipe_figure(name, fixed, problems[(name, fixed)], left, twin=twin)
        if figure is not None:
            drawn.append(figure)
    return drawn
