"""``d5 validate net``: check a network on an executor against the reference executor.

This module reads the options and shows the report; the runner
(:func:`d5core.lv1.validate_run.validate_net_and_store`) validates and stores."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.cli.tag_option import tag_option
from d5core.cli.tolerances import read_tolerances
from d5core.errors import CheckFailed
from d5core.trace.capture import traced_line
from d5core.trace.options import trace_option

__all__ = ["validate_net"]


@click.command("net")
@click.argument("model")
@click.option("--executor", required=True, help="Executor to check (e.g. torch, onnxruntime).")
@click.option(
    "--batch",
    type=click.IntRange(min=1, max=1_000_000),
    default=2,
    show_default=True,
    help="Batch size of the generated feeds.",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Seed of the generated feeds.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=None,
    help="Seconds the checks may take in their worker process (default 300); past it the "
    "check fails.",
)
@click.option("--rtol", type=float, default=None, help="Override the relative tolerance.")
@click.option("--atol", type=float, default=None, help="Override the absolute tolerance.")
@trace_option
@json_option
@db_option
@tag_option
def validate_net(
    model: str,
    executor: str,
    batch: int,
    seed: int,
    timeout_s: float | None,
    rtol: float | None,
    atol: float | None,
    as_json: bool,
    db: str | Path | None,
    tags: tuple[str, ...],
    trace: str | None,
) -> None:
    """Validate a network on an executor against the reference executor: every output,
    and the gradient of every parameter when the executor trains.

    MODEL is a zoo name (mlp, lenet5, resnet20, vgg, ...), a light model shipped with
    onnx (resnet50, ...), or a path to an .onnx file. The checks run in a worker
    process killed after --timeout seconds: a crash or a time-out of the executor is a
    failed check naming the signal and the phase. Exit 0 on pass, 1 on failure, 2 on bad
    usage.
    """
    from d5core.lv1.validate_run import validate_net_and_store
    from d5core.validate.isolated import DEFAULT_TIMEOUT_S, check_timeout

    tolerances = read_tolerances(rtol, atol, "float32")
    timeout = DEFAULT_TIMEOUT_S if timeout_s is None else check_timeout(timeout_s)
    stored = validate_net_and_store(
        model, executor, batch=batch, seed=seed, tolerances=tolerances, db=db, tags=tags,
        timeout_s=timeout, trace=trace,
    )  # fmt: skip
    result = stored.result
    data = {**result.to_json(), "run_id": stored.run_id}
    if as_json:
        print_json(data)
    else:
        table = Table(
            title=f"{model} on {executor}, against {data['against']} (batch {batch})",
            title_justify="left",
        )
        for column in ("check", "result", "max abs", "max rel", "detail"):
            table.add_column(column, overflow="fold")
        for check in [*result.outputs, *result.gradients]:
            m = check.metrics or {}
            label = check.label if check in result.outputs else f"gradient of {check.name}"
            table.add_row(
                label,
                "pass" if check.passed else "FAIL",
                f"{m.get('max_abs', float('nan')):.2e}" if m else "",
                f"{m.get('max_rel', float('nan')):.2e}" if m else "",
                check.detail or "",
            )
        console().print(table)
        for note in result.notes:
            console().print(note)
        if trace is not None:
            click.echo(traced_line(stored.run_id, trace))
    if not result.passed:
        failures = result.failures()
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise CheckFailed(f"{model} on {executor} failed: {failures[0]}{more}")
