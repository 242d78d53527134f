"""``d5 bench net``: a network's step across executors, each in fresh worker processes,
with its per-node breakdown; with ``--scenario``, the executors under MLPerf LoadGen."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from d5core.cli._parse import parse_list
from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.cli.tag_option import tag_option
from d5core.loadgen.scenario_cmd import (
    check_no_scenario_options,
    scenario_command,
    scenario_options,
)
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
    pass

__all__ = ["bench_net"]


@click.command("net")
@click.argument("model")
@click.option("--executors", required=True, help="Comma-separated executors, e.g. numpy,torch.")
@click.option(
    "--batch",
    type=int,
    default=None,
    help="Samples per step [default: 32, or the model's own batch where its graph fixes it].",
)
@click.option(
    "--mode",
    type=click.Choice(["inference", "train-step"]),
    default="inference",
    show_default=True,
)
@click.option(
    "--breakdown",
    is_flag=True,
    help="Also time every node (a separate run, in this process after the workers).",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Seed of the generated feeds and of the order within each process.",
)
@process_options
@sampling_options(time_budget=0.5)
@timeout_option
@scenario_options
@trace_option
@json_option
@db_option
@tag_option
def bench_net(
    model: str,
    executors: str,
    batch: int | None,
    mode: str,
    breakdown: bool,
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
    **scenario: Any,
) -> None:
    """Time a network on each executor: inference or a training step, with throughput.

    MODEL is a zoo name, a light model shipped with onnx, or a path to an .onnx file.
    A model whose graph fixes its batch runs that batch only. Each executor is measured
    in --processes fresh worker processes (in a random order within each), reported as
    the median of the process medians with its between-process 95% CI. With
    --breakdown, every node's time is stored too (measured in this process), and
    checked against the measured step. With --scenario, the network runs under MLPerf
    LoadGen instead (docs/inference.md). With --trace, each executor is traced in
    extra, untimed steps after the workers (docs/traces.md).
    """
    from d5core.lv1.bench_run import bench_networks
    from d5core.measure.invocations import parse_cpus

    names = parse_list(executors, "executors")
    if scenario["scenario"] is not None:
        return scenario_command(
            click.get_current_context(), model=model, executors=names, batch=batch,
            mode=mode, seed=seed, as_json=as_json, db=db, tags=tags, options=scenario,
            trace=trace,
        )  # fmt: skip
    check_no_scenario_options(scenario)
    bench = bench_networks(
        model, names, batch=batch, mode=mode, seed=seed, breakdown=breakdown,
        options=measure_options(min_samples, max_samples, time_budget, rel_ci, warmup),
        processes=processes, cpus=None if cpus is None else parse_cpus(cpus), db=db,
        tags=tags, quiet=as_json, timeout=timeout, trace=trace,
    )  # fmt: skip
    rows, run_id, outcome, floor = bench.rows, bench.run_id, bench.outcome, bench.floor
    for r, timing in zip(rows, bench.timings, strict=True):
        if timing.per_node is not None and timing.per_node.nodes:
            r.breakdown = _breakdown_table(timing)
    if as_json:
        print_json([{**r.row, "run_id": run_id} for r in rows])
        return
    out = console()
    out.print(_net_table(model, mode, bench.batch, run_id, rows))
    print_footer(outcome, floor)
    if trace is not None:
        click.echo(traced_line(run_id, trace))
    for r in rows:
        if r.breakdown is not None:
            out.print(r.breakdown)


def _net_table(model: str, mode: str, batch: int, run_id: str, rows: Sequence[Row]) -> Table:
    table = Table(
        title=f"d5 bench net {model} ({mode}, batch {batch}), run {run_id}",
        title_justify="left",
    )
    for column in (
        "executor",
        "median per step",
        "95% CI between processes",
        "95% CI within a process",
        "between share",
        "processes (samples)",
        "samples/s [95% CI]",
        "threads",
        "note",
    ):
        table.add_column(column, justify="left" if column == "note" else "right")
    for r in rows:
        n, row = r.gathered.nested, r.row
        table.add_row(
            r.name, fmt_time(n.median), fmt_ci(n.ci_low, n.ci_high, fmt_time),
            fmt_ci(n.within_ci_low, n.within_ci_high, fmt_time), pct(n.between_share),
            f"{n.n_processes} ({n.n_samples})",
            f"{row['throughput']:.1f} [{row['throughput_ci_low']:.1f}, "
            f"{row['throughput_ci_high']:.1f}]", threads_cell(row),
            note(r.gathered, r.close, row["stability"] != "stable"),
        )  # fmt: skip
    return table


def _breakdown_table(timing: Any) -> Table:
    per_node = timing.per_node
    title = (
        f"per-node time on {timing.executor} (top {min(15, len(per_node.nodes))} of "
        f"{len(per_node.nodes)}; they add up "
        f"to {fmt_time(per_node.node_sum)}, the step takes {fmt_time(per_node.step)})"
    )
    layers = Table(title=title, title_justify="left")
    for column in ("node", "op", "direction", "median", "share"):
        layers.add_column(column)
    for node in per_node.nodes[:15]:
        fallback = " (fallback)" if node.node in timing.fallback else ""
        layers.add_row(
            node.node, node.op_type + fallback, node.direction, fmt_time(node.median),
            f"{100 * node.share:.1f}%",
        )  # fmt: skip
    return layers
