"""``d5 conformance``: run onnx's backend node tests against a graph executor, and store
the outcome as a ``conformance`` run (one per executor run) in the results store.

This module reads the options and shows the outcome; the runner
(:func:`d5core.lv1.conformance_run.run_and_store`) runs, checks and stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.cli.tag_option import tag_option
from d5core.errors import CheckFailed, UsageError

__all__ = ["conformance"]

#: How many newly failing cases an error names before it says "and N more".
_NAMED = 10


@click.command("conformance")
@click.argument("executor")
@click.option("--pattern", metavar="REGEX", default=None, help="Run only cases matching REGEX.")
@click.option("--limit", type=int, default=None, help="Run at most this many cases (1 or more).")
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds per case, up to 86400; a case over it is an error (0: no limit).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Read cases from files (onnx/backend/test/data/node layout) instead of generating them.",
)
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Exit 1 if fewer cases pass than this baseline records (e.g. conformance/baseline.json).",
)
@click.option(
    "--update-baseline",
    is_flag=True,
    help="Record this (complete) run as the executor's entry in --baseline.",
)
@click.option("--failures/--no-failures", default=True, help="List the cases that went wrong.")
@json_option
@db_option
@tag_option
def conformance(
    executor: str,
    pattern: str | None,
    limit: int | None,
    timeout_s: float,
    data_dir: Path | None,
    baseline: Path | None,
    update_baseline: bool,
    failures: bool,
    as_json: bool,
    db: str | Path | None,
    tags: tuple[str, ...],
) -> None:
    """Run the onnx package's backend node tests (one small model per operator behaviour)
    against EXECUTOR, a graph executor such as onnxruntime, numpy or torch.

    Each case is passed, failed (a wrong output), unsupported (the executor refused an
    operator) or error. Outputs are compared as onnx's runner does: rtol 1e-3, atol 1e-7.

    The outcome is stored as a run of kind ``conformance`` named ``conformance EXECUTOR``
    (metrics passed, failed, errors, unsupported, total; the failing cases in its config),
    tagged with every --tag.

    Exit 0, or 1 when --baseline is given and fewer cases pass than it records (naming
    the cases that newly fail); 2 on bad usage.
    """
    from d5core.lv1.conformance_run import run_and_store

    if update_baseline and baseline is None:
        raise UsageError("--update-baseline needs --baseline FILE to write to")
    if update_baseline and (pattern is not None or limit is not None):
        raise UsageError("--update-baseline needs a complete run: drop --pattern and --limit")
    outcome = run_and_store(
        executor, pattern=pattern, limit=limit, timeout_s=timeout_s or None,
        data_dir=data_dir, baseline=baseline, update_baseline=update_baseline, db=db, tags=tags,
    )  # fmt: skip
    report, check, data = outcome.report, outcome.check, outcome.data

    if check is not None and check.version_changes:
        click.echo(
            f"d5: warning: the baseline for {executor} in {baseline} was recorded with other "
            f"versions ({', '.join(check.version_changes)}); its counts may not apply: "
            "re-record it with --update-baseline",
            err=True,
        )
    if as_json:
        print_json(data)
    else:
        _print(report, failures)
        if check is not None and check.newly_passing:
            console().print(
                f"{len(check.newly_passing)} case(s) pass that the baseline does not list; "
                "record them with --update-baseline"
            )
        if update_baseline:
            console().print(f"recorded {executor} in {baseline}")
        console().print(f"stored as run {data['run_id']}", highlight=False)

    if check is not None and not check.ok:
        named = ", ".join(check.newly_failing[:_NAMED])
        more = len(check.newly_failing) - _NAMED
        named += f" and {more} more" if more > 0 else ""
        raise CheckFailed(
            f"{executor}: {check.passed} case(s) pass, the baseline {baseline} expects "
            f"{check.expected}; newly failing: {named or '(none named in the baseline)'}"
        )


def _print(report: Any, failures: bool) -> None:
    out = console()
    counts = report.counts
    selection = ""
    if report.pattern is not None:
        selection += f" matching {report.pattern!r}"
    if report.limit is not None:
        selection += f" (first {report.limit})"
    fallback = report.passed_with_fallback
    rate = f"{report.pass_rate:.1%}"
    if fallback:  # the executor's own rate beside the one its fallback engine lifted
        rate = (
            f"{rate} with its fallback; {report.passed_own}/{report.total}, "
            f"{report.own_pass_rate:.1%}, on its own code"
        )
    out.print(
        f"{report.executor}: {counts['passed']}/{report.total} onnx {report.onnx_version} node "
        f"cases{selection} passed ({rate}); failed {counts['failed']}, "
        f"unsupported {counts['unsupported']}, error {counts['error']} "
        f"[{report.seconds:.1f} s]",
        highlight=False,
    )
    if fallback:
        out.print(
            f"{fallback} of the {counts['passed']} passed cases ran some operator on the "
            "executor's fallback engine (numpy's: onnx.reference), not on its own code",
            highlight=False,
        )
    if failures and report.failures:
        table = Table(title="cases that went wrong", title_justify="left")
        for column in ("case", "op", "status", "why"):
            table.add_column(column, overflow="fold")
        for r in report.failures:
            table.add_row(r.name, r.op_type, r.status, r.message)
        out.print(table)
