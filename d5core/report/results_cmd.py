"""``d5 results``: list, show, export and compare the runs in the results store.

Every subcommand reads the database named by ``--db`` (else ``D5_DB``, else the per-user
default) and never writes to it, except to mark runs whose process died as
``incomplete``. ``--json`` prints machine-readable output instead of tables
(``docs/json.md``). The commands parse and render: the comparison of two runs is
:mod:`d5core.report.comparison`, the table of training runs
:mod:`d5core.lv2.training_table`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, json_text, print_json
from d5core.errors import CheckFailed, UsageError
from d5core.results.load import BUSY_LEGEND, BUSY_MARK, LoadAverage, run_load_warnings, was_busy
from d5core.results.store import MeasurementRecord, RunRecord, read_store
from d5core.results.tags import check_tag
from d5core.trace.marks import TRACED_LEGEND, TRACED_MARK, trace_level

if TYPE_CHECKING:
    from d5core.report.comparison import Comparison

__all__ = ["results"]

_STATUS_STYLE = {
    "complete": "green",
    "running": "cyan",
    "failed": "bold red",
    "diverged": "yellow",
    "incomplete": "magenta",
    "interrupted": "magenta",
}
_VERDICT_STYLE = {"better": "bold green", "worse": "bold red", "same": "dim", "changed": "yellow"}
_CSV_COLUMNS = (
    "run_id",
    "run_kind",
    "run_name",
    "run_status",
    "record",
    "measurement_id",
    "metric",
    "labels",
    "unit",
    "index",
    "value",
)


def _open(db: str | Path | None) -> Any:
    return read_store(db)


def _warn(message: str) -> None:
    click.echo(f"d5: warning: {message}", err=True)


# -- formatting -----------------------------------------------------------------

_TIME_SCALES = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))


def _scale(unit: str, reference: float | None) -> tuple[float, str]:
    """A factor and unit label that show ``reference`` (in ``unit``) readably."""
    if unit != "s" or reference is None or not math.isfinite(reference) or reference == 0:
        return 1.0, unit
    for factor, label in _TIME_SCALES:
        if abs(reference) >= factor:
            return factor, label
    return _TIME_SCALES[-1]


def _num(value: float | None, factor: float = 1.0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value / factor:.4g}"


def _with_unit(value: float | None, unit: str) -> str:
    factor, label = _scale(unit, value)
    text = _num(value, factor)
    return f"{text} {label}".strip() if text != "-" else text


def _median_ci(summary: Mapping[str, Any] | None, unit: str) -> str:
    if not summary:
        return "-"
    median = summary.get("median")
    factor, label = _scale(unit, median)
    ci = f"[{_num(summary.get('ci_low'), factor)}, {_num(summary.get('ci_high'), factor)}]"
    return f"{_num(median, factor)} {ci} {label}".rstrip()


def _labels(labels: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in labels.items())


def _when(timestamp: str | None) -> str:
    return "-" if not timestamp else timestamp[:19].replace("T", " ")


def _duration(run: RunRecord) -> str:
    if not run.finished:
        return "-"
    from datetime import datetime

    seconds = (
        datetime.fromisoformat(run.finished) - datetime.fromisoformat(run.created)
    ).total_seconds()
    return f"{seconds:.3g} s" if seconds < 120 else f"{seconds / 60:.3g} min"


def _status(status: str) -> str:
    return f"[{_STATUS_STYLE.get(status, '')}]{status}[/]" if status in _STATUS_STYLE else status


def _busy(run: RunRecord) -> bool:
    return was_busy(run.load_start, run.load_end)


def _status_cell(run: RunRecord) -> str:
    """The run's status, with the busy-machine mark where it was measured on one and the
    traced mark where it was traced."""
    traced = f" [bold cyan]{TRACED_MARK}[/]" if trace_level(run.config) else ""
    return _status(run.status) + (f" [bold yellow]{BUSY_MARK}[/]" if _busy(run) else "") + traced


def _load_text(run: RunRecord) -> str:
    """The run's load average at its start and end."""

    def one(load: LoadAverage | None) -> str:
        return "not recorded" if load is None else load.describe()

    return f"start {one(run.load_start)}; end {one(run.load_end)}"


