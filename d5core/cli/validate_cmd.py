"""``d5 validate``: check an implementation against d5's verified reference."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from d5core.cli._parse import parse_attributes
from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.cli.tag_option import tag_option
from d5core.errors import CheckFailed, UsageError

__all__ = ["validate"]


@click.group("validate")
def validate() -> None:
    """Validate operators and networks against the reference backend."""


def _tolerances(rtol: float | None, atol: float | None, dtype: str) -> Any:
    """The ``Tolerance`` that ``--rtol``/``--atol`` ask for, or ``None`` for the defaults.

    :raises UsageError: for a negative, NaN or infinite value, which would pass anything.
    """
    from d5core.validate.operators import Tolerance, check_tolerance, tolerance_for

    if rtol is not None:
        check_tolerance("--rtol", rtol)
    if atol is not None:
        check_tolerance("--atol", atol)
    if rtol is None and atol is None:
        return None
    default = tolerance_for(dtype)
    return Tolerance(
        rtol=default.rtol if rtol is None else rtol, atol=default.atol if atol is None else atol
    )


@validate.command("op")
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
@click.option("--rtol", type=float, default=None, help="Override the dtype's relative tolerance.")
@click.option("--atol", type=float, default=None, help="Override the dtype's absolute tolerance.")
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
    rtol: float | None,
    atol: float | None,
    as_json: bool,
    db: Path | None,
    tags: tuple[str, ...],
) -> None:
    """Validate operator OP of a backend: forward and backward against the reference,
    and the backward against central differences in float64.

    With --custom FILE (and no OP), the C++ custom operator in FILE is built for each
    framework and validated in each: its forward against the numpy build's, its
    backward against central differences in float64.

    Exit 0 when every check passes, 1 when one fails (naming the output or input and
    the metric), 2 on bad usage.
    """
    from d5core.results.store import ResultsStore
    from d5core.runners.operators import problem_for, validate_op
    from d5core.workloads.problems import parse_shapes

    tolerances = _tolerances(rtol, atol, dtype)
    if custom is not None:
        _validate_custom(custom, op, backend, backends, shape, attrs, dtype, seed, tolerances,
                         as_json, db, tags)  # fmt: skip
        return
    if op is None or backend is None:
        raise UsageError("give OP and --backend (or --custom FILE for a C++ custom operator)")
    if backends is not None:
        raise UsageError("--backends goes with --custom; name one backend with --backend")
    problem = problem_for(
        op,
        shapes=None if shape is None else parse_shapes(shape),
        attributes=parse_attributes(attrs),
    )
    result = validate_op(problem, backend, dtype=dtype, seed=seed, tolerances=tolerances)
    data = result.to_json()
    with ResultsStore.open(db) as store:
        data["run_id"] = _store_validation(store, result, seed, tags)
    if as_json:
        print_json(data)
    else:
        _print_report(result)
    if not result.passed:
        failures = result.report.failures()
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise CheckFailed(f"{op} on {backend} ({dtype}) failed: {failures[0]}{more}")


def _store_validation(store: Any, result: Any, seed: int, tags: tuple[str, ...] = ()) -> str:
    """Record one operator validation as a run of the results store, tagged ``tags``;
    its id."""
    config = {"op": result.op, "backend": result.backend, "dtype": result.dtype,
              "problem": result.problem}  # fmt: skip
    name = f"{result.op} {result.backend}"
    with store.run("validate", name, config=config, seed=seed, tags=tags) as run_id:
        store.add_metric(run_id, "passed", float(result.passed))
        for check in [*result.report.outputs, *result.report.gradients]:
            for metric, value in (check.metrics or {}).items():
                if math.isfinite(value):
                    labels = {"check": check.label, "method": getattr(check, "method", "")}
                    store.add_metric(run_id, metric, value, labels=labels)
        store.finish_run(run_id, "complete")
    return str(run_id)


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
    db: Path | None,
    tags: tuple[str, ...] = (),
) -> None:
    """``d5 validate op --custom FILE``: build, validate in each framework, store, report."""
    from d5core.cli._parse import parse_list
    from d5core.customop.runner import validate_custom
    from d5core.results.store import ResultsStore
    from d5core.workloads.problems import parse_shapes

    if op is not None or backend is not None:
        raise UsageError("--custom names the operator itself; leave out OP and use --backends")
    outcome = validate_custom(
        custom,
        None if backends is None else parse_list(backends, "backends"),
        shapes=None if shape is None else parse_shapes(shape),
        attributes=parse_attributes(attrs),
        dtype=dtype,
        seed=seed,
        tolerances=tolerances,
        on_note=None if as_json else lambda line: click.echo(f"d5: {line}", err=True),
    )
    data = []
    with ResultsStore.open(db) as store:
        for result in outcome.results:
            run_id = _store_validation(store, result, seed, tags)
            data.append({**result.to_json(), "run_id": run_id})
    if as_json:
        print_json(data)
    else:
        for result in outcome.results:
            _print_report(result)
    if not outcome.passed:
        failed = outcome.failures()
        raise CheckFailed(
            f"{outcome.build.spec.name} ({dtype}) failed in {len(failed)} of "
            f"{len(outcome.results)} frameworks: " + "; ".join(failed)
        )


def _print_report(result: Any) -> None:
    report = result.report
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


@validate.command("net")
@click.argument("model")
@click.option("--executor", required=True, help="Executor to check (e.g. torch, onnxruntime).")
@click.option("--batch", default=2, show_default=True, help="Batch size of the generated feeds.")
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Seed of the generated feeds.",
)
@click.option("--rtol", type=float, default=None, help="Override the relative tolerance.")
@click.option("--atol", type=float, default=None, help="Override the absolute tolerance.")
@json_option
@db_option
@tag_option
def validate_net(
    model: str,
    executor: str,
    batch: int,
    seed: int,
    rtol: float | None,
    atol: float | None,
    as_json: bool,
    db: Path | None,
    tags: tuple[str, ...],
) -> None:
    """Validate a network on an executor against the reference executor: every output,
    and the gradient of every parameter when the executor trains.

    MODEL is a zoo name (mlp, lenet5, resnet20, vgg, ...), a light model shipped with
    onnx (resnet50, ...), or a path to an .onnx file. Exit 0 on pass, 1 on failure,
    2 on bad usage.
    """
    from d5core.results.store import ResultsStore
    from d5core.runners.networks import validate_network

    tolerances = _tolerances(rtol, atol, "float32")
    result = validate_network(model, executor, batch=batch, seed=seed, tolerances=tolerances)
    data = result.to_json()
    config: dict[str, Any] = {"model": model, "executor": executor, "batch": batch}
    if result.fallback:  # nodes an executor ran on its fallback engine (forward only)
        config["fallback"] = result.fallback
    with (
        ResultsStore.open(db) as store,
        store.run("validate", f"{model} {executor}", config=config, seed=seed, tags=tags) as run_id,
    ):
        store.add_metric(run_id, "passed", float(result.passed))
        for check in [*result.outputs, *result.gradients]:
            for metric, value in (check.metrics or {}).items():
                if math.isfinite(value):
                    labels = {"check": check.label, "method": getattr(check, "method", "")}
                    store.add_metric(run_id, metric, value, labels=labels)
    data["run_id"] = run_id
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
    if not result.passed:
        failures = result.failures()
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise CheckFailed(f"{model} on {executor} failed: {failures[0]}{more}")
