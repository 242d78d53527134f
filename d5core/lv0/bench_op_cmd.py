"""``d5 bench op``: operators across backends, each in fresh worker processes, with
their between-process intervals, roofline inputs and a check against the noise floor."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.table import Table

from d5core.cli._parse import parse_attributes, parse_list
from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.cli.tag_option import tag_option
from d5core.errors import UsageError
from d5core.lv0.bench_common import (
    Row,
    fmt_ci,
    fmt_time,
    measure_options,
    note,
    pct,
    print_footer,
    process_options,
    sampling_options,
    threads_cell,
    timeout_option,
)
from d5core.trace.capture import traced_line
from d5core.trace.options import trace_option

if TYPE_CHECKING:
    from d5core.lv0.workloads.roofline import Peak

__all__ = ["bench_op", "peak_footer"]


@click.command("op")
@click.argument("op", required=False)
@click.option("--backends", required=True, help="Comma-separated backends, e.g. numpy,torch.")
@click.option(
    "--custom",
    "custom",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A C++ custom operator's source: build it and time it in each of --backends.",
)
@click.option("--suite", default=None, help="A shape suite, e.g. cpu-small or deepbench.")
@click.option("--shape", default=None, help="Input shapes instead of a suite, e.g. 64x64,64x64.")
@click.option("--attr", "attrs", multiple=True, metavar="KEY=VALUE", help="Operator attribute.")
@click.option(
    "--direction",
    type=click.Choice(["forward", "backward", "both"]),
    default="forward",
    show_default=True,
)
@click.option("--dtype", default="float32", show_default=True)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Seed of the generated inputs and of the order within each process.",
)
@process_options
@sampling_options(time_budget=0.2)
@timeout_option
@trace_option
@json_option
@db_option
@tag_option
def bench_op(
    op: str | None,
    backends: str,
    custom: Path | None,
    suite: str | None,
    shape: str | None,
    attrs: tuple[str, ...],
    direction: str,
    dtype: str,
    seed: int,
    processes: int,
    cpus: str | None,
    min_samples: int,
    max_samples: int,
    time_budget: float,
    rel_ci: float,
    warmup: int,
    timeout: float | None,
    as_json: bool,
    db: str | Path | None,
    tags: tuple[str, ...],
    trace: str | None,
) -> None:
    """Time operator OP on each backend, forward and/or backward, side by side.

    Each backend and problem is measured in --processes fresh worker processes (the
    backends in a random order within each), and reported as the median of the
    process medians with its between-process 95% CI. Every sample is stored with its
    process; GEMM, MatMul and convolutions also report (and store) GFLOP/s and the
    fraction of the peak of the cores each backend ran on (its threads). With
    --trace, each job is traced in extra, untimed calls after the workers.
    """
    from d5core.lv0.bench_run import bench_operators, operator_problems
    from d5core.measure.invocations import parse_cpus

    names = parse_list(backends, "backends")
    directions = ["forward", "backward"] if direction == "both" else [direction]
    if custom is not None:  # a C++ custom operator, built for each framework
        if op is not None or suite is not None:
            raise UsageError("--custom names the operator itself; leave out OP and --suite")
        problems = None
    elif op is None:
        raise UsageError("give the operator OP (or --custom FILE for a C++ custom operator)")
    else:
        problems = operator_problems(op, suite, shape, parse_attributes(attrs))
    bench = bench_operators(
        op, problems, names, directions=directions, dtype=dtype, seed=seed,
        options=measure_options(min_samples, max_samples, time_budget, rel_ci, warmup),
        processes=processes, cpus=None if cpus is None else parse_cpus(cpus), suite=suite,
        custom=custom, custom_shape=shape, custom_attributes=parse_attributes(attrs),
        db=db, tags=tags, quiet=as_json, timeout=timeout, trace=trace,
    )  # fmt: skip
    rows, peak, peak_rate, floor = bench.rows, bench.peak, bench.peak_rate, bench.floor
    if as_json:
        print_json(
            [{**r.row, "run_id": bench.run_id, "peak_gflops": peak_rate,
              "peak_source": peak.source,
              "noise_floor": None if floor is None else floor.machine_floor} for r in rows]
        )  # fmt: skip
        return
    out = console()
    out.print(_op_table(bench.op, dtype, bench.run_id, rows))
    out.print(peak_footer(peak, dtype), markup=False, highlight=False)
    print_footer(bench.outcome, floor)
    if trace is not None:
        click.echo(traced_line(bench.run_id, trace))


def peak_footer(peak: Peak, dtype: str) -> str:
    """What the table's "% peak" is of: the peak of the threads each backend ran on, one
    core's share of the peak times those threads."""
    rate, per_core = peak.gflops.get(dtype), peak.per_core(dtype)
    if not rate or not per_core:
        return f"% peak: no {dtype} peak known ({peak.source})"
    kind = "measured " if peak.source.startswith("measured") else ""
    cores = f"{peak.cores} core{'s' if peak.cores != 1 else ''}"
    return (
        f"% peak: of the {kind}FMA peak of the threads the backend ran on: "
        f"{per_core:.1f} GFLOP/s per core ({dtype}; {rate:.0f} GFLOP/s on all {cores}, the "
        f"peak where the threads are unknown; {peak.source})"
    )


def _op_table(op: str, dtype: str, run_id: str, rows: Sequence[Row]) -> Table:
    table = Table(title=f"d5 bench op {op} ({dtype}), run {run_id}", title_justify="left")
    for column in ("problem", "direction", "backend"):
        table.add_column(column, overflow="fold")
    for column in (
        "median",
        "95% CI between processes",
        "95% CI within a process",
        "between share",
        "processes (samples)",
        "GFLOP/s (% peak)",
        "threads",
        "note",
    ):
        table.add_column(column, justify="right" if column != "note" else "left")
    for r in rows:
        n = r.gathered.nested
        rate = "" if r.row["gflops"] is None else f"{r.row['gflops']:.1f}"
        if rate and r.row["peak_fraction"]:
            rate += f" ({100 * r.row['peak_fraction']:.0f}%)"
        table.add_row(
            r.key[0], r.key[1], r.name, fmt_time(n.median),
            fmt_ci(n.ci_low, n.ci_high, fmt_time),
            fmt_ci(n.within_ci_low, n.within_ci_high, fmt_time),
            pct(n.between_share), f"{n.n_processes} ({n.n_samples})", rate,
            threads_cell(r.row), note(r.gathered, r.close, r.row["stability"] != "stable"),
        )  # fmt: skip
    return table


# -- d5 bench net ----------------------------------------------------------------------------
