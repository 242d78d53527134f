"""``d5 validate op``: check an operator backend, or a custom operator, against d5's
verified reference.

This module reads the options and shows the reports; the runner
(:mod:`d5core.lv0.validate_run`) validates and stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from d5core.cli._parse import parse_attributes
from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.cli.tag_option import tag_option
from d5core.cli.tolerances import read_tolerances
from d5core.errors import CheckFailed, UsageError
from d5core.trace.capture import traced_line
from d5core.trace.options import trace_option

__all__ = ["validate_op"]


@click.command("op")
@click.argument("op", required=False)
@click.option("--backend", "backend", default=None, help="Backend to check (e.g. torch).")
@click.option(
    "--custom",
    "custom",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A C++ custom operator's source: build it and validate it in --backends.",
)
@click.option(
    "--backends",
    "backends",
    default=None,
    help="With --custom: comma-separated frameworks (default: every installed one).",
)
@click.option("--shape", "shape", default=None, help="Input shapes, e.g. 4x3,3x5.")
@click.option("--attr", "attrs", multiple=True, metavar="KEY=VALUE", help="Operator attribute.")
@click.option("--dtype", default="float32", show_default=True, help="Element type.")
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Seed of the generated inputs.",
)
@click.option(
    "--reference",
    "python_reference",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="With --custom: a Python file defining forward(inputs, attributes), the numpy "
    "reference every framework's forward is compared with (default: FILE.py beside FILE).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=None,
    help="Seconds each framework's checks may take in their worker process "
    "(default 300); past it the check fails.",
)
@click.option("--rtol", type=float, default=None, help="Override the dtype's relative tolerance.")
@click.option("--atol", type=float, default=None, help="Override the dtype's absolute tolerance.")
@trace_option
@json_option
@db_option
@tag_option
def validate_op(
    op: str | None,
    backend: str | None,
    custom: Path | None,
    backends: str | None,
    shape: str | None,
    attrs: tuple[str, ...],
    dtype: str,
    seed: int,
    python_reference: Path | None,
    timeout_s: float | None,
    rtol: float | None,
    atol: float | None,
    as_json: bool,
    db: str | Path | None,
    tags: tuple[str, ...],
    trace: str | None,
) -> None:
    """Validate operator OP of a backend: forward and backward against the reference,
    and the backward against central differences in float64.

    With --custom FILE (and no OP), the C++ custom operator in FILE is built for each
    framework and validated in each: its forward against the numpy build's, its
    backward against central differences in float64.

    Each framework's checks run in a worker process of their own, killed after
    --timeout seconds: a crash, an abort or a time-out fails that framework's check,
    naming the signal and the phase, and the other frameworks are still checked.

    Exit 0 when every check passes, 1 when one fails (naming the output or input and
    the metric), 2 on bad usage.
    """
    from d5core.lv0.validate_run import validate_op_and_store
    from d5core.lv0.workloads.problems import parse_shapes
    from d5core.validate.isolated import DEFAULT_TIMEOUT_S, check_timeout

    tolerances = read_tolerances(rtol, atol, dtype)
    timeout = DEFAULT_TIMEOUT_S if timeout_s is None else check_timeout(timeout_s)
    if custom is not None:
        if trace is not None:
            raise UsageError(
                "--trace does not trace --custom validations (each framework's build runs "
                "in a worker of its own); trace the built operator with d5 bench op --custom"
            )
        _validate_custom(custom, op, backend, backends, shape, attrs, dtype, seed, tolerances,
                         as_json, db, tags, timeout, python_reference)  # fmt: skip
        return
    if python_reference is not None:
        raise UsageError("--reference goes with --custom: a C++ custom operator's reference")
    if op is None or backend is None:
        raise UsageError("give OP and --backend (or --custom FILE for a C++ custom operator)")
    if backends is not None:
        raise UsageError("--backends goes with --custom; name one backend with --backend")
    stored = validate_op_and_store(
        op,
        backend,
        shapes=None if shape is None else parse_shapes(shape),
        attributes=parse_attributes(attrs),
        dtype=dtype,
        seed=seed,
        tolerances=tolerances,
        db=db,
        tags=tags,
        timeout_s=timeout,
        trace=trace,
    )
    result = stored.result
    data = {**result.to_json(), "run_id": stored.run_id}
    if as_json:
        print_json(data)
    else:
        _print_report(result)
        if trace is not None:
            click.echo(traced_line(stored.run_id, trace))
    if not result.passed:
        failures = result.report.failures()
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise CheckFailed(f"{op} on {backend} ({dtype}) failed: {failures[0]}{more}")


def _validate_custom(
    custom: Path,
    op: str | None,
    backend: str | None,
    backends: str | None,
    shape: str | None,
    attrs: tuple[str, ...],
    dtype: str,
    seed: int,
    tolerances: Any,
    as_json: bool,
    db: str | Path | None,
    tags: tuple[str, ...] = (),
    timeout_s: float | None = None,
    python_reference: Path | None = None,
) -> None:
    """``d5 validate op --custom FILE``: build, validate in each framework and store
    (:func:`~d5core.lv0.validate_run.validate_custom_and_store`), then report."""
    from d5core.cli._parse import parse_list
    from d5core.lv0.validate_run import validate_custom_and_store
    from d5core.lv0.workloads.problems import parse_shapes

    if op is not None or backend is not None:
        raise UsageError("--custom names the operator itself; leave out OP and use --backends")
    stored = validate_custom_and_store(
        custom,
        None if backends is None else parse_list(backends, "backends"),
        shapes=None if shape is None else parse_shapes(shape),
        attributes=parse_attributes(attrs),
        dtype=dtype,
        seed=seed,
        tolerances=tolerances,
        db=db,
        tags=tags,
        on_note=None if as_json else lambda line: click.echo(f"d5: {line}", err=True),
        **({} if timeout_s is None else {"timeout_s": timeout_s}),
        python_reference=python_reference,
    )
    outcome = stored.outcome
    data = [
        {**result.to_json(), "run_id": run_id}
        for result, run_id in zip(outcome.results, stored.run_ids, strict=True)
    ]
    if as_json:
        print_json(data)
    else:
        for result in outcome.results:
            _print_report(result)
    if not outcome.passed:
        failed = outcome.failures()
        frameworks = {r.backend for r in outcome.results}
        failing = {r.backend for r in outcome.results if not r.passed}
        raise CheckFailed(
            f"{outcome.build.spec.name} ({dtype}) failed in {len(failing)} of "
            f"{len(frameworks)} frameworks: " + "; ".join(failed)
        )


def _print_report(result: Any) -> None:
    report = result.report
    if result.worker_failure:  # nothing was compared: one line says why
        console().print(f"{result.op} on {result.backend} ({result.dtype}): FAIL, "
                        f"{result.worker_failure}", soft_wrap=True, markup=False)  # fmt: skip
        return
    # one name throughout: the operator as selected, with a differing op_type shown once
    declared = f" (op_type {report.op_type})" if report.op_type not in ("", result.op) else ""
    against = result.against
    if result.reference_op not in (None, result.op):
        against = f"{result.against}'s {result.reference_op}"
    table = Table(
        title=f"{result.op}{declared} on {result.backend} ({result.dtype}), "
        f"against {against}: {result.problem}",
        title_justify="left",
    )
    for column in ("check", "method", "result", "max abs", "max rel", "detail"):
        table.add_column(column, overflow="fold")
    for check in [*report.outputs, *report.gradients]:
        metrics = check.metrics or {}
        verdict = (
            "skipped" if getattr(check, "skipped", None) else "pass" if check.passed else "FAIL"
        )
        table.add_row(
            check.label,
            getattr(check, "method", "forward"),
            verdict,
            f"{metrics.get('max_abs', float('nan')):.2e}" if metrics else "",
            f"{metrics.get('max_rel', float('nan')):.2e}" if metrics else "",
            getattr(check, "skipped", None) or check.detail or "",
        )
    console().print(table)
    if result.note:
        console().print(f"note: {result.note}")
    if report.no_gradient:
        console().print(
            f"{result.op} declares that it has no gradient: its gradients were not checked"
        )
    for error in report.errors:
        console().print(f"error: {error}")