def _load_line(run: RunRecord) -> str:
    return f"load         {_load_text(run)}"


# -- list ---------------------------------------------------------------------------


@click.group("results")
def results() -> None:
    """List, show, export and compare stored runs."""


@results.command("list")
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Show at most this many runs, newest first.",
)
@click.option("--all", "show_all", is_flag=True, help="Show every run (overrides --limit).")
@click.option("--kind", default=None, help="Only runs of this kind (op, net, train, measure...).")
@click.option(
    "--tag",
    default=None,
    metavar="NAME",
    help="Only runs tagged NAME (given with --tag when the run was made).",
)
@json_option
@db_option
def list_runs(
    limit: int,
    show_all: bool,
    kind: str | None,
    tag: str | None,
    as_json: bool,
    db: str | Path | None,
) -> None:
    """List stored runs, newest first."""
    if tag is not None:
        check_tag(tag)
    with _open(db) as store:
        runs = store.list_runs(limit=None if show_all else limit, kind=kind, tag=tag)
        location = store.location
        known = store.tag_names() if tag is not None and not runs else {}
    if as_json:
        print_json([r.to_json() for r in runs])
        return
    if not runs:
        console().print(
            f"no runs in {location}" + (f" of kind {kind!r}" if kind else "")
            + (f" tagged {tag!r}" if tag is not None else "")
            + _known_tags_hint(tag, known),
            markup=False, highlight=False,
        )  # fmt: skip
        return
    table = Table(title=f"d5 runs in {location}", title_justify="left")
    for column in ("id", "kind", "name", "status", "created (UTC)", "duration"):
        table.add_column(column, overflow="fold")
    for column in ("measurements", "metrics", "seed"):
        table.add_column(column, justify="right")
    table.add_column("host")
    tagged = any(r.tags for r in runs)
    if tagged:
        table.add_column("tags", overflow="fold")
    for r in runs:
        table.add_row(
            r.id,
            r.kind,
            r.name,
            _status_cell(r),
            _when(r.created),
            _duration(r),
            str(r.n_measurements),
            str(r.n_metrics),
            "-" if r.seed is None else str(r.seed),
            r.hostname or "-",
            *([Text(", ".join(r.tags))] if tagged else []),
        )
    console().print(table)
    if any(_busy(r) for r in runs):
        console().print(BUSY_LEGEND, markup=False, highlight=False)
    if any(trace_level(r.config) for r in runs):
        console().print(TRACED_LEGEND, markup=False, highlight=False)


def _known_tags_hint(tag: str | None, known: Mapping[str, int]) -> str:
    """For an empty ``--tag`` selection: the tags the database does have."""
    if tag is None:
        return ""
    if not known:
        return "; no run in it has a tag (give runs one with --tag when making them)"
    names = list(known)
    shown = ", ".join(repr(t) for t in names[:10]) + (" ..." if len(names) > 10 else "")
    return f"; its tags: {shown}"


# -- show ----------------------------------------------------------------------------


