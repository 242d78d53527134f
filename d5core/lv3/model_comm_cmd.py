"""``d5 model comm``: a distribution scheme's predicted communication time per step, from
the latency and time per byte fitted to a stored ping-pong (``d5 bench comm
--collective pingpong``), for one rank count or a series of them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.errors import UsageError

if TYPE_CHECKING:
    from d5core.lv3.comm_fit import CommFit
    from d5core.lv3.cost_table import CostRow, ParamCount

__all__ = ["model_comm"]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g}"


def _bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def fit_line(fit: CommFit) -> str:
    """Which fit a prediction used, in one line."""
    bandwidth = "unbounded" if fit.seconds_per_byte <= 0 else f"{fit.bandwidth_gbps:.3g} GB/s"
    return (
        f"fit: run {fit.run_id} ({fit.communicator}, {fit.ranks} ranks): "
        f"L = {fit.latency_s * 1e6:.3g} µs, G = {fit.seconds_per_byte * 1e9:.4g} ns/B "
        f"(1/G = {bandwidth}), max |residual| {fit.max_abs_residual:.0%}; "
        + (f"Gx = {fit.exchange_s_per_byte * 1e9:.4g} ns/B both ways at once"
           if fit.exchange_s_per_byte > 0 else "Gx not measured (G used)")
        + (f", R = {fit.reduce_s_per_byte * 1e9:.4g} ns/B reduced"
           if fit.reduce_s_per_byte > 0 else ", R not measured (reductions not counted)")
    )  # fmt: skip


def _table(rows: list[CostRow]) -> Table:
    table = Table(show_header=True)
    columns = ("ranks", "per step (ms)", "latency part (ms)", "bandwidth part (ms)",
               "reduction part (ms)", "messages", "critical bytes", "bytes sent per rank",
               "bound", "algorithm")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column in ("bound", "algorithm") else "right")
    for row in rows:
        c = row.cost
        table.add_row(
            str(row.ranks), _ms(c.seconds), _ms(c.latency_seconds), _ms(c.bandwidth_seconds),
            _ms(c.reduce_seconds), f"{c.messages:.4g}", _bytes(c.critical_bytes),
            _bytes(c.bytes_sent), c.bound, c.algorithm,
        )  # fmt: skip
    return table


def _document(
    scheme: str, params: ParamCount, itemsize: int, options: dict[str, Any], fit: CommFit,
    rows: list[CostRow], plot: Path | None,
) -> dict[str, Any]:  # fmt: skip
    return {
        "scheme": scheme,
        "params": params.total,
        "params_label": params.label,
        "tensors": None if params.sizes is None else len(params.sizes),
        "itemsize": itemsize,
        "scheme_options": options,
        "fit": fit.to_json(),
        "rows": [row.to_json() for row in rows],
        "plot": None if plot is None else str(plot),
    }


@click.command("comm")
@click.option("--scheme", required=True, help="The distribution scheme (d5 run --scheme).")
@click.option("--ranks", required=True, metavar="LIST",
              help="A rank count, a list (2,4,8) or a series (2,4,...,4096).")  # fmt: skip
@click.option("--params", "params_text", required=True, metavar="N",
              help="A parameter count (4810, 100M, 1.5e8) or a zoo model (resnet20).")  # fmt: skip
@click.option("--itemsize", type=int, default=4, show_default=True,
              help="Bytes per parameter.")  # fmt: skip
@click.option("--fit", "fit_run", default=None, metavar="RUN",
              help="The ping-pong run to take L and G from (default: the newest).")  # fmt: skip
@click.option("--communicator", default=None, metavar="NAME",
              help="Use the newest ping-pong of this communicator (or check --fit's).")  # fmt: skip
@click.option("--scheme-option", "scheme_options", multiple=True, metavar="KEY=VALUE",
              help="A scheme option, as on d5 run (servers=2, period=4, "
              'compression={"name":"topk","ratio":0.01}).')  # fmt: skip
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="FILE.png", help="Also draw the prediction against ranks (PNG).")  # fmt: skip
@json_option
@db_option
def model_comm(
    scheme: str,
    ranks: str,
    params_text: str,
    itemsize: int,
    fit_run: str | None,
    communicator: str | None,
    scheme_options: tuple[str, ...],
    plot: Path | None,
    as_json: bool,
    db: str | Path | None,
) -> None:
    """Predict a scheme's communication time per step from a fitted L and G.

    The scheme's cost model (docs/comm-models.md) counts the messages and bytes on the
    critical path of one step; each message costs L + G*bytes (Gx when two ranks send
    to each other at once) and each byte a reduction adds up R, all fitted to a stored
    ping-pong (d5 bench comm --collective pingpong; --fit picks the run). Prints a row
    per rank count: seconds per step, its latency, bandwidth and reduction parts, the
    bytes each rank sends and the algorithm assumed. Exits 2 for bad input.
    """
    from d5core.lv3.comm_fit import load_fit
    from d5core.lv3.cost_table import (
        cost_rows,
        draw_costs,
        parse_params,
        parse_rank_list,
        scheme_with_model,
    )
    from d5core.lv3.launch import parse_scheme_options

    counts = parse_rank_list(ranks)
    if itemsize <= 0:
        raise UsageError(f"--itemsize {itemsize}: give the bytes per parameter, 1 or more")
    if plot is not None and plot.suffix.lower() != ".png":
        raise UsageError(f"--plot {plot}: the figure is a PNG; give a path ending in .png")
    cls = scheme_with_model(scheme)
    options = parse_scheme_options(scheme_options)
    count = parse_params(params_text)
    fit = load_fit(fit_run, db, communicator)
    rows = cost_rows(cls, counts, count, itemsize, fit, options)
    if plot is not None:
        title = f"{scheme}, {count.total:,} parameters ({count.label}); fit run {fit.run_id}"
        draw_costs(rows, title, plot)
    if as_json:
        print_json(_document(scheme, count, itemsize, options, fit, rows, plot),
                   command="model comm")  # fmt: skip
        return
    out = console()
    what = count.label if count.sizes is None else f"{count.label}, {len(count.sizes)} tensors"
    out.print(f"d5 model comm: {scheme}, {count.total:,} parameters ({what}) x {itemsize} bytes"
              + (f", options {options}" if options else ""))  # fmt: skip
    out.print(fit_line(fit))
    out.print(_table(rows))
    for formula in dict.fromkeys(row.cost.formula for row in rows):
        out.print(f"model: {formula}  (B = {count.total * itemsize:,} bytes)")
    if plot is not None:
        out.print(f"plot: {plot}")
