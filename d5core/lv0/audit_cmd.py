"""``d5 audit op``: MLPerf-style audit tests of an operator's timed callables (accuracy
while timed, no caching, seed variation), one line per check; exit 1 when one fails.
The runner is :func:`d5core.lv0.audit_run.run_audit`; ``docs/audit.md`` explains the
checks."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from d5core.cli._parse import parse_attributes, parse_list
from d5core.cli.options import db_option, json_option
from d5core.cli.output import print_json
from d5core.cli.tag_option import tag_option
from d5core.errors import CheckFailed, UsageError
from d5core.lv0.bench_common import timeout_option

if TYPE_CHECKING:
    from d5core.lv0.audit_run import AuditOutcome

__all__ = ["audit_op", "audit_options_of", "report_audit"]


def audit_options_of(fn: Any) -> Any:
    """The options ``d5 audit op`` and ``d5 audit net`` share."""
    from d5core.lv0.audit_run import AUDIT_PROCESSES

    for option in reversed(
        [
            click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                         help="Seed of the base inputs and of the job order in each process."),
            click.option("--processes", type=click.IntRange(min=3), default=AUDIT_PROCESSES,
                         show_default=True, help="Fresh worker processes (at least 3)."),
            click.option("--cpus", default=None, metavar="LIST",
                         help="Pin the worker processes to these CPUs, e.g. 0,2-3."),
            click.option("--min-samples", default=20, show_default=True,
                         help="Timed calls per job and process, at least."),
            click.option("--time-budget", type=click.FloatRange(min=0, max=86_400),
                         default=0.3, show_default=True,
                         help="Seconds per job and process."),
            click.option("--warmup", default=3, show_default=True, help="Untimed runs first."),
        ]
    ):  # fmt: skip
        fn = option(fn)
    return fn


def report_audit(found: AuditOutcome, as_json: bool) -> None:
    """Print one line per check (or the JSON list of checks) and fail when one failed.

    :raises CheckFailed: naming the failed checks, after printing.
    """
    if as_json:
        print_json(
            {"run_id": found.run_id, "passed": found.passed, "noise_floor": found.noise_floor,
             "checks": [c.to_json() for c in found.checks]}
        )  # fmt: skip
    else:
        click.echo(
            f"d5 {found.what}, run {found.run_id} (noise floor {100 * found.noise_floor:.1f}%)"
        )
        for c in found.checks:
            click.echo(f"{'PASS' if c.passed else 'FAIL'}  {c.subject}  {c.check}: {c.line}")
    failed = [c for c in found.checks if not c.passed]
    if failed:
        names = ", ".join(f"{c.subject} {c.check}" for c in failed)
        raise CheckFailed(f"{len(failed)} audit check(s) failed: {names}")


@click.command("op")
@click.argument("op")
@click.option("--backends", required=True, help="Comma-separated backends, e.g. numpy,torch.")
@click.option("--shape", default=None, help="Input shapes, e.g. 64x64 (else the default problem).")
@click.option("--attr", "attrs", multiple=True, metavar="KEY=VALUE", help="Operator attribute.")
@click.option("--direction", type=click.Choice(["forward", "backward"]), default="forward",
              show_default=True)  # fmt: skip
@click.option("--dtype", default="float32", show_default=True)
@audit_options_of
@timeout_option
@json_option
@db_option
@tag_option
def audit_op(
    op: str,
    backends: str,
    shape: str | None,
    attrs: tuple[str, ...],
    direction: str,
    dtype: str,
    seed: int,
    processes: int,
    cpus: str | None,
    min_samples: int,
    time_budget: float,
    warmup: int,
    timeout: float | None,
    as_json: bool,
    db: str | Path | None,
    tags: tuple[str, ...],
) -> None:
    """Audit operator OP on each backend as MLPerf audits inference: the outputs of
    timed calls equal the untimed ones, repeated inputs are not faster than fresh ones,
    and other seeds time alike. One line per check; exit 1 when one fails."""
    from d5core.lv0.audit_run import audit_options, run_audit
    from d5core.lv0.bench_run import operator_problems
    from d5core.lv0.jobs import problem_to_json
    from d5core.lv0.runner import check_bench_request
    from d5core.measure.invocations import Job, parse_cpus

    names = parse_list(backends, "backends")
    (problem,) = operator_problems(op, None, shape, parse_attributes(attrs))
    check_bench_request([problem], names, dtype)
    _check_backends(problem, names, dtype, direction)
    data = problem_to_json(problem)
    jobs: dict[str, dict[str, Job]] = {}
    for name in names:
        base = {"problem": data, "backend": name, "dtype": dtype, "direction": direction}
        roles = {
            "base": Job("op", {**base, "seed": seed}, name=f"{name} base"),
            "seed+1": Job("op", {**base, "seed": seed + 1}, name=f"{name} seed+1"),
            "seed+2": Job("op", {**base, "seed": seed + 2}, name=f"{name} seed+2"),
        }
        for mode in ("fresh", "same"):
            args = {**base, "seed": seed, "mode": mode}
            roles[mode] = Job("d5core.lv0.audit_jobs:audit_op_job", args, name=f"{name} {mode}")
        jobs[name] = roles
    config = {"op": op, "problem": problem.label, "backends": names, "direction": direction,
              "dtype": dtype, "level": 0}  # fmt: skip
    found = run_audit(
        f"audit op {problem.label} {direction}", jobs, config=config, processes=processes,
        options=audit_options(min_samples, time_budget, warmup), seed=seed,
        cpus=None if cpus is None else parse_cpus(cpus), db=db, tags=tags, timeout=timeout,
    )  # fmt: skip
    report_audit(found, as_json)


def _check_backends(problem: Any, names: list[str], dtype: str, direction: str) -> None:
    """Refuse, before any worker starts, a backend that lacks the operator or dtype."""
    from d5core.lv0.runner import backend_by_name, check_operator

    for name in names:
        check_operator(backend_by_name(name), problem, dtype)
    if direction not in ("forward", "backward"):
        raise UsageError(f"unknown direction {direction!r}; choose forward or backward")