def _part(env: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = env.get(key)
    return value if isinstance(value, Mapping) else {}


def _allocator_line(allocator: Mapping[str, Any]) -> str:
    """``allocator  steady (glibc 2.36)``, with what the user set under ``user``."""
    policy, library = allocator.get("policy"), allocator.get("library", "?")
    user = allocator.get("user")
    chosen = ", ".join(f"{k}={v}" for k, v in user.items()) if isinstance(user, Mapping) else ""
    return f"allocator    {policy} ({library}{'; ' + chosen if chosen else ''})"


def _environment_lines(env: Mapping[str, Any], fingerprint: str | None) -> list[str]:
    cpu, os_, py = _part(env, "cpu"), _part(env, "os"), _part(env, "python")
    packages, threads, git = _part(env, "packages"), _part(env, "threads"), _part(env, "git")
    gpus = env.get("gpus") if isinstance(env.get("gpus"), list) else []
    set_threads = ", ".join(f"{k}={v}" for k, v in threads.items() if v is not None)
    lines = [
        f"fingerprint  {fingerprint or '-'}",
        f"cpu          {cpu.get('model', '-')} ({cpu.get('logical_cores', '?')} logical, "
        f"{cpu.get('physical_cores', '?')} physical, {cpu.get('usable_cores', '?')} usable)",
        f"os           {os_.get('system', '-')} {os_.get('release', '')} {os_.get('machine', '')}",
        f"python       {py.get('implementation', '')} {py.get('version', '-')}",
        "packages     " + (", ".join(f"{k} {v}" for k, v in packages.items()) or "-"),
        f"threads      {set_threads or 'no thread variables set'}",
    ]
    allocator = _part(env, "allocator")
    if allocator.get("policy"):
        lines.append(_allocator_line(allocator))
    if gpus:
        lines.append("gpus         " + ", ".join(str(g.get("name")) for g in gpus))
    if git:
        dirty = " (uncommitted changes)" if git.get("dirty") else ""
        lines.append(f"git          {git.get('commit', '-')}{dirty}")
    if env.get("argv"):
        lines.append("command      " + " ".join(str(a) for a in env["argv"]))
    return lines


def _measurement_table(title: str, rows: Sequence[MeasurementRecord]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("id", "metric", "labels", "n", "median [95% CI]", "IQR", "outliers"):
        table.add_column(column, overflow="fold")
    for column in ("stability", "blocked", "stopped by", "better"):
        table.add_column(column)
    for m in rows:
        s = m.summary or {}
        factor, label = _scale(m.unit, s.get("median"))
        iqr = f"{_num(s.get('iqr'), factor)} {label}".strip() if s else "-"
        blocked = "-" if m.blocked is None else (f"yes ×{m.block_size}" if m.blocked else "no")
        table.add_row(
            str(m.id),
            m.metric,
            _labels(m.labels),
            str(m.n),
            _median_ci(m.summary, m.unit),
            iqr,
            str(s.get("outliers", "-")),
            str(s.get("stability", "-")),
            blocked,
            m.stopped_by or "-",
            m.better or "-",
        )
    return table


#: The start-up costs ``d5 bench`` stores apart from the samples (seconds), in the order
#: shown, with the word each is shown as (:data:`d5core.lv0.bench_results.STARTUP_METRICS`).
_STARTUP_METRICS = {
    "prepare_time": "prepare",
    "compile_time": "compile",
    "first_call_time": "first call",
}


def _startup_lines(metrics: Sequence[Any]) -> list[str]:
    """One line per measured thing (labels) with its start-up costs:
    ``backend=jax, ...: prepare 183 ms, first call 12 ms``."""
    found: dict[str, dict[str, float]] = {}
    for k in metrics:
        if k.name in _STARTUP_METRICS:
            found.setdefault(_labels(k.labels), {})[k.name] = k.value
    lines = []
    for labels, costs in found.items():
        parts = [
            f"{word} {_with_unit(costs[name], 's')}"
            for name, word in _STARTUP_METRICS.items()
            if name in costs
        ]
        lines.append(f"{labels}: {', '.join(parts)}" if labels else ", ".join(parts))
    return lines


@results.command("show")
@click.argument("run")
@click.option("--samples", is_flag=True, help="With --json, include the raw samples.")
@json_option
@db_option
def show_run(run: str, samples: bool, as_json: bool, db: str | Path | None) -> None:
    """Show one run: its settings, environment, measurements and metrics.

    RUN is a run id or a prefix of one that matches a single run.
    """
    with _open(db) as store:
        record = store.get_run(run)
        warnings = run_load_warnings(record.load_start, record.load_end)
        if as_json:
            document = store.run_document(record.id, samples=samples)
            print_json({**document, "load_warnings": warnings})
            return
        env = store.environment(record.id)
        measurements = store.measurements(record.id)
        metrics = store.metrics(record.id)
    out = console()
    out.print(f"run {record.id}  {record.kind} {record.name}  {_status(record.status)}")
    out.print(
        f"created {_when(record.created)} UTC, finished {_when(record.finished)}"
        f" ({_duration(record)}), host {record.hostname or '-'}, pid {record.pid or '-'}"
    )
    out.print(
        f"seed {'-' if record.seed is None else record.seed}, recipe {record.recipe_hash or '-'}",
        highlight=False,
    )
    out.print("config " + json.dumps(record.config, default=str), markup=False, highlight=False)
    if record.tags:
        out.print("tags   " + ", ".join(record.tags), markup=False, highlight=False)
    level = trace_level(record.config)
    if level:
        out.print(
            f"{TRACED_MARK} at level {level}: d5 trace {record.id} -o trace.json, or --top 15",
            style="bold cyan", markup=False, highlight=False,
        )  # fmt: skip
    if record.error:
        out.print(f"error  {record.error}", markup=False)
    out.print("environment", style="bold")
    for line in _environment_lines(env, record.fingerprint):
        out.print("  " + line, markup=False, highlight=False)
    out.print("  " + _load_line(record), markup=False, highlight=False)
    for warning in warnings:
        out.print(f"WARNING: {warning}", style="bold yellow", markup=False, highlight=False)
    if measurements:
        out.print(_measurement_table("measurements", measurements))
    else:
        out.print("no measurements")
    startup = _startup_lines(metrics)
    if startup:
        out.print("compile and first call (not in the samples; median over processes)")
        for line in startup:
            out.print("  " + line, markup=False, highlight=False)
        metrics = [k for k in metrics if k.name not in _STARTUP_METRICS]
    if metrics:
        table = Table(title="metrics", title_justify="left")
        for column in ("name", "labels", "value", "unit", "better"):
            table.add_column(column)
        for k in metrics:
            table.add_row(k.name, _labels(k.labels), _num(k.value), k.unit, k.better or "-")
        out.print(table)


# -- export ----------------------------------------------------------------------------


def _csv_rows(documents: Iterable[Mapping[str, Any]]) -> Iterable[list[Any]]:
    for doc in documents:
        run = doc["run"]
        head = [run["run_id"], run["kind"], run["name"], run["status"]]
        for m in doc["measurements"]:
            labels = json.dumps(m["labels"], sort_keys=True)
            for i, value in enumerate(m.get("samples") or []):
                yield [*head, "sample", m["id"], m["metric"], labels, m["unit"], i, value]
        for k in doc["metrics"]:
            labels = json.dumps(k["labels"], sort_keys=True)
            yield [*head, "metric", "", k["name"], labels, k["unit"], "", k["value"]]


@results.command("export")
@click.argument("runs", nargs=-1)
@click.option(
    "--all", "every_run", is_flag=True, help="Export every run of the store, oldest first."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "csv", "jsonl"]),
    default=None,
    help="json: one document with runs, environments, summaries and raw samples "
    "(the default); csv: one row per raw sample or scalar metric; jsonl: one d5-run/1 "
    "transfer document per line, with samples and artifacts, for 'd5 results import'.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Write to this file instead of standard output.",
)
@json_option(help="Same as --format json.")
@db_option
def export_runs(
    runs: tuple[str, ...],
    every_run: bool,
    fmt: str | None,
    output: Path | None,
    as_json: bool,
    db: str | Path | None,
) -> None:
    """Export runs with their raw samples as JSON, CSV or JSON Lines.

    RUNS are run ids or unique prefixes; --all exports every run. --json is short for
    --format json. --format jsonl writes what 'd5 results import' reads, to move runs
    to a store at another site; runs still running are left out of it (with a warning),
    since they are not finished.
    """
    if as_json and fmt not in (None, "json"):
        raise UsageError(f"--json and --format {fmt} contradict each other; give one of them")
    if bool(runs) == every_run:
        raise UsageError("give run ids, or --all, not both and not neither")
    fmt = fmt or "json"
    with _open(db) as store:
        if every_run:
            ids = [r.id for r in reversed(store.list_runs())]
        else:
            ids = list(dict.fromkeys(store.get_run(r).id for r in runs))
        if fmt == "jsonl":
            _export_jsonl(store, ids, output)
            return
        documents = [store.run_document(i) for i in ids]
        location = store.location
    if fmt == "json":
        text = json_text({"database": location, "runs": documents})
    else:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(_CSV_COLUMNS)
        writer.writerows(_csv_rows(documents))
        text = buffer.getvalue()
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from exc
    n_samples = sum(len(m.get("samples") or []) for d in documents for m in d["measurements"])
    click.echo(f"wrote {len(documents)} run(s), {n_samples} samples, to {output}", err=True)


