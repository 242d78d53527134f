"""The look every d5 figure shares, and helpers the figure modules have in common.

Figures are drawn with matplotlib's object API on the Agg canvas (``new_figure``),
never through ``pyplot``: nothing global is changed, and a report can draw hundreds of
figures in one process without a display.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from d5core.levels.report import ReportFigure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from d5core.levels.report import ReportRun

__all__ = [
    "PALETTE",
    "color_for",
    "colors_for",
    "draw_distributions",
    "figure_key",
    "machines_note",
    "new_figure",
    "runs_figure",
    "short_label",
    "time_unit",
]

#: Colours for the things compared in one figure (backends, executors, settings), in the
#: order they are given out: Okabe and Ito's palette, told apart by colour-blind readers.
PALETTE: tuple[str, ...] = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#F0E442",
    "#000000",
)

_RC: dict[str, Any] = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    # Text stays text in the SVG: searchable, selectable, and checked by the tests.
    "svg.fonttype": "none",
    # The same figure gives the same SVG bytes.
    "svg.hashsalt": "d5",
    "pdf.fonttype": 42,
}


def new_figure(width: float = 7.0, height: float = 3.6) -> Figure:
    """A blank figure on the Agg canvas, ``width`` x ``height`` inches, d5's style."""
    import matplotlib

    matplotlib.rcParams.update(_RC)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def colors_for(names: Iterable[str]) -> dict[str, str]:
    """A colour for each of ``names`` (sorted, so the same names get the same colours in
    every figure of a report)."""
    ordered = sorted(set(names))
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(ordered)}


def color_for(name: str, names: Iterable[str]) -> str:
    """The colour of ``name`` among ``names`` (see :func:`colors_for`)."""
    return colors_for([*names, name])[name]


def figure_key(prefix: str, *parts: object) -> str:
    """A figure key: ``prefix``, a readable slug of ``parts`` and a short hash of them
    (names such as model paths may differ only in characters the slug drops)."""
    shown = [str(p) for p in parts]
    slug = re.sub(r"[^a-z0-9]+", "-", " ".join(shown).lower()).strip("-")[:48].strip("-")
    digest = hashlib.sha256("\x1f".join(shown).encode()).hexdigest()[:6]
    return f"{prefix}-{slug}-{digest}" if slug else f"{prefix}-{digest}"


_TIME_UNITS: tuple[tuple[str, float, float], ...] = (
    ("s", 1.0, 1.0),
    ("ms", 1e-3, 1e3),
    ("µs", 1e-6, 1e6),
    ("ns", 0.0, 1e9),
)


def time_unit(seconds: Iterable[float]) -> tuple[str, float]:
    """A unit for times around the median of ``seconds``: its name and the scale that
    turns seconds into it."""
    finite = sorted(v for v in seconds if math.isfinite(v) and v > 0)
    middle = finite[len(finite) // 2] if finite else 1.0
    for name, floor, scale in _TIME_UNITS:
        if middle >= floor:
            return name, scale
    return _TIME_UNITS[-1][0], _TIME_UNITS[-1][2]


def short_label(text: str, limit: int = 40) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis, for axis labels."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def machines_note(runs: Sequence[ReportRun]) -> tuple[str, ...]:
    """A note for a figure that draws runs of more than one machine, naming them; empty
    when they all ran on one."""
    machines: dict[str, list[str]] = {}
    for run in runs:
        machines.setdefault(run.machine, []).append(run.id)
    if len(machines) < 2:
        return ()
    listed = "; ".join(
        f"{machine}: {len(ids)} run{'s' if len(ids) > 1 else ''}"
        for machine, ids in sorted(machines.items())
    )
    return (f"drawn from runs of {len(machines)} different machines ({listed})",)


def runs_figure(
    figure: Figure,
    data: Mapping[str, Any],
    runs: Sequence[ReportRun],
    *,
    key: str,
    title: str,
    section: str,
    caption: str,
    ids: Iterable[str] | None = None,
) -> ReportFigure:
    """The report figure ``figure``, drawing ``data`` from ``runs``.

    It names the runs it draws (their ids, or ``ids`` where only some of ``runs`` end
    up drawn) and carries :func:`machines_note` of ``runs``, so that no figure mixes
    machines without saying so.
    """
    return ReportFigure(
        key=key,
        title=title,
        section=section,
        figure=figure,
        data=data,
        runs=tuple(run.id for run in runs) if ids is None else tuple(ids),
        caption=caption,
        notes=machines_note(runs),
    )


def draw_distributions(
    ax: Axes,
    groups: Sequence[tuple[str, Sequence[float], tuple[float, float, float] | None]],
    *,
    colors: dict[str, str] | None = None,
    scale: float = 1.0,
    violin_from: int = 30,
) -> None:
    """Draw each group's samples as a box (a violin behind it when it has at least
    ``violin_from`` samples) with the median's confidence interval as a black bar.

    :param groups: ``(label, samples, (median, low, high) or None)`` per position.
    :param scale: multiplies every value (1e3 to draw seconds as milliseconds).
    """
    positions = list(range(1, len(groups) + 1))
    data = [[v * scale for v in samples] for _, samples, _ in groups]
    colors = colors or {}
    dense = [i for i, values in enumerate(data) if len(values) >= violin_from]
    if dense:
        parts = ax.violinplot(
            [data[i] for i in dense],
            positions=[positions[i] for i in dense],
            showextrema=False,
            widths=0.8,
        )
        bodies = cast("list[Any]", parts["bodies"])
        for i, body in zip(dense, bodies, strict=True):
            body.set_facecolor(colors.get(groups[i][0], PALETTE[0]))
            body.set_alpha(0.25)
    boxes = ax.boxplot(
        [values if values else [float("nan")] for values in data],
        positions=positions,
        widths=0.35,
        patch_artist=True,
        showfliers=True,
        flierprops={"markersize": 2, "alpha": 0.5},
        medianprops={"color": "black"},
    )
    for label_data, box in zip(groups, boxes["boxes"], strict=True):
        box.set_facecolor(colors.get(label_data[0], PALETTE[0]))
        box.set_alpha(0.6)
    for position, (_, _, ci) in zip(positions, groups, strict=True):
        if ci is None:
            continue
        median, low, high = (v * scale for v in ci)
        ax.errorbar(
            [position + 0.3],
            [median],
            yerr=[[median - low], [high - median]],
            fmt="o",
            color="black",
            markersize=3,
            capsize=3,
            linewidth=1.2,
        )
    ax.set_xticks(positions, [short_label(label, 18) for label, _, _ in groups])
