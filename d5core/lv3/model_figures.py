"""The report's figure of the communication cost models: what ``d5 model comm`` predicts
from each stored ping-pong fit, for every installed scheme with a model, from 2 to 4,096
ranks.

One figure per ping-pong run (``d5 bench comm --collective pingpong``, the most recent
:data:`MAX_MODEL_FIGURES`), two panels: the zoo's resnet20 (its trainable tensors, as
``d5 model comm --params resnet20`` counts them) and one tensor of 100 million float32
parameters. Each scheme is drawn with the options ``d5 run --scheme S`` uses by default.
A scheme whose model fails is left out and named in the figure's notes; the others are
drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from d5core.levels.report import ReportFigure, ReportRun
from d5core.report.style import colors_for, figure_key, machines_note, new_figure

__all__ = ["MAX_MODEL_FIGURES", "MODEL_RANKS", "figures", "prediction_data"]

#: Ping-pong runs whose predictions are drawn at most (the most recent).
MAX_MODEL_FIGURES = 2
#: The rank counts predicted: 2, 4, ... 4,096.
MODEL_RANKS: tuple[int, ...] = tuple(2**k for k in range(1, 13))
#: The parameter counts drawn, as ``d5 model comm --params`` takes them.
_MODELS: tuple[str, ...] = ("resnet20", "100M")
_SECTION = "distributed"
#: Line styles, so that schemes with equal predictions (model averaging every step and
#: the allreduce) both show.
_STYLES: tuple[str, ...] = ("-", "--", ":", "-.")


def _fitted(run: ReportRun) -> Any | None:
    """The ping-pong fit stored with ``run``, or ``None`` for another run."""
    from d5core.errors import UsageError
    from d5core.lv3.comm_fit import CommFit
    from d5core.lv3.comm_sweep import PINGPONG

    if run.kind != "comm" or run.config.get("collective") != PINGPONG:
        return None
    data = run.config.get("fit")
    if not isinstance(data, Mapping):
        return None
    try:
        return CommFit.from_json(data)
    except UsageError:
        return None


def _modelled_schemes() -> list[tuple[str, Any]]:
    """The installed schemes whose class gives a cost model, each with its class, or
    with the one line of why its model could not be read (a plugin's failure)."""
    from d5core.lv3.launch import distribution_schemes, scheme_class

    found: list[tuple[str, Any]] = []
    for name in distribution_schemes():
        try:
            cls = scheme_class(name)
            if cls.communication_cost(ranks=2, params=1024, itemsize=4, latency_s=1e-6,
                                      seconds_per_byte=1e-9, options={}) is not None:  # fmt: skip
                found.append((name, cls))
        except Exception as exc:  # one plugin's failure never stops the others
            found.append((name, _line(exc)))
    return found


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def prediction_data(
    fit: Any, schemes: Sequence[tuple[str, Any]], counts: Sequence[Any] | None = None
) -> dict[str, Any]:
    """The numbers a model figure draws: per parameter count, each scheme's predicted
    seconds per step at :data:`MODEL_RANKS`, and the schemes whose model failed.

    :param counts: the parameter counts of the panels (``ParamCount`` of
        :func:`~d5core.lv3.cost_table.parse_params`; default: resnet20's and 100M).
    """
    from d5core.lv3.cost_table import cost_rows, parse_params

    if counts is None:
        counts = [parse_params(model) for model in _MODELS]
    panels = []
    failed = {name: why for name, why in schemes if isinstance(why, str)}
    for params in counts:
        series: dict[str, list[float]] = {}
        for name, cls in schemes:
            if name in failed:
                continue
            try:
                rows = cost_rows(cls, MODEL_RANKS, params, 4, fit, {})
            except Exception as exc:  # one plugin's model never stops the others
                failed[name] = _line(exc)
                continue
            series[name] = [row.cost.seconds for row in rows]
        panels.append({"params": params.label, "count": params.total, "series": series})
    return {
        "fit": {
            "run": fit.run_id,
            "communicator": fit.communicator,
            "latency_s": fit.latency_s,
            "seconds_per_byte": fit.seconds_per_byte,
            "exchange_s_per_byte": fit.exchange_or_p2p_s_per_byte,
            "reduce_s_per_byte": fit.reduce_s_per_byte,
        },
        "ranks": list(MODEL_RANKS),
        "itemsize": 4,
        "panels": panels,
        "failed": failed,
    }


def figures(runs: Sequence[ReportRun]) -> list[ReportFigure]:
    """One prediction figure per recent ping-pong run of ``runs``; ``[]`` when none has a
    fit or no installed scheme has a model."""
    fitted = [(run, fit) for run in runs if (fit := _fitted(run)) is not None]
    if not fitted:
        return []
    schemes = _modelled_schemes()
    if all(isinstance(cls, str) for _, cls in schemes):  # none, or none that works
        return []
    from d5core.lv3.cost_table import parse_params

    counts = [parse_params(model) for model in _MODELS]  # built once: resnet20 takes 0.25 s
    fitted.sort(key=lambda pair: (pair[0].created, pair[0].id))
    kept, left = fitted[-MAX_MODEL_FIGURES:], len(fitted) - MAX_MODEL_FIGURES
    return [_figure(run, prediction_data(fit, schemes, counts), max(left, 0)) for run, fit in kept]


def _figure(run: ReportRun, data: dict[str, Any], left: int) -> ReportFigure:
    from matplotlib.ticker import NullLocator

    panels = data["panels"]
    names = sorted({name for panel in panels for name in panel["series"]})
    colors = colors_for(names)
    fig = new_figure(4.2 * len(panels), 3.8)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    styles = {name: _STYLES[i % len(_STYLES)] for i, name in enumerate(names)}
    ticks = data["ranks"][::2]
    for ax, panel in zip(axes, panels, strict=True):
        for name, seconds in panel["series"].items():
            shown = [(n, s * 1e3) for n, s in zip(data["ranks"], seconds, strict=True) if s > 0]
            ax.plot([n for n, _ in shown], [v for _, v in shown], marker="o", markersize=3,
                    linewidth=1.2, linestyle=styles[name], color=colors[name],
                    label=name)  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ticks, [str(n) for n in ticks], fontsize=7)  # plain: mathtext is slow
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("ranks")
        ax.set_title(f"{panel['params']}: {panel['count']:,} float32 parameters", fontsize=9)
    axes[0].set_ylabel("predicted communication per step (ms)")
    axes[0].legend(fontsize=7)
    f = data["fit"]
    caption = (
        f"What `d5 model comm --scheme S --ranks 2,4,...,4096 --params P` predicts from the "
        f"ping-pong fit of run {run.id} ({f['communicator']}: L = {f['latency_s'] * 1e6:.3g} "
        f"µs, G = {f['seconds_per_byte'] * 1e9:.4g} ns/B, Gx = "
        f"{f['exchange_s_per_byte'] * 1e9:.4g} ns/B, R = {f['reduce_s_per_byte'] * 1e9:.4g}"
        " ns/B), each scheme with its default options. The models count messages and "
        "bytes; their times are lower bounds, checked against measured steps in "
        "docs/comm-models.md." + (f" {left} older ping-pong runs not drawn." if left else "")
    )
    notes = tuple(f"scheme {name!r} not drawn: {why}" for name, why in data["failed"].items())
    return ReportFigure(
        key=figure_key("distributed-model", run.id),
        title=f"Predicted communication per step, fit of run {run.id}",
        section=_SECTION,
        figure=fig,
        data=data,
        runs=(run.id,),
        caption=caption,
        notes=(*notes, *machines_note([run])),
    )