def _export_jsonl(store: Any, ids: Sequence[str], output: Path | None) -> None:
    """Write the finished runs of ``ids`` as JSON Lines to ``output`` (standard output
    when ``None``); a file is written beside and renamed, so a failure leaves none."""
    from d5core.teamstore.transfer import write_jsonl

    running = {r.id for r in store.list_runs() if r.status == "running"} & set(ids)
    for run_id in ids:
        if run_id in running:
            _warn(f"run {run_id} is still running: left out; export it once it has finished")
    finished = [i for i in ids if i not in running]
    if output is None:
        write_jsonl(store, finished, sys.stdout)
        return
    partial = output.with_name(f".{output.name}.partial-{os.getpid()}")
    try:
        with partial.open("w", encoding="utf-8", newline="\n") as out:
            written = write_jsonl(store, finished, out)
        os.replace(partial, output)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    click.echo(
        f"wrote {written.runs} run(s), {written.samples} samples, {written.artifacts} "
        f"artifact(s), to {output}",
        err=True,
    )


# -- compare ---------------------------------------------------------------------------


def _moved(change: str, unit: str) -> str:
    """How the candidate moved, in words: slower or faster for times and rates."""
    if change not in ("higher", "lower"):
        return change
    if unit in ("s", "ms", "us", "µs", "ns"):
        return "slower" if change == "higher" else "faster"
    if unit.endswith("/s"):
        return "faster" if change == "higher" else "slower"
    return change


