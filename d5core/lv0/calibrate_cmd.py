"""``d5 calibrate``: measure this machine's noise floor and store it."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json

__all__ = ["calibrate"]


def _fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds / 1e-9:.4g} ns"


def _fmt_ci(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "unknown"
    return f"[{_fmt_time(low)}, {_fmt_time(high)}]"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.1f}%"


@click.command("calibrate")
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes, each running every workload once (default: 10; 5 with "
    "--brief; at least 3).",
)
@click.option(
    "--brief",
    is_flag=True,
    help="The short calibration d5 runs by itself on a machine it has not seen.",
)
@click.option(
    "--cpus",
    default=None,
    metavar="LIST",
    help="Pin the workers to these CPUs, e.g. 0 or 0,2-3 (recorded).",
)
@click.option("--seed", default=0, show_default=True, help="Seed of the order of the workloads.")
@json_option
@db_option
def calibrate(
    processes: int | None,
    brief: bool,
    cpus: str | None,
    seed: int,
    as_json: bool,
    db: str | Path | None,
) -> None:
    """Measure how much identical invocations vary on this machine, and store it.

    Three workloads (a 256x256 GEMM, a 64 MiB copy and a Python loop) run in several
    fresh processes; each one's noise floor is the robust relative spread of its process
    medians, and the machine's floor is the largest. 'd5 results compare' and 'd5 bench'
    never call a change smaller than the floor. docs/measurement.md explains it.
    """
    from d5core.measure.invocations import RoundRecord, parse_cpus
    from d5core.measure.noise import BRIEF_PROCESSES, CALIBRATION_PROCESSES, calibrate_into

    pinned = None if cpus is None else parse_cpus(cpus)
    count = processes or (BRIEF_PROCESSES if brief else CALIBRATION_PROCESSES)

    def progress(record: RoundRecord) -> None:
        if not as_json:
            click.echo(f"d5: calibrating: process {record.index + 1} of {count}", err=True)

    result = calibrate_into(
        db, processes=count, brief=brief, seed=seed, cpus=pinned, on_process=progress
    )
    for warning in result.warnings:
        click.echo(f"d5: warning: {warning}", err=True)
    if as_json:
        print_json(result.to_json())
        return
    table = Table(
        title=f"noise floor of machine {result.fingerprint} ({result.processes} processes)",
        title_justify="left",
    )
    for column in (
        "workload",
        "median",
        "between-process 95% CI",
        "within-process 95% CI",
        "between share",
        "noise floor",
    ):
        table.add_column(column)
    for w in result.workloads:
        s = w.summary
        if s is None:
            table.add_row(w.name, "-", "-", "-", "-", f"failed: {w.error}")
            continue
        table.add_row(
            w.name,
            _fmt_time(s.median),
            _fmt_ci(s.ci_low, s.ci_high),
            _fmt_ci(s.within_ci_low, s.within_ci_high),
            _pct(s.between_share),
            _pct(w.floor),
        )
    out = console()
    out.print(table)
    ident = result.identity
    if result.busy:
        click.echo(
            f"d5: warning: other work competed for the CPU while calibrating "
            f"({result.busy[0]}): this calibration is stored but not used as the noise "
            "floor; run 'd5 calibrate' again when the machine is quiet",
            err=True,
        )
    out.print(
        f"machine noise floor: {_pct(result.machine_floor)} (the largest of the workloads); "
        f"stored as run {result.run_id} for {ident.get('cpu_model')}, "
        f"{ident.get('logical_cores')} cores, {ident.get('memory_gib')} GiB, "
        f"host {ident.get('hostname')}"
    )