def _processes_note(row: Mapping[str, Any]) -> str:
    """``1 process: between-run variance unknown`` when a side had too few processes."""
    from d5core.measure.nested import BETWEEN_UNKNOWN

    if row.get("enough_processes", True):
        return ""
    fewest = min(row["n_baseline"], row["n_candidate"])
    return f"{fewest} process{'' if fewest == 1 else 'es'}: {BETWEEN_UNKNOWN}"


def _within_floor(row: Mapping[str, Any]) -> bool:
    """Whether a change significant between processes was too small to call."""
    p, floor = row.get("p_value"), row.get("min_effect")
    return (
        row.get("method") == "welch"
        and row.get("verdict") == "same"
        and p is not None
        and floor is not None
        and p < row["alpha"]
        and abs(row["ratio"] - 1.0) <= floor
    )


def _verdict_text(row: Mapping[str, Any]) -> str:
    """``worse (slower)``, ``better (higher)``, ``changed (lower)`` or ``same``, with
    ``(1 process: between-run variance unknown)`` when a side had too few processes,
    ``(within the noise floor)`` for a significant change no larger than the floor and
    ``(untested: ...)`` for a scalar metric's change, which no test can confirm."""
    verdict, change = row.get("verdict"), row.get("change")
    if verdict is None:
        return "-"
    moved = "" if change in (None, "none") else f" ({_moved(change, row['unit'])})"
    note = _processes_note(row) or ("within the noise floor" if _within_floor(row) else "")
    if row.get("tested") is False and verdict in ("better", "worse", "changed"):
        note = "untested: one value a side, may be noise"
    return f"{verdict}{moved}" + (f" ({note})" if note else "")


def _floor_text(floor: Mapping[str, Any]) -> str:
    source = floor["source"]
    if source == "calibration":
        where = ", ".join(
            f"calibration {c['run_id']} of machine {c['fingerprint']}"
            for c in floor["calibrations"]
        )
    else:
        where = {"default": "d5's default, no calibration stored"}.get(source, source)
    return f"{floor['value']:.1%} ({where})"


def _worse_names(rows: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(
        r["metric"]
        + (f" ({_labels(r['labels'])})" if r["labels"] else "")
        + f" ({_moved(r['change'], r['unit'])})"
        for r in rows
    )


@results.command("compare")
@click.argument("baseline")
@click.argument("candidate")
@click.option(
    "--alpha",
    type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
    default=None,
    help="Significance level of the test between processes (default: d5's, 0.01; see "
    "docs/measurement.md).",
)
@click.option(
    "--min-effect",
    type=click.FloatRange(0.0, min_open=False),
    default=None,
    help="Smallest relative change of the median reported as better or worse, instead "
    "of the noise floor (default: $D5_NOISE_FLOOR, else the machine's noise floor from "
    "'d5 calibrate', else d5's, 0.05 = 5%).",
)
@click.option(
    "--fail-if-worse",
    "fail_if_worse",
    is_flag=True,
    help="Exit with code 1 when any measurement of CANDIDATE is significantly worse "
    "(slower, less accurate, ...).",
)
@click.option(
    "--fail-if-slower",
    "fail_if_worse",
    is_flag=True,
    hidden=True,
    help="Old name of --fail-if-worse.",
)
@json_option
@db_option
def compare_runs(
    baseline: str,
    candidate: str,
    alpha: float | None,
    min_effect: float | None,
    fail_if_worse: bool,
    as_json: bool,
    db: str | Path | None,
) -> None:
    """Compare CANDIDATE with BASELINE, measurement by measurement.

    Measurements are paired by metric and labels. The unit of comparison is the worker
    process: for each pair, the median of each side's process medians with its interval
    between processes, the ratio CANDIDATE/BASELINE with its interval, Welch's t-test
    on the log process medians and the verdict: better, worse or same, by the direction
    each quantity declares (lower is better for times and losses, higher for accuracies
    and rates). A change is called only when it is significant between processes AND
    larger than the machine's noise floor ('d5 calibrate'). With fewer than 3 processes
    on a side, the between-run variance is unknown: the table says so, and a change is
    called only when it is well beyond the noise floor. Runs measured in different
    environments, on a busy machine or under different loads are compared with a
    warning naming what differs.
    """
    from d5core.report.comparison import compare_runs as compare

    with _open(db) as store:
        comparison = compare(store, baseline, candidate, alpha=alpha, min_effect=min_effect)
    for warning in comparison.warnings():
        _warn(warning)
    if as_json:
        print_json(comparison.to_json())
    else:
        _print_comparison(comparison)
        if comparison.metrics_unmatched:
            console().print(
                "metrics in only one run: " + ", ".join(sorted(comparison.metrics_unmatched)),
                highlight=False,
            )
    worse = comparison.worse()
    if fail_if_worse and worse:
        a, b = comparison.baseline, comparison.candidate
        raise CheckFailed(f"run {b.id} is worse than {a.id} in: {_worse_names(worse)}")


def _print_header(c: Comparison) -> None:
    from d5core.measure.nested import MIN_PROCESSES

    differences = None if c.same_environment else c.environment_differences
    out = console()
    for label, run in (("baseline ", c.baseline), ("candidate", c.candidate)):
        out.print(
            f"{label} {run.id}  {run.kind} {run.name}  ({run.status}, {_when(run.created)} "
            f"UTC); load {_load_text(run)}",
            markup=False,
            highlight=False,
        )
    if differences is not None:
        out.print(
            "WARNING: the runs were measured in different environments; differences may "
            "come from the environment:",
            style="bold yellow",
            markup=False,
            highlight=False,
        )
        for line in differences or ["(fingerprints differ)"]:
            out.print(f"  {line}", markup=False, highlight=False)
    for warning in [*c.load["warnings"], *c.threads["warnings"], *c.settings_warnings]:
        out.print(f"WARNING: {warning}", style="bold yellow", markup=False, highlight=False)
    for note in c.noise_floor["notes"]:
        out.print(f"note: {note}", markup=False, highlight=False)
    env_line = "same environment" if differences is None else "different environments"
    out.print(
        f"{env_line}; ratio = candidate / baseline of the medians of process medians; "
        f"noise floor {_floor_text(c.noise_floor)}; a verdict other than 'same' needs Welch's "
        f"t-test on the log process medians at p < {c.alpha:g} (at least {MIN_PROCESSES} "
        "processes a side) and a change above the noise floor, or, with fewer processes, "
        "a change well beyond the noise floor; better or worse by each quantity's "
        "direction (lower is better for times and losses, higher for accuracies and rates)",
        markup=False,
        highlight=False,
    )


def _print_comparison(c: Comparison) -> None:
    out = console()
    _print_header(c)
    busy = (bool(c.load["baseline"].get("busy")), bool(c.load["candidate"].get("busy")))
    if c.comparisons:
        out.print(_comparison_table(c.comparisons, busy))
    for label, items in (("baseline", c.only_in_baseline), ("candidate", c.only_in_candidate)):
        if items:
            names = ", ".join(
                m["metric"] + (f" ({_labels(m['labels'])})" if m["labels"] else "") for m in items
            )
            out.print(f"only in the {label}: {names}", markup=False, highlight=False)
    if c.metrics:
        out.print(_metrics_table(c.metrics, c.metrics_min_effect, busy))
    if any(busy) and (c.comparisons or c.metrics):
        out.print(BUSY_LEGEND, markup=False, highlight=False)


def _ratio_text(r: Mapping[str, Any]) -> str:
    low, high = r.get("ratio_ci_low"), r.get("ratio_ci_high")
    ci = "" if low is None or high is None else f" [{low:.3f}, {high:.3f}]"
    return f"{r['ratio']:.3f}{ci}"


def _marked(text: str, busy: bool) -> str:
    """A cell's text (escaped), with the busy-machine mark when its run had one."""
    return escape(text) + (f" [bold yellow]{BUSY_MARK}[/]" if busy else "")


def _comparison_table(
    rows: Sequence[Mapping[str, Any]], busy: tuple[bool, bool] = (False, False)
) -> Table:
    table = Table(
        title="measurements",
        title_justify="left",
        caption="p: the test between processes (Welch; 'noise-floor' with too few "
        "processes); processes: baseline / candidate",
        caption_justify="left",
    )
    for column in ("metric", "labels", "baseline median [CI]", "candidate median [CI]"):
        table.add_column(column, overflow="fold")
    for column in ("ratio [CI]", "p", "processes", "better", "verdict"):
        table.add_column(column)
    for r in rows:
        if "error" in r:
            table.add_row(
                r["metric"], _labels(r["labels"]), "-", "-", "-", "-", "-", "-", "not compared"
            )
            table.add_row("", f"  {r['error']}", "", "", "", "", "", "", "")
            continue
        unit = r["unit"]
        p = "-" if r["p_value"] is None else f"{r['p_value']:.3g}"
        table.add_row(
            r["metric"],
            _labels(r["labels"]),
            _marked(_median_ci(r["baseline"], unit), busy[0]),
            _marked(_median_ci(r["candidate"], unit), busy[1]),
            _ratio_text(r),
            p if r["method"] == "welch" else f"{p} ({r['method']})",
            f"{r['n_baseline']} / {r['n_candidate']}",
            r["better"] or "unknown",
            f"[{_VERDICT_STYLE.get(r['verdict'], '')}]{escape(_verdict_text(r))}[/]",
        )
    return table


def _metrics_table(
    metric_rows: Sequence[Mapping[str, Any]],
    min_effect: float,
    busy: tuple[bool, bool] = (False, False),
) -> Table:
    table = Table(
        title="metrics",
        title_justify="left",
        caption=f"one value per run, so no test: a change above {min_effect:.1%} is called "
        "better or worse, and may be noise",
        caption_justify="left",
    )
    for column in ("name", "labels", "baseline", "candidate", "ratio", "better", "verdict"):
        table.add_column(column)
    for m in metric_rows:
        table.add_row(
            m["name"],
            _labels(m["labels"]),
            _marked(_with_unit(m["baseline"], m["unit"]), busy[0]),
            _marked(_with_unit(m["candidate"], m["unit"]), busy[1]),
            "-" if m["ratio"] is None else f"{m['ratio']:.3f}",
            m["better"] or "unknown",
            f"[{_VERDICT_STYLE.get(m['verdict'] or '', '')}]{_verdict_text(m)}[/]",
        )
    return table


# -- table -------------------------------------------------------------------------------
@results.command("table")
@click.argument("runs", nargs=-1)
@click.option("--last", type=click.IntRange(min=1), default=None, help="The N newest runs.")
@click.option(
    "--kind",
    default="train",
    show_default=True,
    help="With --last: runs of this kind: train (training runs by --by), op (operator "
    "benchmarks by backend) or net (network benchmarks by executor).",
)
@click.option(
    "--by",
    "group_by",
    default="executor",
    show_default=True,
    help="Recipe setting that tells the rows apart (executor, optimizer, batch_size, ...); "
    "runs of different recipes always get rows of their own.",
)
@json_option
@db_option
def table_runs(
    runs: tuple[str, ...],
    last: int | None,
    kind: str,
    group_by: str,
    as_json: bool,
    db: str | Path | None,
) -> None:
    """Stored runs side by side, from any number of environments.

    ``--kind op`` / ``net``: one row per operator problem or network case, one column per
    backend or executor, each cell from its newest run: median per call [95% CI], the
    environment it was measured in and the ratio to the row's fastest (operators: the
    newest stored validation too).

    ``--kind train``: one row per recipe (hash) and value of one setting, with time to
    accuracy, final test accuracy and throughput over the row's runs.

    Every summary takes one value per run. Time to accuracy counts every complete or
    diverged run as MLPerf does (a run that did not reach the target is infinitely
    slow): median with the 95% CI of the median (min-max below 6 runs) and the olympic
    mean (best and worst dropped). Final accuracy: median and range. Throughput: each
    run's samples/s, median and CI over the runs. Failed and unfinished runs are counted.

    Every table tags its values with their environment (E1, E2, ...), lists each
    environment's numpy, BLAS, thread variables and framework versions, and warns when
    they differ; it never refuses to compare.
    """
    from d5core.plugins import get_plugin_manager

    tables = get_plugin_manager().merged("d5_results_tables")
    if bool(runs) == (last is not None):
        raise UsageError("give run ids, or --last N, not both and not neither")
    if kind not in tables:
        *others, last_kind = tables
        known = f"{', '.join(others)} or {last_kind}" if others else last_kind
        raise UsageError(f"--kind {kind!r} has no table; use {known}")
    with _open(db) as store:
        records = (
            [store.get_run(r) for r in runs] if runs else store.list_runs(limit=last, kind=kind)
        )
        if runs:
            kinds = {r.kind for r in records}
            kind = kinds.pop() if len(kinds) == 1 and kinds <= set(tables) else "train"
        tables[kind](store, records, by=group_by, as_json=as_json)
